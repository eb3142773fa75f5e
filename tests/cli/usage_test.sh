#!/usr/bin/env bash
# The nanovm command line's answers to wrong use, without KVM: status 2 and one line
# naming what was wrong. TAP. Usage: usage_test.sh NANOVM
nanovm=${1:?usage: usage_test.sh NANOVM}
n=0 failed=0
# expect NAME STATUS PATTERN ARGS...: `nanovm ARGS` exits STATUS, stderr matches PATTERN.
expect() {
  local name=$1 want=$2 pattern=$3 err status; shift 3
  err=$("$nanovm" "$@" 2>&1 >/dev/null </dev/null); status=$?
  n=$((n + 1))
  if [ "$status" = "$want" ] && grep -qE -- "$pattern" <<<"$err"; then
    echo "ok $n - $name (exit $status: $(head -n 1 <<<"$err"))"
  else
    failed=$((failed + 1))
    echo "not ok $n - $name: want exit $want and /$pattern/, got exit $status:"; sed 's/^/# /' <<<"$err"
  fi
}
expect "an unknown command is named, with the list of commands" 2 \
  "^nanovm: unknown command 'frob'; the commands are boot, doctor, daemon, run, vm, sandbox, snapshot, template \(nanovm --help\)$" frob
expect "an unknown option before the command is named" 2 "unknown option '--bogus'" --bogus vm list
expect "no command at all asks for one" 2 "A subcommand is required"
expect "an unknown vm command is named, with the list of vm commands" 2 \
  "^nanovm: unknown command 'frob'; the vm commands are start, .*, fork \(nanovm vm --help\)$" vm frob
expect "a memory size out of range names the option" 2 "memory" boot --memory 1 --kernel /nonexistent
expect "vm exec of an unknown VM: status 125 (exec keeps 0-124 for the command)" 125 "." vm exec nosuchvm -- true
# The sandbox rest-state commands check their values before asking the daemon.
id=00000000-0000-4000-8000-000000000000
expect "sandbox update without a change asks for one" 2 "nothing to change: give --timeout S" sandbox update $id
expect "sandbox update --timeout -1 names the option and its range" 2 "--timeout: Value -1 not in range 0 to 604800" \
  sandbox update $id --timeout -1
expect "sandbox update --autosleep over 7 days" 2 "--autosleep: Value 604801 not in range 0 to 604800" \
  sandbox update $id --autosleep 604801
expect "sandbox update --autosleep of a word" 2 "--autosleep" sandbox update $id --autosleep soon
expect "sandbox update --timeout with --no-timeout" 2 "--timeout and --no-timeout: one or the other" \
  sandbox update $id --timeout 5 --no-timeout
expect "sandbox update --label with --clear-labels" 2 "--label and --clear-labels: one or the other" \
  sandbox update $id -l a=b --clear-labels
expect "sandbox update --label without '='" 2 "--label novalue: want KEY=VALUE" sandbox update $id -l novalue
expect "sandbox update --label with an empty key" 2 "--label =v: want KEY=VALUE" sandbox update $id -l =v
expect "sandbox create --on-timeout of another word" 2 "--on-timeout: frob not in \{delete,archive\}" \
  sandbox create --on-timeout frob
expect "sandbox create --timeout -5" 2 "--timeout: Value -5 not in range" sandbox create --timeout -5
expect "sandbox create --autosleep -1" 2 "--autosleep: Value -1 not in range" sandbox create --autosleep -1
expect "sandbox logs --tail-bytes 0" 2 "--tail-bytes: Value 0 not in range 1 to 1048576" sandbox logs $id --tail-bytes 0
expect "sandbox logs --tail-bytes over 1 MiB" 2 "--tail-bytes: Value 1048577 not in range" \
  sandbox logs $id --tail-bytes 1048577
expect "sandbox archive without an id" 2 "id is required" sandbox archive
expect "sandbox unarchive with an unknown option" 2 "--wait" sandbox unarchive $id --wait
expect "sandbox metrics without an id" 2 "id is required" sandbox metrics
# A VMM never dies because its launcher did: one whose readiness pipe has lost its
# reader (the launcher, nanovmd, gone) and that fails (here: a bad id) gets EPIPE on
# its error line and exits 1, not 141 (SIGPIPE).
status_file=$(mktemp)
{ sleep 0.3; "$nanovm" _vmm --id not-an-id --lock-fd -1 --ready-fd 1 2>/dev/null; echo $? >"$status_file"; } | true
n=$((n + 1))
if [ "$(cat "$status_file")" = 1 ]; then
  echo "ok $n - a VMM whose readiness pipe has no reader exits 1, not of SIGPIPE"
else
  failed=$((failed + 1))
  echo "not ok $n - a VMM whose readiness pipe has no reader: exit $(cat "$status_file") (141: SIGPIPE)"
fi
rm -f "$status_file"
echo "1..$n"
[ "$failed" = 0 ]
