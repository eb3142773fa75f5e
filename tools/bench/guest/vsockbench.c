// vsockbench: the guest side of `tools/bench/run vsock` (a static program in the bench
// initrd, run by guest-init's nanovm.exec=).
//
//   vsockbench [--port P]            (default port 5201)
//
// Listens on AF_VSOCK port P (any CID), prints "VSOCKBENCH listening port=P" on stdout
// once it accepts connections, then serves one connection at a time. Each connection
// starts with one request line from the host:
//   "recv N\n"  the host sends N bytes; the guest reads them all, answers "done N\n"
//   "send N\n"  the guest sends N bytes, then shuts its side down (EOF for the host)
//   "quit\n"    the program exits 0 (guest-init then powers off)
// The host times each transfer; this side only moves bytes (no checksums: under
// emulation they would cost more than the transfer). Errors: one line
// "VSOCKBENCH error=<what>: <strerror>" and exit status 1.
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

enum { kBuf = 256 << 10, kLineMax = 64 };

static void fail(const char* what) {
    printf("VSOCKBENCH error=%s: %s\n", what, strerror(errno));
    fflush(stdout);
    exit(1);
}

// One '\n'-terminated line (byte at a time, so no stream data is consumed with it).
// Returns 0 at EOF before a full line, -1 on error or an overlong line.
static int read_line(int fd, char* line, size_t max) {
    size_t n = 0;
    for (;;) {
        char c;
        const ssize_t r = read(fd, &c, 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) return 0;
        if (c == '\n') {
            line[n] = '\0';
            return 1;
        }
        if (n + 1 >= max) return -1;
        line[n++] = c;
    }
}

static int write_all(int fd, const char* p, size_t len) {
    while (len > 0) {
        const ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

// Serves one connection; returns 1 when the host asked to quit.
static int serve(int fd, char* buf) {
    char line[kLineMax];
    if (read_line(fd, line, sizeof line) <= 0) return 0;
    unsigned long long n = 0;
    if (!strcmp(line, "quit")) return 1;
    if (sscanf(line, "recv %llu", &n) == 1) {
        unsigned long long got = 0;
        while (got < n) {
            const size_t want = n - got < kBuf ? (size_t)(n - got) : kBuf;
            const ssize_t r = read(fd, buf, want);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) return 0;  // the host went away: serve the next one
            got += (unsigned long long)r;
        }
        char reply[kLineMax];
        const int len = snprintf(reply, sizeof reply, "done %llu\n", got);
        write_all(fd, reply, (size_t)len);
    } else if (sscanf(line, "send %llu", &n) == 1) {
        unsigned long long sent = 0;
        while (sent < n) {
            const size_t chunk = n - sent < kBuf ? (size_t)(n - sent) : kBuf;
            if (write_all(fd, buf, chunk) != 0) return 0;
            sent += chunk;
        }
        shutdown(fd, SHUT_WR);
        // Wait for the host to close, so the last bytes are not cut off by a reset.
        while (read(fd, buf, kBuf) > 0) {
        }
    }
    return 0;
}

int main(int argc, char** argv) {
    unsigned port = 5201;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port")) port = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else {
            errno = EINVAL;
            fail("usage: vsockbench [--port P]");
        }
    }
    char* buf = malloc(kBuf);
    if (!buf) fail("malloc");
    for (size_t i = 0; i < kBuf; ++i) buf[i] = (char)(i * 131u + 7u);

    const int ls = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (ls < 0) fail("socket AF_VSOCK");
    struct sockaddr_vm addr;
    memset(&addr, 0, sizeof addr);
    addr.svm_family = AF_VSOCK;
    addr.svm_cid = VMADDR_CID_ANY;
    addr.svm_port = port;
    if (bind(ls, (struct sockaddr*)&addr, sizeof addr) != 0) fail("bind");
    if (listen(ls, 8) != 0) fail("listen");
    printf("VSOCKBENCH listening port=%u\n", port);
    fflush(stdout);

    for (;;) {
        const int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0 && errno == EINTR) continue;
        if (fd < 0) fail("accept");
        const int quit = serve(fd, buf);
        close(fd);
        if (quit) break;
    }
    close(ls);
    return 0;
}
