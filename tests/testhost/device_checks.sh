#!/usr/bin/env bash
# virtio device checks with a Linux guest, run INSIDE the test host by checks.sh (its
# section "devices", one test-host boot). Prints TAP lines numbered from $n (checks.sh).
# Usage (sourced): . device_checks.sh   with $nanovm $work $default_root $tiny_root set.
# Data sizes are small on purpose: the guest runs under emulation (big transfers
# belong in tools/bench/run blk|vsock).

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dev=$work/devices
mkdir -p "$dev"

# boot_root NAME ROOT_SPEC EXEC ARGS... : boots from ROOT_SPEC with nanovm.exec=EXEC.
boot_root() {
  local name=$1 root=$2 exec=$3; shift 3
  timeout 300 "$nanovm" boot --cpus 2 --memory 512 --console "$dev/$name.console" --root "$root" \
    --append "nanovm.exec=\"$exec\"" "$@" 2>"$dev/$name.err" </dev/null
  status=$?
}
stat_of() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }

cp --sparse=always "$tiny_root" "$dev/root-rw.img"

# D1. ext4 root read-write on virtio-blk; a guest fdatasync of a block device reaches
# the backing file as a counted FLUSH; an unsynced direct write causes none.
boot_root rw "$dev/root-rw.img" \
  "echo persisted-$$ > /persist.txt; dd if=/dev/urandom of=/dev/vdb bs=4k count=8 oflag=direct 2>/dev/null; echo NOSYNC-DONE" \
  --scratch "$dev/scratch-a.img" --stats "$dev/rw-a.json"
flush_a=$(stat_of "$dev/rw-a.json" 'd["disks"][1]["flushes"]' 2>/dev/null)
boot_root rw2 "$dev/root-rw.img" \
  "dd if=/dev/urandom of=/dev/vdb bs=4k count=8 oflag=direct 2>/dev/null; sync -d /dev/vdb; sync -d /dev/vdb; echo SYNC-DONE" \
  --scratch "$dev/scratch-a.img" --stats "$dev/rw-b.json"
flush_b=$(stat_of "$dev/rw-b.json" 'd["disks"][1]["flushes"]' 2>/dev/null)
persisted=$(debugfs -R 'cat /persist.txt' "$dev/root-rw.img" 2>/dev/null)
if [ "$persisted" = "persisted-$$" ] && e2fsck -fn "$dev/root-rw.img" >"$dev/fsck.log" 2>&1; then
  ok "ext4 root on virtio-blk read-write: the guest's file is in the image, which fscks clean"
else
  not_ok "ext4 root on virtio-blk read-write (file: '${persisted}')"; diag "$dev/rw.console"; diag "$dev/fsck.log" 10
fi
if [ "${flush_a:-x}" = 0 ] && [ "${flush_b:-0}" -ge 2 ] 2>/dev/null; then
  ok "guest fdatasync reaches the backing file as counted flushes (unsynced run: $flush_a, two syncs: $flush_b)"
else
  not_ok "guest fdatasync -> flush (want 0 without sync, >= 2 with two; got '${flush_a:-none}' and '${flush_b:-none}')"
  diag "$dev/rw2.console"; diag "$dev/rw2.err" 5
fi

# D2. Data the guest fsync'ed survives SIGKILL of the VMM.
cp --sparse=always "$tiny_root" "$dev/root-kill.img"
# Only the VMM is killed (timeout, its parent, then ends normally): no job
# notice from bash, and exactly what a crash of the VMM process looks like.
timeout 300 "$nanovm" boot --cpus 1 --memory 256 --console "$dev/kill.console" --root "$dev/root-kill.img" \
    --append 'nanovm.exec="echo survives-kill > /k.txt; sync -d /k.txt; sync -d /; echo FSYNCED; sleep 600"' \
    2>"$dev/kill.err" </dev/null &
vmm=$!
for _ in $(seq 600); do grep -q '^FSYNCED' "$dev/kill.console" 2>/dev/null && break; sleep 0.2; done
pkill -KILL -f "^$nanovm boot .*root-kill.img" || kill -KILL "$vmm"; wait "$vmm"
# The fsync'ed data may sit in the ext4 journal only: replay it (as the next mount
# would) before reading the file with debugfs, which does not.
e2fsck -fy "$dev/root-kill.img" >"$dev/kill-fsck.log" 2>&1
killed=$(debugfs -R 'cat /k.txt' "$dev/root-kill.img" 2>/dev/null)
if [ "$killed" = survives-kill ]; then
  ok "a file the guest fsync'ed is in the image after SIGKILL of the VMM"
else
  not_ok "a file the guest fsync'ed is in the image after SIGKILL of the VMM (got '$killed')"
  diag "$dev/kill.console" 10; diag "$dev/kill-fsck.log" 10
fi

# D3. A read-only disk: EROFS in the guest, writes to the device refused.
boot_root ro "$tiny_root,ro" \
  "touch /x 2>&1; echo RO=\$(cat /sys/block/vda/ro); dd if=/dev/zero of=/dev/vda bs=512 count=1 2>&1 | head -1"
if grep -q 'Read-only file system' "$dev/ro.console" && grep -q '^RO=1' "$dev/ro.console"; then
  ok "read-only disk: the guest sees ro=1 and EROFS"
else
  not_ok "read-only disk: want ro=1 and EROFS"; diag "$dev/ro.console"
fi

# D4. The scratch disk: 16 GiB to the guest, sparse on the host.
rm -f "$dev/scratch-b.img"
boot_root scratch "$tiny_root,ro" \
  "echo SIZE=\$(blockdev --getsize64 /dev/vdb); dd if=/dev/urandom of=/dev/vdb bs=1M count=2 seek=8000 oflag=direct 2>/dev/null; echo WROTE" \
  --scratch "$dev/scratch-b.img"
size=$(sed -n 's/^SIZE=\([0-9]*\).*/\1/p' "$dev/scratch.console")
alloc_kib=$(du -k "$dev/scratch-b.img" | cut -f1)
apparent=$(stat -c %s "$dev/scratch-b.img")
if [ "$size" = 17179869184 ] && [ "$apparent" = 17179869184 ] && [ "$alloc_kib" -le 4096 ]; then
  ok "scratch disk: guest sees 16 GiB; host file allocates ${alloc_kib} KiB after a 2 MiB write"
else
  not_ok "scratch disk (guest size ${size:-none}, file $apparent bytes, ${alloc_kib} KiB allocated)"; diag "$dev/scratch.console"
fi

# D5. virtio-rng feeds /dev/hwrng.
boot_root rng "$tiny_root,ro" \
  "echo RNG=\$(cat /sys/class/misc/hw_random/rng_current) BYTES=\$(head -c 4096 /dev/hwrng | wc -c)"
if grep -q '^RNG=virtio_rng.0 BYTES=4096' "$dev/rng.console"; then
  ok "virtio-rng: /dev/hwrng is virtio_rng.0 and gives 4096 bytes"
else
  not_ok "virtio-rng: /dev/hwrng"; diag "$dev/rng.console"
fi

# D6. vsock both ways: 64 concurrent 1 MiB streams each way, checksums equal.
tar -C "$here/guest" -cf "$dev/guest-scripts.tar" vsock_guest.py
sock=$dev/vm.vsock
# The host side first: its listener at ${sock}_5000 must exist before the guest's
# streams start (a guest connect to a missing listener is refused with RST, as it
# should be); it keeps retrying its own connects until the VM serves port 1234.
# On an idle machine the whole section takes ~160 s, this check part of it; with a
# compile beside it, it ran past 150 s three times out of three. The limits (300 s)
# stay inside the section's attempt timeout (600 s), so that a hang fails this check
# with its diagnostics instead of timing out the whole test host (seen once, in a
# fresh-clone run of the whole suite).
# One try. With NANOVM_TESTHOST_RETRY_CHECKS=1 (a 2-vCPU test host by choice) a try
# that ends in a guest crash the VMM reports (a triple fault, a panic) is tried
# again, up to 3 tries; any other failure (a checksum, a refused stream, a hang)
# fails the check at once. With a 2-vCPU test host this check was the emulator's
# worst case (the CI run of 2026-11-30: it failed in all three section attempts that
# got to it, the last a triple fault of vCPU 1); the 1-vCPU default has not crashed
# (tools/testhost/README.md "Whose bug").
vsock_try() {
  rm -f "$sock" "${sock}_5000"
  timeout 300 python3 "$here/guest/vsock_host.py" "$sock" 64 1048576 >"$dev/vsock-host.log" 2>&1 &
  local host_side=$! vmm
  for _ in $(seq 300); do [ -S "${sock}_5000" ] && break; sleep 0.1; done
  ( timeout 300 "$nanovm" boot --cpus 2 --memory 1024 --console "$dev/vsock.console" --root "$default_root,ro" \
      --disk "$dev/guest-scripts.tar,ro" --vsock "$sock" \
      --append 'nanovm.exec="mkdir -p /tmp/t && tar -xf /dev/vdb -C /tmp/t && python3 /tmp/t/vsock_guest.py 64 1048576"' \
      2>"$dev/vsock.err" </dev/null ) &
  vmm=$!
  wait "$host_side"
  wait "$vmm"; vsock_status=$?
}
vsock_crashes=""
vsock_tries=1
[ "${NANOVM_TESTHOST_RETRY_CHECKS:-0}" = 1 ] && vsock_tries=3
for vsock_round in $(seq "$vsock_tries"); do
  vsock_try
  grep -q 'the guest crashed' "$dev/vsock.err" || break
  vsock_crashes+=" try $vsock_round: $(grep -m 1 -o 'the guest crashed.*' "$dev/vsock.err");"
  echo "# nested guest crash retried in place: vsock try $vsock_round of 3: $(grep -m 1 -o 'the guest crashed.*' "$dev/vsock.err"); its console:"
  diag "$dev/vsock.console" 12
done
if grep -q '^vsock-host: streams=64 ok=64' "$dev/vsock-host.log" &&
   grep -q '^vsock-guest: streams=64 ok=64' "$dev/vsock.console" && [ "$vsock_status" = 0 ]; then
  ok "vsock: 64 host->guest and 64 guest->host streams of 1 MiB echoed with equal sha256${vsock_crashes:+ (on try $vsock_round; earlier:$vsock_crashes)}"
else
  not_ok "vsock: 64+64 streams (VMM exit $vsock_status, try $vsock_round)"; diag "$dev/vsock-host.log" 10; diag "$dev/vsock.console" 15; diag "$dev/vsock.err" 10
fi

# D7. virtio-net on a tap: ping and 16 MB over TCP both ways, checksums equal.
tap=nanovm-t0
ip link del "$tap" 2>/dev/null
if ip tuntap add dev "$tap" mode tap && ip addr add 172.30.0.1/24 dev "$tap" && ip link set "$tap" up; then
  head -c 16777216 /dev/urandom >"$dev/h2g.bin"
  h2g_sum=$(sha256sum "$dev/h2g.bin" | cut -d' ' -f1)
  python3 - "$dev" >"$dev/net-host.log" 2>&1 <<'PY' &
import hashlib, socket, sys, threading
d = sys.argv[1]
def sink():
    s = socket.create_server(("172.30.0.1", 5001)); s.settimeout(300); c, _ = s.accept(); h = hashlib.sha256(); n = 0
    while n < 16777216 and (b := c.recv(1 << 16)): h.update(b); n += len(b)
    c.close()  # the guest's busybox nc may not half-close: stop at the size
    print("g2h", n, h.hexdigest(), flush=True)
def source():
    s = socket.create_server(("172.30.0.1", 5002)); s.settimeout(300); c, _ = s.accept()
    with open(f"{d}/h2g.bin", "rb") as f: c.sendfile(f)
    c.close()
t = [threading.Thread(target=f) for f in (sink, source)]; [x.start() for x in t]; [x.join() for x in t]
PY
  server=$!
  sleep 0.5
  boot_root net "$tiny_root,ro" \
    "ip link set eth0 up; ip addr add 172.30.0.2/24 dev eth0; ping -c 2 -W 5 172.30.0.1 >/dev/null && echo PING-OK; head -c 16777216 /dev/urandom > /tmp/g2h.bin; echo G2H \$(sha256sum /tmp/g2h.bin); nc 172.30.0.1 5001 < /tmp/g2h.bin; echo H2G \$(nc 172.30.0.1 5002 | sha256sum)" \
    --net "$tap,mac=02:00:00:00:00:02"
  wait "$server"
  g2h_guest=$(sed -n 's/^G2H \([0-9a-f]*\).*/\1/p' "$dev/net.console")
  g2h_host=$(sed -n 's/^g2h 16777216 \([0-9a-f]*\)/\1/p' "$dev/net-host.log")
  h2g_guest=$(sed -n 's/^H2G \([0-9a-f]*\).*/\1/p' "$dev/net.console")
  if grep -q '^PING-OK' "$dev/net.console" && [ -n "$g2h_guest" ] && [ "$g2h_guest" = "$g2h_host" ] &&
     [ "$h2g_guest" = "$h2g_sum" ]; then
    ok "virtio-net on a tap: ping, 16 MiB guest->host and host->guest over TCP with equal sha256"
  else
    not_ok "virtio-net on a tap (ping/g2h/h2g)"; diag "$dev/net.console" 15; diag "$dev/net-host.log" 5; diag "$dev/net.err" 5
  fi
  ip link del "$tap" 2>/dev/null
else
  not_ok "virtio-net: could not create tap $tap in the test host (is the tun module loaded?)"
fi
