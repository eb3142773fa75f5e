// errno names through glibc's strerrorname_np (see errno_names.hpp).
#include "guest-init/protocol/errno_names.hpp"

#include <string.h>

namespace nanovm::agent::proto {

std::string errno_name(int err) {
    if (const char* name = ::strerrorname_np(err)) return name;
    return "E" + std::to_string(err);
}

int errno_from_name(std::string_view name) {
    // errno values are small; 4096 covers every Linux one (the kernel's own limit).
    for (int err = 1; err < 4096; ++err) {
        const char* n = ::strerrorname_np(err);
        if (n != nullptr && name == n) return err;
    }
    return 0;
}

}  // namespace nanovm::agent::proto
