// Runner of the probe-guest tests. Without a usable /dev/kvm it lists every test case
// as skipped and exits 77, which meson counts as a skipped test.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

namespace {
constexpr int kExitSkipped = 77;  // meson's "skipped"
}

int main(int argc, char** argv) {
    Catch::Session session;
    if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
    const int fd = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        std::cerr << "kvm_tests: cannot open /dev/kvm: " << std::strerror(errno) << '\n';
        for (const Catch::TestCase& test : Catch::getAllTestCasesSorted(session.config()))
            std::cout << "SKIPPED (no /dev/kvm): " << test.name << '\n';
        return kExitSkipped;
    }
    ::close(fd);
    return session.run();
}
