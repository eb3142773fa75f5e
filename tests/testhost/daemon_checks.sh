#!/usr/bin/env bash
# nanovmd with real guests, run INSIDE the test host by checks.sh (section "daemon"):
# tests/daemon/testhost_checks.py drives the daemon over HTTP; its TAP lines are
# renumbered into checks.sh's.
# Usage (sourced): . daemon_checks.sh   with $nanovm $work set.
dm=$work/daemon
mkdir -p "$dm"
timeout 440 python3 "$(dirname "$0")/../daemon/testhost_checks.py" "$nanovm" >"$dm/tap" 2>"$dm/stderr"
dm_status=$?
while IFS= read -r line; do
  case $line in
    "ok "*) ok "${line#ok * - }" ;;
    "not ok "*) not_ok "${line#not ok * - }" ;;
    "#"*) echo "$line" ;;
    "Bail out!"*) echo "# ${line}" ;;
  esac
done <"$dm/tap"
if [ "$dm_status" != 0 ] && ! grep -q '^not ok ' "$dm/tap"; then
  not_ok "the daemon checks ended with status $dm_status (124: their 440 s ran out)"; diag "$dm/stderr" 30
fi
