// How the agent's system calls fail: an errno and what was being done. It becomes an
// ERROR frame (errno name + message) for the request that hit it.
#pragma once

#include <cerrno>
#include <string>

namespace nanovm::agent {

/// A failed operation: `err` is an errno value (never 0), `what` e.g. "open /x".
struct Failure {
    int err = 0;
    std::string what;
};

/// A Failure from the current errno.
inline Failure errno_failure(std::string what) { return Failure{errno, std::move(what)}; }

}  // namespace nanovm::agent
