// A temporary directory for a test, removed with everything in it at scope exit.
// One definition for every test (a second `TempDir` in the same namespace would be
// an ODR violation: the linker keeps one and the other's users crash).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "vmm/error.hpp"

namespace nanovm::test {

class TempDir {
public:
    /// Creates /tmp/nanovm-<tag>-XXXXXX (under $TMPDIR if set). Throws SysError(mkdtemp).
    explicit TempDir(const std::string& tag = "test") {
        std::string templ = (std::filesystem::temp_directory_path() / ("nanovm-" + tag + "-XXXXXX")).string();
        if (!::mkdtemp(templ.data())) throw_errno("mkdtemp");
        path_ = templ;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    /// The directory's path.
    std::string path() const { return path_.string(); }
    /// The path of `name` inside the directory.
    std::string file(const std::string& name) const { return (path_ / name).string(); }

private:
    std::filesystem::path path_;
};

}  // namespace nanovm::test
