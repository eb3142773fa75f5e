// Nonblocking AF_UNIX stream sockets for the vsock device's host side: the listener
// at the VMM's socket path and the connections to `<path>_<port>` listeners.
#pragma once

#include <string>

#include "vmm/fd.hpp"

namespace nanovm::virtio::vsock {

/// Binds and listens on `path` (nonblocking, close-on-exec, `backlog` pending
/// connections). A stale socket file left by a dead process (connect refused) is
/// removed first; a live one, or any other file, makes it fail. Throws Error (path
/// longer than sockaddr_un allows, or in use) or SysError (socket, bind, listen).
Fd listen_unix(const std::string& path, int backlog = 128);

/// Connects to the listener at `path` without blocking. Returns the connected,
/// nonblocking, close-on-exec socket, or an invalid Fd with `error` set to the errno
/// (ENOENT, ECONNREFUSED, EAGAIN when its backlog is full, ENAMETOOLONG, EMFILE...).
/// Never throws.
Fd connect_unix(const std::string& path, int& error);

/// Accepts one pending connection on `listener` (nonblocking, close-on-exec).
/// Returns an invalid Fd when none is pending or accept failed (`error` = errno).
Fd accept_unix(int listener, int& error);

}  // namespace nanovm::virtio::vsock
