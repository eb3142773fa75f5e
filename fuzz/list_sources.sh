#!/bin/sh
# Prints sources of the fuzz build, one per line, relative to fuzz/ (fuzz/meson.build
# calls it, so new files are picked up at the next `meson setup --reconfigure`):
#   list_sources.sh harnesses   every fuzz/*_fuzz.cpp (one libFuzzer binary each)
#   list_sources.sh devices     every devices/**/*.cpp (the code under test: virtio,
#                               the legacy PC devices, the buses)
set -eu
cd "$(dirname "$0")"
case "${1:-}" in
  harnesses) find . -maxdepth 1 -name '*_fuzz.cpp' | sed 's|^\./||' | LC_ALL=C sort ;;
  devices) find ../devices -name '*.cpp' | LC_ALL=C sort ;;
  *) echo "usage: $0 harnesses|devices" >&2; exit 2 ;;
esac
