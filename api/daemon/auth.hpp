// The loopback TCP listener's bearer token: made at the daemon's first start into a
// 0600 file in the state directory, compared in constant time.
#pragma once

#include <string>
#include <string_view>

namespace nanovm::daemon {

/// The token in `path`, made first (64 hex digits from getrandom(2), mode 0600,
/// O_EXCL) if the file does not exist. Throws Error naming the file (unreadable, not
/// 0600-only, malformed).
std::string load_or_make_token(const std::string& path);

/// True if the Authorization header value `header` is exactly "Bearer <token>", the
/// scheme in any case (RFC 9110 §11.1).
/// Takes the same time whatever the header holds, for a header of a given length.
bool bearer_matches(std::string_view header, std::string_view token) noexcept;

}  // namespace nanovm::daemon
