// blkbench: the guest side of `tools/bench/run blk` (a static program in the bench
// initrd, run by guest-init's nanovm.exec=).
//
//   blkbench --size-bytes B --mib N [--rand-seconds T] [--rand-ops K] [--dev PATH]
//
// Finds the virtio-blk disk whose size is exactly B bytes (/sys/block/vd*/size, in
// 512-byte sectors) unless --dev names it, then on the first N MiB of it, all with
// O_DIRECT (no guest page cache) and one request in flight:
//   1. sequential write, 1 MiB blocks (pattern bytes), timed; then fsync, timed apart;
//   2. sequential read, 1 MiB blocks, timed;
//   3. random 4 KiB reads at 4 KiB-aligned offsets (a fixed xorshift sequence, the
//      same in every run) for T seconds (default 5) or K reads, whichever ends first.
// Prints one line on stdout, times in ns of CLOCK_MONOTONIC, sizes in bytes:
//   BLKBENCH dev=/dev/vda seq_write_bytes=.. seq_write_ns=.. fsync_ns=..
//            seq_read_bytes=.. seq_read_ns=.. randread_ops=.. randread_ns=..
// (one line) or "BLKBENCH error=<what>: <strerror>" and exit status 1.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { kSeqBlock = 1 << 20, kRandBlock = 4096, kAlign = 4096 };

static void fail(const char* what) {
    printf("BLKBENCH error=%s: %s\n", what, strerror(errno));
    fflush(stdout);
    exit(1);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// The /dev path of the vd* disk of exactly `size_bytes`, or NULL.
static const char* find_disk(uint64_t size_bytes) {
    static char path[64];
    DIR* d = opendir("/sys/block");
    if (!d) fail("opendir /sys/block");
    const struct dirent* e;
    const char* found = NULL;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "vd", 2) != 0 || strlen(e->d_name) > 16) continue;
        char sys[96];
        snprintf(sys, sizeof sys, "/sys/block/%s/size", e->d_name);
        FILE* f = fopen(sys, "r");
        if (!f) continue;
        unsigned long long sectors = 0;
        const int n = fscanf(f, "%llu", &sectors);
        fclose(f);
        if (n == 1 && sectors * 512ull == size_bytes) {
            snprintf(path, sizeof path, "/dev/%s", e->d_name);
            found = path;
            break;
        }
    }
    closedir(d);
    return found;
}

// Reads or writes exactly `len` bytes at `off` (O_DIRECT: one request each call).
static void full_io(int fd, int write_it, char* buf, size_t len, off_t off) {
    size_t done = 0;
    while (done < len) {
        const ssize_t n = write_it ? pwrite(fd, buf + done, len - done, off + (off_t)done)
                                   : pread(fd, buf + done, len - done, off + (off_t)done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail(write_it ? "pwrite" : "pread");
        if (n == 0) {
            errno = EIO;
            fail("short read (end of disk)");
        }
        done += (size_t)n;
    }
}

static uint64_t xorshift64(uint64_t* s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

int main(int argc, char** argv) {
    uint64_t size_bytes = 0, mib = 0, rand_ops_max = UINT64_MAX;
    double rand_seconds = 5.0;
    const char* dev = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--size-bytes")) size_bytes = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--mib")) mib = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--rand-seconds")) rand_seconds = strtod(argv[i + 1], NULL);
        else if (!strcmp(argv[i], "--rand-ops")) rand_ops_max = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--dev")) dev = argv[i + 1];
        else {
            errno = EINVAL;
            fail("usage: blkbench --size-bytes B --mib N [--rand-seconds T] [--rand-ops K] [--dev PATH]");
        }
    }
    if (mib == 0 || (!dev && size_bytes == 0)) {
        errno = EINVAL;
        fail("need --mib and --size-bytes (or --dev)");
    }
    if (!dev) dev = find_disk(size_bytes);
    if (!dev) {
        errno = ENODEV;
        fail("no vd* disk of --size-bytes");
    }
    const int fd = open(dev, O_RDWR | O_DIRECT | O_CLOEXEC);
    if (fd < 0) fail("open disk O_DIRECT");

    char* buf;
    if (posix_memalign((void**)&buf, kAlign, kSeqBlock) != 0) fail("posix_memalign");
    for (size_t i = 0; i < kSeqBlock; ++i) buf[i] = (char)(i * 131u + 7u);
    const uint64_t total = mib << 20;

    uint64_t t0 = now_ns();
    for (uint64_t off = 0; off < total; off += kSeqBlock) full_io(fd, 1, buf, kSeqBlock, (off_t)off);
    const uint64_t write_ns = now_ns() - t0;
    t0 = now_ns();
    if (fsync(fd) != 0) fail("fsync");
    const uint64_t fsync_ns = now_ns() - t0;

    t0 = now_ns();
    for (uint64_t off = 0; off < total; off += kSeqBlock) full_io(fd, 0, buf, kSeqBlock, (off_t)off);
    const uint64_t read_ns = now_ns() - t0;

    const uint64_t blocks = total / kRandBlock;
    const uint64_t limit_ns = (uint64_t)(rand_seconds * 1e9);
    uint64_t seed = 0x9e3779b97f4a7c15ull, ops = 0;
    t0 = now_ns();
    uint64_t elapsed = 0;
    while (ops < rand_ops_max && elapsed < limit_ns) {
        const uint64_t block = xorshift64(&seed) % blocks;
        full_io(fd, 0, buf, kRandBlock, (off_t)(block * kRandBlock));
        ++ops;
        elapsed = now_ns() - t0;
    }

    printf("BLKBENCH dev=%s seq_write_bytes=%llu seq_write_ns=%llu fsync_ns=%llu "
           "seq_read_bytes=%llu seq_read_ns=%llu randread_ops=%llu randread_ns=%llu\n",
           dev, (unsigned long long)total, (unsigned long long)write_ns,
           (unsigned long long)fsync_ns, (unsigned long long)total, (unsigned long long)read_ns,
           (unsigned long long)ops, (unsigned long long)elapsed);
    fflush(stdout);
    close(fd);
    return 0;
}
