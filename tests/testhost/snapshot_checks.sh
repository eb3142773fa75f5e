#!/usr/bin/env bash
# Snapshot, restore and fork of a Linux guest with its agent (issue 5), run INSIDE the
# test host by checks.sh (section "snapshot"). Prints TAP lines numbered from $n.
# Usage (sourced): . snapshot_checks.sh   with $nanovm $work $default_root set.
# Guests are small (256 MiB, 1 vCPU) on purpose: the test host is emulated with 2
# CPUs, and the fork check runs 5 VMs at once; with 2 vCPUs each (10 nested vCPUs)
# the guests were starved past the agent's connect timeout in 1 of 8 runs under load.
# Multi-vCPU snapshots are covered by the probe suite ([snapshot], 2 vCPUs).

sn=$work/snapshot
rm -rf "$sn"; mkdir -p "$sn"
export NANOVM_RUN_DIR=$sn/run
# A VMM that ends keeps its directory (vmm.log, console.log) until `vm list` removes
# it: a VM that dies during these checks is then reported with the end of its log.
export NANOVM_KEEP_STATE=1
simg=$default_root
svm() { timeout 300 "$nanovm" vm "$@" </dev/null; }
sshow() { local f; for f in "$@"; do [ -s "$sn/$f" ] && { echo "# $f:"; diag "$sn/$f" 15; }; done; }
# dump_crash ID: what a crashed VM left (console, VMM log) as "# crashed VM ID:" lines,
# which linux_guest_suite copies to stderr on a failure.
declare -A dumped
dump_crash() {
  local id=$1 d=$NANOVM_RUN_DIR/vms/$1
  dumped[$id]=1
  "$testhost_tools/nested-crashes" "$d"  # "# nested guest crash: ..." (tools/testhost/outcome); keeps its logs
  echo "# crashed VM $id: $(grep -m 1 'ended: crash' "$d/vmm.log")"
  # A kernel warning earlier on (the taint flag W) is often the first sign: its start.
  grep -m 1 -A 14 -e '------------\[ cut here \]' -e 'WARNING: ' "$d/console.log" 2>/dev/null |
    sed "s/^/# crashed VM $id: first warning: /"
  echo "# crashed VM $id: its console.log:"; tail -n 40 "$d/console.log" 2>/dev/null | sed "s/^/# crashed VM $id: /"
  echo "# crashed VM $id: its vmm.log:"; tail -n 15 "$d/vmm.log" | sed "s/^/# crashed VM $id: /"
}
# sstop ID...: `vm stop`, then notes how each VM ended (its vmm.log's "ended:" line,
# read at once: the next `vm start|restore|fork` removes a dead VM's directory). At
# the end of the section every one of them must have powered off.
stopped=()
sstop() {
  local id end
  for id in "$@"; do
    [ -n "$id" ] || continue
    svm stop "$id" >/dev/null 2>&1
    for _ in $(seq 20); do  # the VMM writes the line as it exits: up to 2 s
      end=$(grep -m 1 -o 'ended: [a-z]*' "$NANOVM_RUN_DIR/vms/$id/vmm.log" 2>/dev/null) && break
      sleep 0.1
    done
    stopped+=("$id=${end:-no end line}")
    [ "$end" = "ended: crash" ] && dump_crash "$id"
  done
}
# guest ID CMD: runs the shell line CMD in VM ID, stdout only.
guest() { svm exec "$1" -- sh -c "$2" 2>>"$sn/exec.err"; }

# S1. A running VM with a file and a background counter is snapshotted; it runs on.
# It keeps 2 fork standbys (api/vm/standby_keeper.hpp): S5's fork of 4 children then
# puts 2 into standbys and starts 2 cold.
parent=$(svm start --image "$simg" --memory 256 --cpus 1 --fork-standby 2 2>"$sn/start.err")
guest "$parent" 'echo before-snapshot > /root/kept.txt; sync' >/dev/null
guest "$parent" 'setsid sh -c "i=0; while :; do i=\$((i+1)); echo \$i > /tmp/count; sleep 0.2; done" </dev/null >/dev/null 2>&1 &' >/dev/null
# A command streaming its output over vsock while the snapshot is taken.
( exec timeout 600 "$nanovm" vm exec "$parent" -- sh -c 'echo $$ > /tmp/streamer.pid; while :; do echo tick; sleep 0.5; done' \
    >"$sn/stream.out" 2>"$sn/stream.err" </dev/null ) &
streamer=$!
sleep 2
count_before=$(guest "$parent" 'cat /tmp/count')
svm snapshot "$parent" --wait-durable "$sn/snap1" >"$sn/snap1.json" 2>"$sn/snap1.err"; snap_status=$?
snap_host_time=$(date +%s)
count_parent_after=$(sleep 1; guest "$parent" 'cat /tmp/count')
if [ "$snap_status" = 0 ] && grep -q '"durable":true' "$sn/snap1.json" && [ -f "$sn/snap1/manifest" ] &&
   [ -n "$count_before" ] && [ "${count_parent_after:-0}" -gt "$count_before" ]; then
  ok "vm snapshot --wait-durable of a running VM: durable, parent counts on ($count_before -> $count_parent_after): $(cat "$sn/snap1.json")"
else
  not_ok "vm snapshot --wait-durable (exit $snap_status, counter $count_before -> $count_parent_after)"
  sshow start.err snap1.json snap1.err exec.err
fi

# S2. Restore into a new VMM after >= 15 s: file, running counter, agent, clock.
sleep $((15 - ($(date +%s) - snap_host_time) > 0 ? 15 - ($(date +%s) - snap_host_time) : 0))
restored=$(svm restore "$sn/snap1" 2>"$sn/restore.err"); restore_status=$?
kept=$(guest "$restored" 'cat /root/kept.txt')
c1=$(guest "$restored" 'cat /tmp/count'); sleep 2; c2=$(guest "$restored" 'cat /tmp/count')
# The guest's clock against the host's read just before and just after it (an exec
# takes a while under emulation): the skew is how far it lies outside that window.
h0=$(date +%s.%N); gnow=$(guest "$restored" 'date +%s.%N'); h1=$(date +%s.%N)
skew=$(python3 -c 'import sys; h0, g, h1 = map(float, sys.argv[1:]); print("%.2f" % max(h0 - g, g - h1, 0.0))' \
  "$h0" "${gnow:-0}" "$h1" 2>/dev/null)
if [ "$restore_status" = 0 ] && [ "$kept" = before-snapshot ]; then
  ok "vm restore (file backend): the file written before the snapshot is there; the agent answers"
else
  not_ok "vm restore: file kept (exit $restore_status, got '$kept')"; sshow restore.err exec.err
fi
if [ -n "$c1" ] && [ -n "$c2" ] && [ "$c1" -ge "$count_before" ] && [ "$c2" -gt "$c1" ]; then
  ok "a background process keeps counting across the restore ($count_before at snapshot, $c1 -> $c2 after)"
else
  not_ok "background counter across restore (at snapshot $count_before, after '$c1' -> '$c2')"
fi
check "the restored guest's clock is within 1 s of the host's, 15+ s after the snapshot (skew ${skew:-?} s outside the host's read window of $(python3 -c "print('%.2f' % (${h1:-0} - ${h0:-0}))") s)" \
  python3 -c 'import sys; sys.exit(0 if sys.argv[1] and float(sys.argv[1]) <= 1.0 else 1)' "${skew:-99}"

# The stream that was open at the snapshot: reset in the copy (the agent ends its
# command with the connection), still flowing in the parent; new streams work.
sleep 1
is_alive='p=$(cat /tmp/streamer.pid); kill -0 "$p" 2>/dev/null && echo alive || echo gone'
in_copy=$(guest "$restored" "$is_alive"); in_parent=$(guest "$parent" "$is_alive")
ticks1=$(wc -l <"$sn/stream.out"); sleep 2; ticks2=$(wc -l <"$sn/stream.out")
kill "$streamer" 2>/dev/null; wait "$streamer" 2>/dev/null
check "a vsock stream cut by the snapshot is reset in the copy (its command $in_copy), flows on in the parent ($in_parent, $ticks1 -> $ticks2 lines); new streams work" \
  test "$in_copy" = gone -a "$in_parent" = alive -a "$ticks2" -gt "$ticks1"
[ "$in_parent" = alive ] || sshow exec.err stream.err

# S3. The same snapshot with the uffd backend.
uffd_vm=$(svm restore --memory-backend uffd "$sn/snap1" 2>"$sn/restore-uffd.err"); uffd_status=$?
uffd_kept=$(guest "$uffd_vm" 'cat /root/kept.txt')
check "vm restore --memory-backend uffd: the file is there (exit $uffd_status)" test "$uffd_kept" = before-snapshot
sstop "$uffd_vm"

# S4. Snapshot of a restored VM, and its restore (issue 18): its RAM is frozen in the
# pause like a booted VM's and written after it ("background": true), as a diff over
# snap1's memory layer that snap2's manifest names in a chain line; the restore of
# snap2 keeps its files and its counting process. A fork of the restored VM (nothing
# copied), and a restore into a standby made ahead by another VM.
guest "$restored" 'echo second-generation > /root/gen2.txt; sync' >/dev/null
svm snapshot "$restored" --wait-durable "$sn/snap2" >"$sn/snap2.json" 2>"$sn/snap2.err"; s2=$?
third=$(svm restore "$sn/snap2" 2>"$sn/restore2.err")
gen=$(guest "$third" 'cat /root/kept.txt /root/gen2.txt' | tr '\n' ' ')
check "a restored VM is snapshotted and restored again: both files there (exit $s2, got '$gen')" \
  test "$gen" = "before-snapshot second-generation "
check "the restored VM's snapshot froze its RAM and copied it after the pause: $(tr -d '\n' <"$sn/snap2.json" | head -c 300)" \
  grep -q '"background": *true' "$sn/snap2.json"
chain_line=$(grep '^chain ' "$sn/snap2/manifest" 2>/dev/null)
check "snap2's manifest names the layer it chains to, in snap1 (${chain_line:-no chain line})" \
  test "${chain_line%% *}" = chain -a "$(echo "$chain_line" | cut -d' ' -f2)" = ../snap1/memory.layer
t1=$(guest "$third" 'cat /tmp/count'); sleep 2; t2=$(guest "$third" 'cat /tmp/count')
check "the background process counts on in the restore of the restored VM's snapshot ($t1 -> $t2)" \
  test -n "$t1" -a -n "$t2" -a "${t2:-0}" -gt "${t1:-0}"
rkid=$(svm fork "$restored" 2>"$sn/rfork.err"); rfs=$?
rgen=$(guest "$rkid" 'cat /root/gen2.txt')
check "a restored VM forks: its child has its file (exit $rfs, got '$rgen')" test "$rgen" = second-generation
[ "$rgen" = second-generation ] || sshow rfork.err
# The restored VM's standbys served its chain ahead: the child only moved that
# userfaultfd registration onto the frozen layer (api/vm/fork_standby.hpp).
rkid_log=$(grep -m 1 -o "its holes served from the parent's chain, opened ahead" "$NANOVM_RUN_DIR/vms/$rkid/vmm.log" 2>/dev/null)
check "the restored VM's fork child started in a standby that served the parent's chain ahead ('${rkid_log:-not in its vmm.log}')" \
  test -n "$rkid_log"
[ -n "$rkid_log" ] || diag "$NANOVM_RUN_DIR/vms/$rkid/vmm.log" 15
sstop "$rkid"
# A restore into $third's standby (same shape: made ahead, as fork children use them).
for _ in $(seq 50); do sock=$(ls "$NANOVM_RUN_DIR/vms/$third"/standby-*.sock 2>/dev/null | head -1); [ -n "$sock" ] && break; sleep 0.2; done
into=$(svm restore "$sn/snap2" --into-standby "${sock:-none}" 2>"$sn/restore-standby.err")
into_gen=$(guest "$into" 'cat /root/gen2.txt')
into_log=$(grep -m 1 -o 'a restore in a standby' "$NANOVM_RUN_DIR/vms/$into/vmm.log" 2>/dev/null)
check "vm restore into a standby made ahead: its VMM is that standby ('${into_log:-not in its vmm.log}'), the file is there ('$into_gen')" \
  test "$into_log" = "a restore in a standby" -a "$into_gen" = second-generation
[ "$into_gen" = second-generation ] || sshow restore-standby.err
sstop "$into"
sstop "$third"
sstop "$restored"

# S5. fork -n 4: four children, each with the parent's file, different random bytes,
# private writes. Children keep their state directory if they end (for the
# diagnostics on failure; the final `vm list` removes them).
svm fork "$parent" -n 4 >"$sn/fork.out" 2>"$sn/fork.err"; fork_status=$?
mapfile -t kids <"$sn/fork.out"
: >"$sn/random.txt"; kid_files=""
for k in "${kids[@]}"; do
  guest "$k" 'head -c 32 /dev/urandom | od -An -tx1 | tr -d " \n"; echo' >>"$sn/random.txt"
  guest "$k" 'python3 -c "import os; print(os.urandom(16).hex())"' >>"$sn/random.txt"
  guest "$k" "echo $k > /root/mine.txt" >/dev/null
  kid_files+="$(guest "$k" 'cat /root/kept.txt'):"
done
distinct=$(sort -u "$sn/random.txt" | grep -c .)
own_ok=1
for k in "${kids[@]}"; do [ "$(guest "$k" 'cat /root/mine.txt')" = "$k" ] || own_ok=0; done
parent_mine=$(guest "$parent" 'cat /root/mine.txt 2>/dev/null || echo none')
if [ "$fork_status" = 0 ] && [ "${#kids[@]}" = 4 ] && [ "$distinct" = 8 ] &&
   [ "$kid_files" = "before-snapshot:before-snapshot:before-snapshot:before-snapshot:" ] &&
   [ "$own_ok" = 1 ] && [ "$parent_mine" = none ]; then
  ok "vm fork -n 4: 4 children with the parent's file; /dev/urandom and os.urandom differ in all 8 reads; writes stay private"
else
  not_ok "vm fork -n 4 (exit $fork_status, ${#kids[@]} ids, $distinct distinct of 8, files '$kid_files', own $own_ok, parent '$parent_mine')"
  sshow fork.out fork.err random.txt exec.err
  # A child that ended: its VMM's log and console (kept: NANOVM_KEEP_STATE=1 above),
  # and what the test host's kernel said (OOM, segfaults).
  for k in "${kids[@]}"; do
    d=$NANOVM_RUN_DIR/vms/$k
    if [ -f "$d/vmm.log" ] && ! svm status "$k" >/dev/null 2>&1; then
      echo "# child $k is gone: vmm.log:"; diag "$d/vmm.log" 10; echo "# its console:"; diag "$d/console.log" 25
    fi
  done
  dmesg | grep -iE 'oom|killed process|segfault|general protection' | tail -n 5 | sed 's/^/# dmesg: /'
fi

# S5b. Which children went to the parent's standbys (their vmm.log says so), and the
# parent makes new standbys after the fork (0.5 s later; up to 30 s in the emulator).
from_standby=0
for k in "${kids[@]}"; do
  grep -q 'a fork into a standby' "$NANOVM_RUN_DIR/vms/$k/vmm.log" 2>/dev/null && from_standby=$((from_standby + 1))
done
for _ in $(seq 60); do
  standbys=$(ls "$NANOVM_RUN_DIR/vms/$parent/" 2>/dev/null | grep -c '^standby-.*\.sock$')
  [ "$standbys" -ge 2 ] && break
  sleep 0.5
done
# No standby holds anything of its parent VMM's but what it was given (its parent's
# vmm.lock least of all: a claimed one would hold it as another VM's VMM).
held=0
for pid in $(pgrep -f -- "_standby --socket $NANOVM_RUN_DIR/vms/$parent/"); do
  ls -l "/proc/$pid/fd" 2>/dev/null | grep -q "vms/$parent/vmm.lock" && held=$((held + 1))
done
check "vm fork -n 4 of a VM with 2 standbys: $from_standby children took a standby (the rest started cold); the parent has $standbys standbys again, $held of them holding its vmm.lock" \
  test "$from_standby" = 2 -a "$standbys" = 2 -a "$held" = 0
[ "$from_standby" = 2 ] || { sshow fork.err; diag "$NANOVM_RUN_DIR/vms/$parent/vmm.log" 15; }

# S6. Fork of a forked child (it keeps 1 standby, the default: the grandchild takes
# it). The fork command runs without NANOVM_KEEP_STATE (the child's VMM has it): the
# grandchild's VMM takes the command's environment, so at its clean power-off it
# removes its directory (a VMM that failed, or kept the parent's setting, leaves it).
NANOVM_KEEP_STATE=0 svm fork "${kids[0]:-none}" -n 1 >"$sn/fork2.out" 2>"$sn/fork2.err"; f2=$?
grandchild=$(head -1 "$sn/fork2.out")
gc=$(guest "$grandchild" 'cat /root/mine.txt')
gc_standby=$(grep -c 'a fork into a standby' "$NANOVM_RUN_DIR/vms/$grandchild/vmm.log" 2>/dev/null)
svm stop "${grandchild:-none}" >/dev/null 2>&1
for _ in $(seq 20); do [ -e "$NANOVM_RUN_DIR/vms/${grandchild:-none}" ] || break; sleep 0.1; done
gc_dir=removed
if [ -e "$NANOVM_RUN_DIR/vms/${grandchild:-none}" ]; then
  gc_dir="kept, $(grep -m 1 -o 'ended: [a-z]*' "$NANOVM_RUN_DIR/vms/$grandchild/vmm.log" 2>/dev/null || echo 'no end line')"
fi
check "a forked child forks again: the grandchild has the child's file (exit $f2), from the child's standby ($gc_standby), with the fork command's environment (its directory at its stop: $gc_dir)" \
  test "$gc" = "${kids[0]:-x}" -a "$gc_standby" = 1 -a "$gc_dir" = removed
if [ "$gc_dir" != removed ]; then
  if grep -q 'ended: crash' "$NANOVM_RUN_DIR/vms/$grandchild/vmm.log" 2>/dev/null; then dump_crash "$grandchild"
  else diag "$NANOVM_RUN_DIR/vms/$grandchild/vmm.log" 10; fi
fi
sstop "${kids[@]}"

# S7. A flipped byte in a part is refused, naming the part.
for part in vm.state memory.layer disk.ext4; do
  rm -rf "$sn/bad"; cp -a --sparse=always "$sn/snap1" "$sn/bad"; rm -f "$sn/bad/memory.flat"
  size=$(stat -c %s "$sn/bad/$part")
  python3 - "$sn/bad/$part" "$size" <<'EOF'
import sys
path, size = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:
    # vm.state: a byte in the middle; the others: a byte of the first data after 1 MiB
    off = size // 2 if path.endswith("vm.state") else None
    if off is None:
        import os
        fd = f.fileno()
        off = os.lseek(fd, 1 << 20, os.SEEK_DATA) + 100
    f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0x40]))
EOF
  svm restore "$sn/bad" >"$sn/bad.out" 2>"$sn/bad-$part.err"; bad_status=$?
  check "a flipped byte in $part is refused, naming it (exit $bad_status: $(head -c 200 "$sn/bad-$part.err"))" \
    grep -q "$part" "$sn/bad-$part.err"
done

# S8. SIGKILL of the VMM in the middle of a snapshot leaves nothing durable-looking.
stall=$(NANOVM_TEST_SNAPSHOT_STALL=layer timeout 300 "$nanovm" vm start --image "$simg" --memory 256 --cpus 1 2>"$sn/stall-start.err" </dev/null)
if [ -z "$stall" ]; then
  # (an empty id would make the pkill below match, and kill, every VMM)
  not_ok "SIGKILL mid-snapshot: the VM to stall did not start"
  sshow stall-start.err
else
  svm snapshot "$stall" "$sn/stalled" >"$sn/stall.json" 2>"$sn/stall.err"
  for _ in $(seq 100); do grep -q "test stall at layer" "$NANOVM_RUN_DIR/vms/$stall/vmm.log" 2>/dev/null && break; sleep 0.2; done
  pkill -KILL -f -- "_vmm --id $stall" ; sleep 1
  # Read the dead VMM's log now: the next VM command removes a dead VM's directory.
  stalled_at_layer=no
  grep -q "test stall at layer" "$NANOVM_RUN_DIR/vms/$stall/vmm.log" 2>/dev/null && stalled_at_layer=yes
  svm restore "$sn/stalled" >/dev/null 2>"$sn/stalled-restore.err"; stalled_status=$?
  if [ ! -e "$sn/stalled/manifest" ] && [ "$stalled_status" != 0 ] && grep -qi "manifest" "$sn/stalled-restore.err" &&
     [ "$stalled_at_layer" = yes ]; then
    ok "SIGKILL of the VMM while its snapshot is being written: no manifest, restore refuses it ($(head -c 120 "$sn/stalled-restore.err"))"
  else
    not_ok "SIGKILL mid-snapshot leaves no durable-looking snapshot (manifest: $([ -e "$sn/stalled/manifest" ] && echo yes || echo no), restore exit $stalled_status, stalled at the layer: $stalled_at_layer)"
    sshow stall.json stall.err stalled-restore.err
    # Which condition failed: the stalled VMM's log, if its directory is still there.
    if [ -f "$NANOVM_RUN_DIR/vms/$stall/vmm.log" ]; then echo "# the stalled VM's vmm.log:"; diag "$NANOVM_RUN_DIR/vms/$stall/vmm.log" 12
    else echo "# the stalled VM's directory is gone: $(ls "$NANOVM_RUN_DIR/vms" 2>&1 | tr '\n' ' ')"; fi
  fi
fi

# S8b. Layer chains are compacted: 6 snapshots of one VM (a new file before each)
# leave at most 4 *.layer files in its directory (5 frozen + the top without
# compaction; 4 frozen are merged after the 5th), its log names the compaction, and
# the first, a middle (its layers merged away in the VM's directory, kept by its own
# links) and the last snapshot restore with their files and no later one.
chain=$(svm start --image "$simg" --memory 256 --cpus 1 2>"$sn/chain-start.err"); chain_status=$?
for i in 1 2 3 4 5 6; do
  guest "$chain" "echo gen$i > /root/c$i.txt; sync" >/dev/null
  svm snapshot "$chain" --wait-durable "$sn/chain$i" >"$sn/chain$i.json" 2>>"$sn/chain.err" || chain_status=$?
done
chain_dir=$NANOVM_RUN_DIR/vms/$chain
chain_layers=99
for _ in $(seq 60); do  # up to 30 s
  chain_layers=$(ls "$chain_dir"/*.layer 2>/dev/null | wc -l)
  [ "$chain_layers" -le 4 ] && break
  sleep 0.5
done
compacted=$(grep -m1 "compacted .* layers into 1" "$chain_dir/vmm.log" 2>/dev/null)
if [ "$chain_status" = 0 ] && [ "$chain_layers" -le 4 ] && [ -n "$compacted" ]; then
  ok "6 snapshots of one VM leave $chain_layers layer files in its directory; its log: $compacted"
else
  not_ok "6 snapshots of one VM leave at most 4 layer files, compacted (exit $chain_status, $chain_layers files, log '$compacted')"
  sshow chain-start.err chain.err exec.err
  ls -ls "$chain_dir" 2>&1 | sed 's/^/# /'
  echo "# the VM's vmm.log:"; diag "$chain_dir/vmm.log" 15
fi
sstop "$chain"
for i in 1 3 6; do
  from=$(svm restore "$sn/chain$i" 2>"$sn/chain-restore$i.err"); from_status=$?
  got=$(guest "$from" 'cat /root/c*.txt' | tr '\n' ' ')
  want=$(for j in $(seq "$i"); do printf 'gen%s ' "$j"; done)
  check "vm restore of snapshot $i of those 6 (exit $from_status): the files written before it, no later one (got '$got')" \
    test "$got" = "$want"
  [ "$got" = "$want" ] || sshow "chain-restore$i.err" exec.err
  sstop "$from"
done

# S9. A snapshot into a non-empty directory is refused; the VM is unharmed.
svm snapshot "$parent" "$sn/snap1" >/dev/null 2>"$sn/nonempty.err"; ne=$?
alive=$(guest "$parent" 'echo alive')
if [ "$ne" = 1 ] && [ "$alive" = alive ] && [ -s "$sn/nonempty.err" ]; then
  ok "vm snapshot into a non-empty directory exits 1 with a message; the VM runs on ($(head -c 160 "$sn/nonempty.err"))"
else
  not_ok "vm snapshot into a non-empty directory exits 1 with a message; the VM runs on (exit $ne, parent '$alive')"
  sshow nonempty.err exec.err
  echo "# the parent's vmm.log:"; diag "$NANOVM_RUN_DIR/vms/$parent/vmm.log" 15
fi

sstop "$parent"
# Every other VM of this section that crashed and whose directory is still there
# (NANOVM_KEEP_STATE=1 keeps it until the next start, restore or fork).
for d in "$NANOVM_RUN_DIR"/vms/*/; do
  crashed_id=$(basename "$d")
  [ -z "${dumped[$crashed_id]:-}" ] && grep -q 'ended: crash' "$d/vmm.log" 2>/dev/null && dump_crash "$crashed_id"
done
# Every VM stopped with `vm stop` powered off: its init announced it on the control
# port (ioperm + out from user mode) before the reset. A restored VM whose TR the
# emulator took for a busy TSS got #GP there, init died and the VM "crashed" at stop.
not_off=""
for e in "${stopped[@]}"; do [ "${e#*=}" = "ended: poweroff" ] || not_off+=" ${e%%=*} (${e#*=})"; done
check "every one of the ${#stopped[@]} VMs stopped here (started, restored from each snapshot, forked) powered off cleanly at vm stop${not_off:+; not:$not_off}" \
  test -z "$not_off"
svm list >/dev/null 2>&1  # removes dead VMs' dirs and unused fork bases
# Standbys (nanovm _standby) end with their VM; a claimed one was a VM's VMM.
for _ in $(seq 20); do pgrep -f -- "$nanovm _(vmm|standby)" >/dev/null || break; sleep 0.2; done
check "after every VM stopped: no VMM or standby process ($(pgrep -f -- "$nanovm _(vmm|standby)" | wc -l)), no fork base left ($(ls "$NANOVM_RUN_DIR/forks" 2>/dev/null | wc -l) bases)" \
  test "$(pgrep -f -- "$nanovm _(vmm|standby)" | wc -l)" = 0 -a "$(ls "$NANOVM_RUN_DIR/forks" 2>/dev/null | wc -l)" = 0
