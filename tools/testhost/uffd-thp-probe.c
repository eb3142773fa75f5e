/* Does khugepaged fill the holes of a memfd that a userfaultfd (MISSING) server
 * fills page by page, so that a later read gets zeros and no fault? That is what
 * nanovm's restored guest RAM is (snapshot/uffd_backend.cpp) when the host gives shmem
 * huge pages on request (shmem_enabled advise). Linux before 6.4 has no check for it
 * in mm/khugepaged.c collapse_file() (upstream ac492b9c70ca "mm/khugepaged: skip shmem
 * with userfaultfd", v6.4, not marked for stable).
 *
 * uffd-thp-probe MODE [SECONDS]: 8 aligned 2 MiB ranges of one memfd, mapped
 * MAP_SHARED and registered with userfaultfd (MISSING); one page of each range is
 * filled (UFFDIO_COPY, bytes 0xa5); khugepaged is made to scan every 100 ms; after
 * SECONDS (default 20) every other page is read, with a handler thread serving each
 * fault with 0xa5 bytes. MODE says how the memfd is mapped:
 *   hugepage    the registered mapping is madvise(MADV_HUGEPAGE)d (nanovm before 883df12)
 *   nohugepage  it is madvise(MADV_NOHUGEPAGE)d (GuestMemory::disable_huge_pages)
 *   other       it is MADV_NOHUGEPAGE, but a second, unregistered MAP_SHARED mapping of
 *               the same memfd is MADV_HUGEPAGE (as a VM's RAM moved aside at a freeze
 *               would be if it were not NOHUGEPAGE)
 * Prints the memfd's pages before and after the wait (SEEK_DATA), /proc/vmstat's
 * thp_collapse_alloc and nr_shmem_hugepages, the faults served and the pages that read
 * as zeros. Exit 0 when no page read as zeros, 3 when some did, 1 on a setup error.
 * Needs root (it writes /sys/kernel/mm/transparent_hugepage/khugepaged/). Build:
 * gcc -O2 -Wall -pthread -o uffd-thp-probe uffd-thp-probe.c */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PAGE 4096UL
#define PMD (2UL << 20)
#define RANGES 8
#define SIZE (RANGES * PMD)

static int uffd = -1;
static char *served;  /* the registered mapping */
static volatile long faults;
static volatile int stop;

static void die(const char *what) {
    printf("%s: %s\n", what, strerror(errno));
    exit(1);
}

static char *map_aligned(int fd) {
    char *r = mmap(NULL, SIZE + PMD, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) die("mmap reserve");
    char *a = (char *)(((uintptr_t)r + PMD - 1) & ~(PMD - 1));
    char *m = mmap(a, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    if (m == MAP_FAILED) die("mmap memfd");
    return m;
}

static long vmstat(const char *name) {
    FILE *f = fopen("/proc/vmstat", "r");
    char key[64];
    long v, out = -1;
    if (!f) return -1;
    while (fscanf(f, "%63s %ld", key, &v) == 2)
        if (strcmp(key, name) == 0) out = v;
    fclose(f);
    return out;
}

static long pages_present(int fd) {
    long n = 0;
    off_t at = 0;
    for (;;) {
        off_t d = lseek(fd, at, SEEK_DATA);
        if (d < 0) break;
        off_t h = lseek(fd, d, SEEK_HOLE);
        if (h < 0) break;
        n += (h - d) / PAGE;
        at = h;
    }
    return n;
}

static void sysfs(const char *file, const char *value) {
    char path[256];
    snprintf(path, sizeof path, "/sys/kernel/mm/transparent_hugepage/%s", file);
    FILE *f = fopen(path, "w");
    if (!f || fputs(value, f) < 0 || fclose(f) != 0) printf("(cannot set %s: %s)\n", path, strerror(errno));
}

static void show(const char *file) {
    char path[256], buf[128] = "";
    snprintf(path, sizeof path, "/sys/kernel/mm/transparent_hugepage/%s", file);
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = 0;
    printf("%s: %s\n", file, buf);
}

static void *handler(void *arg) {
    (void)arg;
    static char page[PAGE] __attribute__((aligned(4096)));
    memset(page, 0xa5, sizeof page);
    while (!stop) {
        struct pollfd p = {uffd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        struct uffd_msg msg;
        if (read(uffd, &msg, sizeof msg) != sizeof msg) continue;
        if (msg.event != UFFD_EVENT_PAGEFAULT) continue;
        struct uffdio_copy c = {.dst = msg.arg.pagefault.address & ~(PAGE - 1), .src = (uintptr_t)page, .len = PAGE};
        if (ioctl(uffd, UFFDIO_COPY, &c) != 0 && errno != EEXIST) die("UFFDIO_COPY (fault)");
        faults++;
    }
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "hugepage";
    int seconds = argc > 2 ? atoi(argv[2]) : 20;
    if (strcmp(mode, "hugepage") && strcmp(mode, "nohugepage") && strcmp(mode, "other")) {
        printf("usage: uffd-thp-probe hugepage|nohugepage|other [SECONDS]\n");
        return 1;
    }
    show("enabled");
    show("shmem_enabled");
    show("khugepaged/max_ptes_none");
    sysfs("khugepaged/scan_sleep_millisecs", "100");
    sysfs("khugepaged/alloc_sleep_millisecs", "100");
    sysfs("khugepaged/pages_to_scan", "65536");

    /* khugepaged scans only the processes it was told of: Linux 6.1's madvise(MADV_HUGEPAGE)
     * of a shmem mapping does not tell it (khugepaged_enter_vma checks the VMA's flags
     * from before the call), a huge anonymous page does. A VMM has those (thread
     * stacks, heap, under enabled=always or MADV_HUGEPAGE): so does this probe. */
    char *anon = mmap(NULL, 2 * PMD, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (anon == MAP_FAILED) die("mmap anon");
    char *anon_aligned = (char *)(((uintptr_t)anon + PMD - 1) & ~(PMD - 1));
    if (madvise(anon_aligned, PMD, MADV_HUGEPAGE) != 0) die("madvise anon");
    anon_aligned[0] = 1;

    int fd = memfd_create("uffd-thp-probe", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, SIZE) != 0) die("memfd");
    served = map_aligned(fd);
    char *other = NULL;
    if (madvise(served, SIZE, strcmp(mode, "hugepage") == 0 ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0) die("madvise");
    if (strcmp(mode, "other") == 0) {
        other = map_aligned(fd);
        if (madvise(other, SIZE, MADV_HUGEPAGE) != 0) die("madvise other");
    }

    uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (uffd < 0) die("userfaultfd");
    struct uffdio_api api = {.api = UFFD_API};
    if (ioctl(uffd, UFFDIO_API, &api) != 0) die("UFFDIO_API");
    struct uffdio_register reg = {.range = {(uintptr_t)served, SIZE}, .mode = UFFDIO_REGISTER_MODE_MISSING};
    if (ioctl(uffd, UFFDIO_REGISTER, &reg) != 0) die("UFFDIO_REGISTER");

    static char page[PAGE] __attribute__((aligned(4096)));
    memset(page, 0xa5, sizeof page);
    for (int r = 0; r < RANGES; ++r) {
        struct uffdio_copy c = {.dst = (uintptr_t)served + r * PMD, .src = (uintptr_t)page, .len = PAGE};
        if (ioctl(uffd, UFFDIO_COPY, &c) != 0) die("UFFDIO_COPY (first page)");
    }
    const long collapse0 = vmstat("thp_collapse_alloc"), huge0 = vmstat("nr_shmem_hugepages");
    printf("mode %s: memfd pages present after filling one per 2 MiB range: %ld of %lu\n", mode, pages_present(fd),
           SIZE / PAGE);
    sleep(seconds);
    const long present = pages_present(fd);
    printf("after %d s: memfd pages present %ld; thp_collapse_alloc +%ld, nr_shmem_hugepages +%ld\n", seconds,
           present, vmstat("thp_collapse_alloc") - collapse0, vmstat("nr_shmem_hugepages") - huge0);

    pthread_t t;
    if (pthread_create(&t, NULL, handler, NULL) != 0) die("pthread_create");
    long zeros = 0, good = 0;
    for (unsigned long off = 0; off < SIZE; off += PAGE) {
        if (off % PMD == 0) continue;  /* filled ones */
        const unsigned char b = (unsigned char)served[off];
        if (b == 0xa5) good++;
        else if (b == 0) zeros++;
    }
    stop = 1;
    pthread_join(t, NULL);
    printf("read %lu unfilled pages: %ld faults served, %ld read 0xa5, %ld read as ZEROS without a fault\n",
           SIZE / PAGE - RANGES, faults, good, zeros);
    printf("RESULT mode=%s zeros=%ld faults=%ld collapse=%ld\n", mode, zeros, faults,
           vmstat("thp_collapse_alloc") - collapse0);
    return zeros ? 3 : 0;
}
