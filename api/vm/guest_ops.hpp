// The operations on a running VM that go through its guest agent
// (api/agent_client/): run a command (whole result, or streamed to callbacks) and
// read or write a file (streamed from/to a file descriptor or a callback). For both
// front ends (api/cli/, nanovmd). A library: nothing printed; errors are exceptions
// with one line.
//
// Each function has two forms: over a connection the caller holds (several requests
// on one connection, as `vm cp` does), and over the VM's paths (connect_agent, the
// request, then the connection closes).
//
// Errors, besides those named per function:
//   VmStateError (vm_ops.hpp)  the VM is not running: paused ("VM ID is paused: resume
//                         it first"), booting, stopping, or dead.
//   agent::AgentError     the guest refused: errno_name() ENOENT, EACCES, EISDIR,
//                         ENOSPC...; what() "<ERRNO>: <what the agent did>".
//   agent::ConnectionError  the connection broke (the guest died or hung up).
//   Error                 the agent cannot be reached ("VM ID: cannot reach its guest
//                         agent: ..."); SysError for the caller's file descriptor.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "api/agent_client/agent_client.hpp"
#include "api/vm/state_dir.hpp"

namespace nanovm::vm {

/// A connection to the guest agent of VM `paths`, which must be running (one status
/// round trip on its control socket first: a paused guest would not answer).
/// `timeout` bounds the vsock connect and the HELLO exchange.
agent::AgentClient connect_agent(const VmPaths& paths, std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// Runs `command` to its end. Output goes to `callbacks` as it arrives (chunks of up
/// to 256 KiB), or, for a stream without a callback, into the result (up to the
/// client's ClientLimits::max_collected_output, 64 MiB; then output_truncated). The
/// command's own timeout (Command::timeout) kills it in the guest (the whole
/// process group) and sets ExitStatus::timed_out. Throws AgentError when it could not
/// start (ENOENT: no such program or cwd; EACCES; EPERM for uid/gid).
agent::ExecResult exec_command(agent::AgentClient& client, const agent::Command& command,
                               const agent::OutputCallbacks& callbacks = {});
agent::ExecResult exec_command(const VmPaths& paths, const agent::Command& command,
                               const agent::OutputCallbacks& callbacks = {});

/// Reads guest file `guest_path` into `sink` (chunks of up to 256 KiB, in order).
/// Returns its size in bytes. A sink that throws cancels the transfer and its
/// exception comes out.
uint64_t read_guest_file(agent::AgentClient& client, const std::string& guest_path,
                         const std::function<void(std::string_view)>& sink);
uint64_t read_guest_file(const VmPaths& paths, const std::string& guest_path,
                         const std::function<void(std::string_view)>& sink);

/// Reads guest file `guest_path` into the file descriptor `fd` (written from its
/// current offset, all of it: short writes continued). Returns the bytes. Throws
/// SysError("write: ...") when `fd` fails (the transfer is then cancelled).
uint64_t read_guest_file_to_fd(agent::AgentClient& client, const std::string& guest_path, int fd);
uint64_t read_guest_file_to_fd(const VmPaths& paths, const std::string& guest_path, int fd);

/// How write_guest_file writes.
struct GuestWriteOptions {
    uint32_t mode = 0644;      ///< permission bits of the new file (umask not applied)
    bool make_parents = true;  ///< mkdir -p the parent directories first (mode 0755)
    bool sync = false;         ///< fsync the file before it is renamed into place
};

/// Writes guest file `guest_path` from `source` (called with a buffer and its size;
/// returns how many bytes it put there, 0 at the end). Whole or not at all: the
/// agent writes a temporary file beside it and renames it into place at the end; on
/// any error (the source throws, the guest's disk is full) the old file, if any, is
/// untouched. With make_parents the missing parent directories are made first
/// (they stay if the write then fails). Returns the bytes written. Throws
/// AgentError (ENOTDIR: a parent is a file; EISDIR: the path is a directory...).
uint64_t write_guest_file(agent::AgentClient& client, const std::string& guest_path,
                          const std::function<size_t(char*, size_t)>& source, const GuestWriteOptions& options = {});
uint64_t write_guest_file(const VmPaths& paths, const std::string& guest_path,
                          const std::function<size_t(char*, size_t)>& source, const GuestWriteOptions& options = {});

/// write_guest_file from the file descriptor `fd`, read from its current offset to
/// its end (a pipe: until EOF). Throws SysError("read: ...") when `fd` fails (the
/// guest file is then not written).
uint64_t write_guest_file_from_fd(agent::AgentClient& client, const std::string& guest_path, int fd,
                                  const GuestWriteOptions& options = {});
uint64_t write_guest_file_from_fd(const VmPaths& paths, const std::string& guest_path, int fd,
                                  const GuestWriteOptions& options = {});

/// The parent directory of an absolute guest path ("/a/b" -> "/a", "/a" -> "/"); ""
/// for a path without '/'.
std::string guest_parent(std::string_view guest_path);

}  // namespace nanovm::vm
