#!/usr/bin/env bash
# nanovmd with real guests, run INSIDE the test host by checks.sh (section "daemon"):
# tests/daemon/testhost_checks.py drives the daemon over HTTP; its TAP lines are
# renumbered into checks.sh's.
# tests/daemon/testhost_templates.py (templates), testhost_session_checks.py (sessions,
# background commands, binary output), testhost_rest_checks.py (rest states: sleep,
# autosleep, reboot), testhost_archive_checks.py (archive and unarchive) and
# testhost_export_checks.py (snapshot export and import) and testhost_load_checks.py (20
# sandboxes 4 at a time, 64 concurrent streamed execs and a client that never reads,
# kill -9 of the daemon during a create, a snapshot and a fork) run after it the same way.
# Usage (sourced): . daemon_checks.sh   with $nanovm $work set.
# What a script left in the test host's /tmp (a tmpfs of half its memory): its daemons,
# their VMMs and state directories, each of which may hold a pinned copy of the root
# image (472 MiB; the pin of the current image stays after the last sandbox). The
# scripts name their state directories /tmp/nv?.XXXXXX.
dm_clean() {
local f pid
pkill -KILL -f "daemon --state-dir /tmp/nv" 2>/dev/null
for f in /tmp/nv?.*/vms/*/vm.json; do
  [ -f "$f" ] || continue
  pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$f" 2>/dev/null) &&
    kill -KILL "$pid" 2>/dev/null
done
rm -rf /tmp/nv?.*
}
dm_run() {  # dm_run SCRIPT SECONDS
dm=$work/daemon/$1
mkdir -p "$dm"
dm_started=$SECONDS
timeout "$2" python3 "$(dirname "$0")/../daemon/$1" "$nanovm" >"$dm/tap" 2>"$dm/stderr"
dm_status=$?
relay_tap "$dm/tap"
if [ "$dm_status" != 0 ] && ! grep -q '^not ok ' "$dm/tap"; then
  not_ok "$1 ended with status $dm_status (124: its $2 s ran out)"; diag "$dm/stderr" 30
fi
dm_clean
}
dm_run testhost_checks.py 440
dm_run testhost_templates.py 300
dm_run testhost_session_checks.py 240
dm_run testhost_rest_checks.py 240
dm_run testhost_archive_checks.py 300
dm_run testhost_export_checks.py 180
dm_run testhost_load_checks.py 360
