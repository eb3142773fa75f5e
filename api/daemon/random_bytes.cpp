// getrandom(2) (random_bytes.hpp).
#include "api/daemon/random_bytes.hpp"

#include <sys/random.h>

#include <cerrno>

#include "vmm/error.hpp"

namespace nanovm::daemon {

void random_bytes(void* out, size_t size) {
    auto* p = static_cast<unsigned char*>(out);
    size_t got = 0;
    while (got < size) {
        const ssize_t n = ::getrandom(p + got, size - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw_errno("getrandom");
        got += static_cast<size_t>(n);
    }
}

}  // namespace nanovm::daemon
