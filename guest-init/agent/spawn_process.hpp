// Starting the agent's commands: fork, a new session (so the command leads its own
// process group, which timeouts and signals address), pipes for stdio, user and
// group switch, working directory, exec -- with exec failures reported back to the
// agent as an errno (through a close-on-exec pipe) rather than as exit code 127.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "guest-init/agent/failure.hpp"
#include "vmm/fd.hpp"

namespace nanovm::agent {

/// What to start.
struct SpawnSpec {
    /// The program to exec: absolute, or relative to `cwd` (find_program's result).
    std::string path;
    std::vector<std::string> argv;  ///< argv[0] included
    std::vector<std::string> env;   ///< "KEY=VALUE", the whole environment
    std::string cwd;                ///< "" means "/"
    std::optional<uint32_t> uid;    ///< setuid, after setgid (either drops supplementary groups)
    std::optional<uint32_t> gid;
    bool stdin_pipe = false;   ///< stdin from a pipe (stdin_w); else /dev/null
    bool status_pipe = false;  ///< fd 3 of the child is the write end of status_r
};

/// A started process and the agent's ends of its pipes (non-blocking, close-on-exec).
struct SpawnedProcess {
    pid_t pid = -1;  ///< also its process group and session id
    Fd stdin_w;      ///< when stdin_pipe
    Fd stdout_r;
    Fd stderr_r;
    Fd status_r;     ///< when status_pipe
};

/// Starts `spec`. True on success; else `failure` says which step failed (fork,
/// pipe, chdir, setuid, exec...) and the child, if any, has been reaped.
bool spawn_process(const SpawnSpec& spec, SpawnedProcess& out, Failure& failure);

/// Resolves a program name like execvp: a name containing '/' is used as is; else
/// the first executable regular file of that name in the colon-separated `path_var`
/// (empty entries skipped). nullopt with `failure` ENOENT (none) or EACCES (found,
/// not executable).
std::optional<std::string> find_program(const std::string& name, const std::string& path_var,
                                        Failure& failure);

/// `base` with each "KEY=VALUE" of `overrides` replacing the entry of the same KEY
/// or appended; `clear`: `overrides` alone.
std::vector<std::string> merge_environment(const std::vector<std::string>& base,
                                           const std::vector<std::string>& overrides, bool clear);

/// The value of KEY in an environment list, or `fallback`.
std::string environment_value(const std::vector<std::string>& env, const std::string& key,
                              const std::string& fallback);

}  // namespace nanovm::agent
