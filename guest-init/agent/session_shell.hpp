// The text side of sessions: a session is a long-lived `/bin/sh` reading commands
// from a pipe, so that `cd` and `export` in one command carry over to the next.
//
// Each SESSION_RUN is written to the shell's stdin as one line:
//
//     command eval '<command, single-quote escaped>' </dev/null 3>&-; printf '%d\n' "$?" >&3
//
//  - `eval` of a quoted word: whatever the command text (unbalanced quotes, `exit`,
//    newlines), the shell's own script stream stays intact;
//  - `command` keeps a syntax error inside eval from ending the shell (POSIX: errors
//    in special built-ins end a non-interactive shell, unless run via `command`);
//  - stdin is /dev/null so the command cannot eat the following lines;
//  - fd 3 is the status pipe: closed for the command, then the shell reports $? on it.
// The status line arrives only after the command (and the pipeline it started) ended,
// so everything it wrote to stdout/stderr is already in those pipes by then.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nanovm::agent {

/// The line that runs `command` in a session shell (see above), "\n" included.
std::string session_command_line(std::string_view command);

/// Collects the status pipe's bytes and splits them into statuses.
class StatusLineReader {
public:
    /// Appends `bytes`; returns the status of a completed line, if one is now complete
    /// (at most one command runs at a time, so there is at most one line pending).
    /// A line that is not a number in 0..255 yields 255. Bounded: a line longer than
    /// 16 bytes is cut.
    std::optional<int> feed(std::string_view bytes);

private:
    std::string line_;
};

/// Every live descendant of `pid` (children, their children...), found by scanning
/// /proc/<pid>/stat for parent pids. Empty if /proc is unreadable.
std::vector<pid_t> process_descendants(pid_t pid);

}  // namespace nanovm::agent
