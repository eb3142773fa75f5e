#!/usr/bin/env bash
# Linux-guest checks, run INSIDE the test host (real kvm_amd) by linux_guest_suite.
# Prints TAP (one line per behaviour) for one SECTION, each in its own test-host boot:
#   base      the probe-guest suite, boots across shapes, exit statuses, the console
#   devices   virtio-blk/rng/vsock/net with a Linux guest (device_checks.sh)
#   agent     nanovm run and the vm commands with the guest agent (agent_checks.sh)
#   snapshot  snapshot, restore and fork of a Linux guest (snapshot_checks.sh)
#   daemon    nanovmd's API with real sandboxes (daemon_checks.sh)
#   sdk       the Python client against nanovmd (sdk_checks.sh)
# Usage: checks.sh SECTION NANOVM KVM_TESTS KERNEL_DIR DEFAULT_ROOT_DISK TINY_ROOT_DISK
set -uo pipefail
section=$1 nanovm=$2 kvm_tests=$3 kernel_dir=$4 default_root=${5:-} tiny_root=${6:-}
case $section in
  base|devices|agent|snapshot|daemon|sdk) ;;
  *) echo "Bail out! unknown section '$section' (base, devices, agent, snapshot, daemon or sdk)"; exit 2 ;;
esac
work=${NANOVM_SCRATCH:?checks.sh runs inside tools/testhost/run}/linux-guest-checks
mkdir -p "$work"
testhost_tools=$(cd "$(dirname "$0")/../../tools/testhost" && pwd)
# The kvm tracepoints in a ring buffer that stops at a nested triple fault
# (tools/testhost/kvm-trace; kept with the crashed VM's logs). NANOVM_TESTHOST_TRACE=0
# leaves them off.
[ "${NANOVM_TESTHOST_TRACE:-1}" = 0 ] || "$testhost_tools/kvm-trace" start 2>/dev/null ||
  echo "# kvm-trace: the kvm tracepoints could not be enabled"

# NANOVM_TESTHOST_SHMEM_THP=advise (or always, within_size): the test host's
# transparent_hugepage/shmem_enabled for this run (Linux's default is never), so that
# nanovm's madvise(MADV_HUGEPAGE)d memfd guest RAM gets 2 MiB pages: for testing every
# section on huge-page guest RAM (README "Guest RAM and huge pages"). The THP counters
# of /proc/vmstat at the end show how much of it happened.
thp_sysfs=/sys/kernel/mm/transparent_hugepage
if [ -n "${NANOVM_TESTHOST_SHMEM_THP:-}" ]; then
  echo "$NANOVM_TESTHOST_SHMEM_THP" >"$thp_sysfs/shmem_enabled" ||
    { echo "Bail out! cannot set $thp_sysfs/shmem_enabled to $NANOVM_TESTHOST_SHMEM_THP"; exit 2; }
fi
# NANOVM_TESTHOST_KHUGEPAGED_MAX_PTES_NONE=N: khugepaged's max_ptes_none for the run
# (default 511: it may collapse a 2 MiB range with up to 511 holes, filling them with
# zeros; 0: only ranges with every page present).
if [ -n "${NANOVM_TESTHOST_KHUGEPAGED_MAX_PTES_NONE:-}" ]; then
  echo "$NANOVM_TESTHOST_KHUGEPAGED_MAX_PTES_NONE" >"$thp_sysfs/khugepaged/max_ptes_none" ||
    { echo "Bail out! cannot set $thp_sysfs/khugepaged/max_ptes_none"; exit 2; }
fi
# NANOVM_TESTHOST_KHUGEPAGED_SCAN_MS=N: khugepaged's scan_sleep_millisecs for the run
# (default 10000: it looks at 4096 pages every 10 s, so a 4-minute section sees few
# collapses; 1000 makes them ten times as likely, for CI's snapshot run with advise).
if [ -n "${NANOVM_TESTHOST_KHUGEPAGED_SCAN_MS:-}" ]; then
  echo "$NANOVM_TESTHOST_KHUGEPAGED_SCAN_MS" >"$thp_sysfs/khugepaged/scan_sleep_millisecs" ||
    { echo "Bail out! cannot set $thp_sysfs/khugepaged/scan_sleep_millisecs"; exit 2; }
fi
# NANOVM_TESTHOST_SPY=S: every S seconds, what each nanovm process and khugepaged is
# doing (state, wchan, kernel stack), the THP counters and the test host's kernel log's
# end, appended to $NANOVM_TESTHOST_KEEP/spy.log (9p writes are synchronous: it
# survives a run killed at a stall or timeout), for finding where a section hangs.
if [ -n "${NANOVM_TESTHOST_SPY:-}" ] && [ -n "${NANOVM_TESTHOST_KEEP:-}" ]; then
  (
    while sleep "$NANOVM_TESTHOST_SPY"; do
      {
        echo "=== $(cat /proc/uptime)"
        ps -eo pid,stat,wchan:32,etimes,args | grep -E 'nanovm|khugepaged|kcompactd|checks.sh|snapshot_checks' | grep -v grep | cut -c1-220
        for pid in $(pgrep -f 'nanovm' ) $(pgrep khugepaged); do
          for t in /proc/$pid/task/*; do
            st=$(cat "$t/stack" 2>/dev/null | head -12 | tr '\n' '|')
            [ -n "$st" ] && echo "  $pid/${t##*/} $(cat "$t/comm" 2>/dev/null) $(awk '{print $3}' "$t/stat" 2>/dev/null): $st"
          done
        done
        grep -E '^thp_|^nr_shmem_hugepages|^nr_file_hugepages' /proc/vmstat | tr '\n' ' '; echo
        for f in $(ls -t "${NANOVM_RUN_DIR:-/nonexistent}"/vms/*/vmm.log "$work"/*/*.err 2>/dev/null | head -n 4); do
          echo "-- $f"; tail -n 4 "$f" | cut -c1-300
        done
        dmesg | tail -n 5
      } >>"$NANOVM_TESTHOST_KEEP/spy.log" 2>&1
    done
  ) &
  echo "# spy: every $NANOVM_TESTHOST_SPY s into \$NANOVM_TESTHOST_KEEP/spy.log"
fi
echo "# test host THP: enabled $(cat "$thp_sysfs/enabled" 2>/dev/null), shmem_enabled $(cat "$thp_sysfs/shmem_enabled" 2>/dev/null), khugepaged max_ptes_none $(cat "$thp_sysfs/khugepaged/max_ptes_none" 2>/dev/null), scan_sleep_millisecs $(cat "$thp_sysfs/khugepaged/scan_sleep_millisecs" 2>/dev/null)"

n=0 failed=0
ok()     { n=$((n + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $*"; }
check()  { local name=$1; shift; if "$@"; then ok "$name"; else not_ok "$name"; fi; }
# Shows the tail of a file as TAP diagnostics.
diag()   { sed 's/^/# /' "$1" | tail -n "${2:-25}"; }
# Passes another TAP file's checks on under this script's numbering (names prefixed
# with $2, a SKIP directive kept); its comments and Bail out! lines as comments.
relay_tap() {
  local line
  while IFS= read -r line; do
    case $line in
      "ok "*) ok "${2:-}${line#ok * - }" ;;
      "not ok "*) not_ok "${2:-}${line#not ok * - }" ;;
      "#"*) echo "$line" ;;
      "Bail out!"*) echo "# ${line}" ;;
    esac
  done <"$1"
}

# boot_guest NAME ARGS... : runs nanovm boot with the console in $work/NAME.console,
# stderr in $work/NAME.err; sets $status.
boot_guest() {
  local name=$1; shift
  timeout 300 "$nanovm" boot --console "$work/$name.console" "$@" 2>"$work/$name.err" </dev/null
  status=$?
}

if [ "$section" = base ]; then
# 1. The probe-guest suite on a real (non-PVM) /dev/kvm.
if "$kvm_tests" >"$work/kvm_tests.log" 2>&1; then
  ok "probe-guest suite (tests/kvm) passes on kvm_amd"
else
  not_ok "probe-guest suite (tests/kvm) passes on kvm_amd"; diag "$work/kvm_tests.log" 40
fi
# Its probes triple-fault on purpose, which stopped the kvm trace: start it afresh.
[ "${NANOVM_TESTHOST_TRACE:-1}" = 0 ] || "$testhost_tools/kvm-trace" start 2>/dev/null

# 2. Boots across the shape matrix: nproc and MemTotal seen from inside the guest.
for shape in 1:128 2:1024 4:4096 4:128 1:4096; do
  cpus=${shape%%:*} mib=${shape##*:} name="boot-$cpus-$mib"
  boot_guest "$name" --cpus "$cpus" --memory "$mib" \
    --append 'nanovm.exec="echo NPROC=$(nproc); grep MemTotal /proc/meminfo"'
  nproc_seen=$(sed -n 's/^NPROC=\([0-9]*\).*/\1/p' "$work/$name.console" | head -1)
  memtotal_kib=$(awk '/^MemTotal:/ {print $2; exit}' "$work/$name.console")
  # MemTotal is RAM less what the kernel keeps for itself: within 10% below the
  # request -- except that the kernel's fixed share (the first MiB, its image, the
  # memmap, per-CPU areas: 16-16.5 MiB for this kernel with 1-4 vCPUs) is more than
  # 10% of a 128 MiB guest, so small guests get 18 MiB of slack instead.
  slack_kib=$((mib * 1024 / 10)); [ "$slack_kib" -ge 18432 ] || slack_kib=18432
  low_kib=$((mib * 1024 - slack_kib)) high_kib=$((mib * 1024))
  if [ "$status" = 0 ] && [ "${nproc_seen:-x}" = "$cpus" ] && [ -n "$memtotal_kib" ] &&
     [ "$memtotal_kib" -ge "$low_kib" ] && [ "$memtotal_kib" -le "$high_kib" ]; then
    ok "boot $cpus vCPU / $mib MiB: nproc=$nproc_seen MemTotal=${memtotal_kib} kB, exit 0"
  else
    not_ok "boot $cpus vCPU / $mib MiB: want nproc=$cpus MemTotal in [$low_kib, $high_kib] kB and exit 0; got nproc=${nproc_seen:-none} MemTotal=${memtotal_kib:-none} exit $status"
    diag "$work/$name.console"; diag "$work/$name.err" 10
  fi
done

# 3. The ready line carries the guest's uptime; --until-ready powers off after it,
# and guest-init reports no error on the way (mounts, power-off).
boot_guest ready --until-ready
if [ "$status" = 0 ] && grep -Eq '^nanovm-init: ready uptime_ms=[0-9]+ ' "$work/ready.console" &&
   ! grep -q '^nanovm-init: error' "$work/ready.console"; then
  ok "--until-ready: ready line with uptime, then poweroff with exit 0 and no guest-init error ($(grep -o 'uptime_ms=[0-9]*' "$work/ready.console"))"
else
  not_ok "--until-ready: ready line with uptime, then poweroff with exit 0 and no guest-init error (exit $status)"
  diag "$work/ready.console"; diag "$work/ready.err" 10
fi

# 4. The ELF vmlinux boots as well as the bzImage.
boot_guest vmlinux --kernel "$kernel_dir/vmlinux" --until-ready
if [ "$status" = 0 ] && grep -q '^nanovm-init: ready' "$work/vmlinux.console"; then
  ok "ELF vmlinux boots to the ready line"
else
  not_ok "ELF vmlinux boots to the ready line (exit $status)"; diag "$work/vmlinux.console"; diag "$work/vmlinux.err" 10
fi

# 5. How the guest ends maps to the documented exit statuses.
boot_guest poweroff --append 'nanovm.exec="poweroff; sleep 30"'
check "guest poweroff ends the VMM with status 0 (got $status)" test "$status" = 0
boot_guest reboot --append 'nanovm.exec="reboot; sleep 30"'
check "guest reboot ends the VMM with status 3 (got $status)" test "$status" = 3
boot_guest panic --append 'nanovm.exec="echo c > /proc/sysrq-trigger; sleep 30"'
if [ "$status" = 4 ] && grep -qi 'crash\|panic\|reset' "$work/panic.err"; then
  ok "guest panic (sysrq c) ends the VMM with the crash status 4"
else
  not_ok "guest panic (sysrq c) ends the VMM with the crash status 4 (got $status)"; diag "$work/panic.console"; diag "$work/panic.err" 10
fi

# 6. The console is an 8250 that both prints and reads: input reaches the guest.
printf 'echo typed-$((6*7))\nexit\n' > "$work/stdin.txt"
timeout 300 "$nanovm" boot --console "$work/stdin.console" <"$work/stdin.txt" 2>"$work/stdin.err"
status=$?
if [ "$status" = 0 ] && grep -q '^typed-42' "$work/stdin.console"; then
  ok "console input reaches the guest shell and its output comes back"
else
  not_ok "console input reaches the guest shell and its output comes back (exit $status)"; diag "$work/stdin.console"
fi

fi  # base

# 7. The virtio devices (tests/testhost/device_checks.sh).
if [ "$section" != devices ]; then
  :
elif [ -n "$default_root" ] && [ -n "$tiny_root" ]; then
  . "$(dirname "$0")/device_checks.sh"
else
  not_ok "virtio device checks: root disks not given (tools/rootfs/build --print-path default|tiny)"
fi

# 8. nanovm run and the vm commands with the guest agent (tests/testhost/agent_checks.sh).
if [ "$section" != agent ]; then
  :
elif [ -n "$default_root" ]; then
  . "$(dirname "$0")/agent_checks.sh"
else
  not_ok "agent checks: the default root disk was not given (tools/rootfs/build --print-path default)"
fi

# 9. Snapshot, restore and fork of a Linux guest (tests/testhost/snapshot_checks.sh).
if [ "$section" != snapshot ]; then
  :
elif [ -n "$default_root" ]; then
  . "$(dirname "$0")/snapshot_checks.sh"
else
  not_ok "snapshot checks: the default root disk was not given (tools/rootfs/build --print-path default)"
fi

# 10. nanovmd with real sandboxes (tests/testhost/daemon_checks.sh).
if [ "$section" = daemon ]; then
  . "$(dirname "$0")/daemon_checks.sh"
fi

# 11. The Python client against nanovmd (tests/testhost/sdk_checks.sh).
if [ "$section" = sdk ]; then
  . "$(dirname "$0")/sdk_checks.sh"
fi

# A failure may be the test host's (an oops, the OOM killer, a segfault): its kernel
# log's end as diagnostics (linux_guest_suite passes "# dmesg:" lines to stderr).
[ "$failed" = 0 ] || dmesg 2>/dev/null | tail -n 30 | sed 's/^/# dmesg: /'
# Nested guests that crashed (a triple fault, a guest panic; not the base section's
# deliberate panic): "# nested guest crash: NAME: REASON" lines, which
# tools/testhost/outcome reads; their logs and the kvm trace go to
# $NANOVM_TESTHOST_KEEP (<cache>/testhost/kept/ on the host).
[ "$failed" = 0 ] || "$testhost_tools/nested-crashes" --except panic.err --except panic-exec.err "$work"
# A failure after the test host's own kernel broke (the stack-guard crash and stalls of
# QEMU TCG's nested SVM, tools/testhost/README.md) says nothing about nanovm: status
# 125, which linux_guest_suite retries like any other test-host failure.
if [ "$failed" != 0 ] && oops=$(dmesg 2>/dev/null | grep -v 'traps:' | grep -m 1 -E 'BUG: |Oops|general protection fault|Kernel panic'); then
  echo "# the test host's own kernel failed during these checks: $oops"
  echo "1..$n"
  exit 125
fi

echo "# test host THP counters at the end: $(grep -E '^thp_(file|split|fault|collapse)' /proc/vmstat 2>/dev/null | tr '\n' ' ')"
# The plan comes last (TAP allows it at the end): every check above counts.
echo "1..$n"
[ "$failed" = 0 ]
