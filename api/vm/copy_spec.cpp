// `nanovm vm cp` operands (see copy_spec.hpp).
#include "api/vm/copy_spec.hpp"

#include <fmt/format.h>

#include "api/vm/vm_id.hpp"
#include "vmm/error.hpp"

namespace nanovm::vm {

CopyLocation parse_copy_location(std::string_view text) {
    if (text.empty()) throw Error("cp: an empty path");
    const size_t colon = text.find(':');
    if (colon != std::string_view::npos && is_vm_id_prefix(text.substr(0, colon))) {
        const std::string_view path = text.substr(colon + 1);
        if (path.empty() || path.front() != '/')
            throw Error(fmt::format("{}: the guest path must be absolute (ID:/path)", text));
        return CopyLocation{std::string(text.substr(0, colon)), std::string(path)};
    }
    return CopyLocation{std::nullopt, std::string(text)};
}

CopySpec parse_copy_spec(std::string_view from, std::string_view to) {
    CopySpec spec{parse_copy_location(from), parse_copy_location(to)};
    if (spec.from.vm && spec.to.vm)
        throw Error("cp copies between this host and one VM: one side must be a host path");
    if (!spec.from.vm && !spec.to.vm) throw Error("cp: one side must be ID:/GUEST_PATH (a VM id, a colon, a path)");
    return spec;
}

std::string path_basename(std::string_view path) {
    const size_t slash = path.rfind('/');
    return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

}  // namespace nanovm::vm
