#!/bin/sh
# The layering of api/ (README "Layout"): the VM layer (api/vm/) and the agent client
# are below both front ends, so they include nothing of the CLI (api/cli/) or the
# daemon (api/daemon/); the daemon includes nothing of the CLI; the VMM, devices,
# snapshots and guest-init include nothing of api/. Prints every offending include
# and exits 1; exits 0 when there is none.
# Usage: layout_check.sh SOURCE_ROOT
set -u
root=${1:?usage: layout_check.sh SOURCE_ROOT}
cd "$root" || exit 1
status=0
# forbid DIR PATTERN WHAT: no #include "PATTERN..." in any source under DIR.
forbid() {
  [ -d "$1" ] || return 0
  found=$(grep -rnE --include='*.cpp' --include='*.hpp' "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"$2" "$1")
  if [ -n "$found" ]; then
    printf '%s\n' "$found" | sed "s|\$|   <- $1 must not include $3|"
    status=1
  fi
}
for dir in api/vm api/agent_client; do
  forbid "$dir" 'api/cli/' 'the CLI (api/cli/)'
  forbid "$dir" 'api/daemon/' 'the daemon (api/daemon/)'
done
forbid api/daemon 'api/cli/' 'the CLI (api/cli/)'
for dir in vmm devices snapshot guest-init; do
  forbid "$dir" 'api/' 'api/'
done
[ "$status" = 0 ] && echo "layout: every include goes down the layers"
exit "$status"
