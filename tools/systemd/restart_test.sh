#!/usr/bin/env bash
# systemd-restart: `systemctl restart` of tools/systemd/nanovmd.service does not kill
# the sandboxes' VMMs (KillMode=process): a sandbox made before the restart has the
# same VMM after it, and answers an exec. Needs systemd as PID 1, root, and a
# /dev/kvm that boots the guest; otherwise skipped, saying which. TAP.
# Usage: restart_test.sh BUILD_DIR
build=$(cd "${1:?usage: restart_test.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
skip() { echo "1..0 # SKIP systemd-restart: $*"; exit 0; }
[ -d /run/systemd/system ] || skip "systemd is not PID 1 on this host ($(cat /proc/1/comm))"
[ "$(id -u)" = 0 ] || skip "needs root (a system unit)"
command -v systemctl >/dev/null || skip "no systemctl"

unit=nanovmd-restart-test-$$
state=$(mktemp -d /var/tmp/nanovmd-restart-test.XXXXXX)
export NANOVM_STATE_DIR=$state  # where the CLI finds the daemon
nanovm() { "$build/nanovm" "$@"; }
cleanup() {
  [ -n "${sid:-}" ] && nanovm sandbox rm "$sid" >/dev/null 2>&1
  systemctl stop "$unit" >/dev/null 2>&1
  rm -f "/run/systemd/system/$unit.service"
  systemctl daemon-reload
  rm -rf "$state"
}
trap cleanup EXIT
sed -e "s|@BUILD@|$build|" -e "s|@CACHE@|${NANOVM_CACHE:-$HOME/.cache/nanovm}|" \
    -e "s|--state-dir /var/lib/nanovm|--state-dir $state|" -e "/^StateDirectory/d" -e "/^RequiresMountsFor/d" \
    "$here/nanovmd.service" >"/run/systemd/system/$unit.service"
systemctl daemon-reload
wait_socket() { for _ in $(seq 100); do [ -S "$state/nanovmd.sock" ] && nanovm sandbox ls >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
n=0 failed=0
check() { n=$((n + 1)); if eval "$2"; then echo "ok $n - $1"; else failed=$((failed + 1)); echo "not ok $n - $1"; fi; }
systemctl start "$unit"
check "the unit starts and the daemon answers" wait_socket
sid=$(nanovm sandbox create --cpus 1 --memory 256 2>"$state/create.err") || {
  echo "# create: $(cat "$state/create.err")"; echo "1..$n"; skip "the guest does not boot here (the create failed)"; }
vmm_pid=$(python3 -c 'import json,glob,sys; print(json.load(open(glob.glob(sys.argv[1] + "/vms/*/vm.json")[0]))["pid"])' "$state")
check "a sandbox's VMM runs (pid $vmm_pid)" "kill -0 $vmm_pid"
systemctl restart "$unit"
check "the daemon answers after systemctl restart" wait_socket
check "the VMM survived the restart (pid $vmm_pid)" "kill -0 $vmm_pid"
check "the sandbox is running after the restart" "nanovm sandbox get $sid --json | grep -q '\"state\":\"running\"'"
check "and answers an exec" "[ \"\$(nanovm sandbox exec $sid -- echo hi)\" = hi ]"
echo "1..$n"
[ "$failed" = 0 ]
