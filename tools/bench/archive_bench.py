"""The archive part of tools/bench/run api: through nanovmd's API, a sandbox with
FILL_MIB MiB of random bytes written to a file of its disk (/work/fill, synced; the
guest's page cache keeps what fits), archived (POST .../archive, wait) and unarchived
(POST .../unarchive, wait) --archive-rounds times. Reports p50/p99 of each
(nanovm_api_archive_ms, nanovm_api_unarchive_ms), and from the daemon's log line of
each archive the bytes packed, the blob's size and the zstd throughput
(nanovm_archive_zstd_mb_s: packed bytes / packing time, median; the packing reads the
snapshot's RAM and disk layers and compresses them with libzstd's worker threads)."""
import http.client
import json
import re
import socket
import statistics
import time


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("nanovm", timeout=timeout)
        self.path_ = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path_)


def _post(sock, target, body, timeout=3600):
    c = _UnixHTTP(sock, timeout)
    c.request("POST", target, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status not in (200, 201):
        raise RuntimeError(f"POST {target}: {r.status} {data[:300]!r}")
    return json.loads(data) if data else {}


def _quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


LOG_LINE = re.compile(r"archived (\d+) MiB into (\d+) MiB \(.*?, (\d+) zstd workers\) in (\d+) ms \(([\d.]+) MB/s\)")
UNPACK_LINE = re.compile(r"unarchived (\d+) MiB from \S+ in (\d+) ms \(read and decompress (\d+), RAM pages (\d+), "
                         r"disk runs (\d+), syncs (\d+): layer (\d+), disks (\d+), manifest (\d+)\), "
                         r"then restored in (\d+) ms")
# The background step after an unarchive's answer (api/daemon/sandbox/manager_archive.cpp).
SETTLE_LINE = re.compile(r"its unarchived files are durable \((\d+) ms of fsync\)")


def _settles(daemon_log):
    with open(daemon_log, errors="replace") as f:
        return [int(m.group(1)) for m in SETTLE_LINE.finditer(f.read())]


def run(sock, daemon_log, rounds, cpus, memory, fill_mib=256):
    sid = None
    for _ in range(600):  # the first create of a shape answers 503 while its template is built
        try:
            sid = _post(sock, "/v1/sandboxes", {"cpus": cpus, "memory_mb": memory}, timeout=600)["id"]
            break
        except RuntimeError as e:
            if "template_building" not in str(e):
                raise
            time.sleep(1)
    t0 = time.time()
    filled = _post(sock, f"/v1/sandboxes/{sid}/exec",
                   {"cmd": f"mkdir -p /work && head -c {fill_mib}M /dev/urandom > /work/fill && sync && stat -c %s /work/fill",
                    "timeout_s": 3600})
    fill_s = time.time() - t0
    if filled.get("stdout", "").strip() != str(fill_mib << 20):
        raise RuntimeError(f"filling the sandbox: {filled}")
    archive_ms, unarchive_ms, durable_ms = [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        a = _post(sock, f"/v1/sandboxes/{sid}/archive", {"wait": True})
        archive_ms.append((time.perf_counter() - t0) * 1000)
        settled = len(_settles(daemon_log))
        t0 = time.perf_counter()
        u = _post(sock, f"/v1/sandboxes/{sid}/unarchive", {"wait": True})
        unarchive_ms.append((time.perf_counter() - t0) * 1000)
        if a.get("state") != "archived" or u.get("state") != "running":
            raise RuntimeError(f"archive -> {a.get('state')}, unarchive -> {u.get('state')}")
        # The unarchive answers before its files are durable (the archive kept until
        # then); the next archive would wait for that: waited for here, and timed
        # from the unarchive's start, so that no archive round pays for it.
        deadline = time.time() + 600
        while len(_settles(daemon_log)) <= settled and time.time() < deadline:
            time.sleep(0.05)
        durable_ms.append((time.perf_counter() - t0) * 1000)
    size = _post(sock, f"/v1/sandboxes/{sid}/exec", {"cmd": "stat -c %s /work/fill"}).get("stdout", "").strip()
    if size != str(fill_mib << 20):
        raise RuntimeError(f"/work/fill after the rounds: {size!r}")
    with open(daemon_log, errors="replace") as f:
        text = f.read()
    packs = [m.groups() for m in LOG_LINE.finditer(text)][-rounds:]
    unpacks = [[int(x) for x in m.groups()] for m in UNPACK_LINE.finditer(text)][-rounds:]
    out = {
        "archive_rounds": rounds,
        "archive_fill_mib": fill_mib,
        "archive_fill_s": round(fill_s, 1),
        "nanovm_api_archive_ms": round(statistics.median(archive_ms), 1),
        "nanovm_api_archive_p99_ms": round(_quantile(archive_ms, 0.99), 1),
        "nanovm_api_unarchive_ms": round(statistics.median(unarchive_ms), 1),
        "nanovm_api_unarchive_p99_ms": round(_quantile(unarchive_ms, 0.99), 1),
        # From the unarchive's start until its files were durable and its archive removed.
        "unarchive_durable_ms": round(statistics.median(durable_ms), 1),
    }
    fsyncs = _settles(daemon_log)[-rounds:]
    if fsyncs:
        out["unarchive_settle_fsync_ms"] = int(statistics.median(fsyncs))
    if packs:
        out["archive_packed_mib"] = int(statistics.median(int(p[0]) for p in packs))
        out["archive_blob_mib"] = int(statistics.median(int(p[1]) for p in packs))
        out["archive_zstd_workers"] = int(packs[-1][2])
        out["archive_pack_ms"] = int(statistics.median(int(p[3]) for p in packs))
        out["nanovm_archive_zstd_mb_s"] = round(statistics.median(float(p[4]) for p in packs), 1)
    if unpacks:
        # Medians of the daemon's unarchive breakdown (api/daemon/sandbox/manager_archive.cpp).
        for i, key in enumerate(("unpacked_mib", "unpack_ms", "unpack_read_ms", "unpack_ram_ms", "unpack_disk_ms",
                                 "unpack_sync_ms", "unpack_layer_ms", "unpack_disk_sync_ms", "unpack_manifest_ms",
                                 "unarchive_restore_ms")):
            out[f"archive_{key}" if not key.startswith("unarchive") else key] = int(
                statistics.median(u[i] for u in unpacks))
    print(f"archive   {out['nanovm_api_archive_ms']:10.1f} {out['nanovm_api_archive_p99_ms']:10.1f}   "
          f"({fill_mib} MiB written; packed {out.get('archive_packed_mib')} MiB into {out.get('archive_blob_mib')} MiB, "
          f"zstd {out.get('nanovm_archive_zstd_mb_s')} MB/s with {out.get('archive_zstd_workers')} workers)")
    print(f"unarchive {out['nanovm_api_unarchive_ms']:10.1f} {out['nanovm_api_unarchive_p99_ms']:10.1f}   "
          f"(unpack {out.get('archive_unpack_ms')} ms: read+decompress {out.get('archive_unpack_read_ms')}, "
          f"RAM {out.get('archive_unpack_ram_ms')}, disk {out.get('archive_unpack_disk_ms')}, "
          f"syncs {out.get('archive_unpack_sync_ms')} (layer {out.get('archive_unpack_layer_ms')}, "
          f"disks {out.get('archive_unpack_disk_sync_ms')}, manifest {out.get('archive_unpack_manifest_ms')}); "
          f"restore {out.get('unarchive_restore_ms')} ms; durable after {out.get('unarchive_durable_ms')} ms, "
          f"its fsync {out.get('unarchive_settle_fsync_ms')} ms)")
    c = _UnixHTTP(sock, 120)
    c.request("DELETE", f"/v1/sandboxes/{sid}")
    c.getresponse().read()
    c.close()
    return out
