// The operands of `nanovm vm cp SRC DST`: exactly one of them is ID:GUEST_PATH (a VM
// id or unique prefix, a colon, an absolute guest path), the other a host path.
// A host path that happens to look like "abc:/x" can be written "./abc:/x".
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace nanovm::vm {

/// One operand.
struct CopyLocation {
    std::optional<std::string> vm;  ///< the id text as typed (set: a guest path)
    std::string path;

    bool operator==(const CopyLocation&) const = default;
};

/// Both operands, one of them in a VM.
struct CopySpec {
    CopyLocation from;
    CopyLocation to;
    bool into_guest() const { return to.vm.has_value(); }
};

/// Parses one operand (pure). Throws Error for an empty operand or a relative guest
/// path: "3f9c:etc/x: the guest path must be absolute".
CopyLocation parse_copy_location(std::string_view text);

/// Parses both (pure). Throws Error with one line when both or neither are in a VM.
CopySpec parse_copy_spec(std::string_view from, std::string_view to);

/// "dir/name" for a path whose last component names the file: the part after the
/// last '/' ("" for a path ending in '/').
std::string path_basename(std::string_view path);

}  // namespace nanovm::vm
