// Runner of the probe-guest tests. Without a usable /dev/kvm it lists every test case
// as skipped and exits 77, which meson counts as a skipped test. Catch2's
// implementation and session are in tests/catch_impl.cpp (the catch_impl library).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "tests/catch_runner.hpp"

int main(int argc, char** argv) {
    const int fd = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        std::cerr << "kvm_tests: cannot open /dev/kvm: " << std::strerror(errno) << '\n';
        return nanovm::testing::skip_catch(argc, argv, "no /dev/kvm");
    }
    ::close(fd);
    return nanovm::testing::run_catch(argc, argv);
}
