// Random bytes for the daemon's secrets and ids (the bearer token, UUIDs).
#pragma once

#include <cstddef>

namespace nanovm::daemon {

/// Fills `size` bytes at `out` from getrandom(2) (blocking until the kernel's RNG is
/// ready, retrying short reads and EINTR). Throws SysError(getrandom).
void random_bytes(void* out, size_t size);

}  // namespace nanovm::daemon
