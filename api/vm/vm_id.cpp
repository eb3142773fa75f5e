// Sandbox ids (see vm_id.hpp).
#include "api/vm/vm_id.hpp"

#include <sys/random.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "vmm/error.hpp"

namespace nanovm::vm {

std::string new_vm_id() {
    std::array<unsigned char, kVmIdLength / 2> bytes{};
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::getrandom(bytes.data() + done, bytes.size() - done, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw_errno("getrandom");
        done += static_cast<size_t>(n);
    }
    static constexpr char kHex[] = "0123456789abcdef";
    std::string id;
    for (unsigned char b : bytes) {
        id += kHex[b >> 4];
        id += kHex[b & 0xf];
    }
    return id;
}

bool is_vm_id_prefix(std::string_view text) {
    return !text.empty() && text.size() <= kVmIdLength &&
           std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool is_vm_id(std::string_view text) { return text.size() == kVmIdLength && is_vm_id_prefix(text); }

}  // namespace nanovm::vm
