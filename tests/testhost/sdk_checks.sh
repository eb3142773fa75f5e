#!/usr/bin/env bash
# The Python client (sdk/python) against a real nanovmd, run INSIDE the test host by
# checks.sh (section "sdk"): sdk/python/tests/daemon_test.py (every client method) and
# seed_usage_test.py (the seed documents' usage shapes) and docs_examples_test.py
# (docs/python.md's examples and the README's, as written), each under
# tools/testhost/with-daemon (a daemon of its own). Their TAP lines are renumbered
# into checks.sh's; a check waiting for a daemon endpoint stays "# SKIP <why>". Then the
# README's quick start, sdk/python/examples/quickstart.py, as written.
# Usage (sourced): . sdk_checks.sh   with $work set.
sd=$work/sdk
mkdir -p "$sd"
root=$(cd "$(dirname "$0")/../.." && pwd)
for t in daemon_test seed_usage_test docs_examples_test; do
  timeout 200 "$root/tools/testhost/with-daemon" -- python3 "$root/sdk/python/tests/$t.py" >"$sd/$t.tap" 2>"$sd/$t.stderr"
  st=$?
  relay_tap "$sd/$t.tap" "$t: "
  if [ "$st" != 0 ] && ! grep -q '^not ok ' "$sd/$t.tap"; then
    not_ok "$t ended with status $st (124: its 200 s ran out)"; diag "$sd/$t.stderr" 30
  elif [ "$st" != 0 ]; then
    diag "$sd/$t.stderr" 20
  fi
done
# The README's quick start as written (sdk/python/examples/quickstart.py).
timeout 120 "$root/tools/testhost/with-daemon" -- python3 "$root/sdk/python/examples/quickstart.py" >"$sd/quickstart.out" 2>"$sd/quickstart.stderr"
st=$?
if [ "$st" = 0 ] && grep -qx 'restored: first result' "$sd/quickstart.out" && grep -qx 'child: other' "$sd/quickstart.out"; then
  ok "sdk/python/examples/quickstart.py (the README's quick start) runs as written"
else
  not_ok "sdk/python/examples/quickstart.py (the README's quick start) runs as written (exit $st)"
  diag "$sd/quickstart.out" 10; diag "$sd/quickstart.stderr" 20
fi
