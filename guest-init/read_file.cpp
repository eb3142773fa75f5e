// Reading small kernel-provided files (see read_file.hpp).
#include "guest-init/read_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "vmm/fd.hpp"

namespace nanovm::guest_init {

std::optional<std::string> read_small_file(const char* path) {
    Fd fd(::open(path, O_RDONLY | O_CLOEXEC));
    if (!fd) return std::nullopt;
    std::string out;
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(fd.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return std::nullopt;
        if (n == 0) return out;
        out.append(buf, static_cast<size_t>(n));
    }
}

}  // namespace nanovm::guest_init
