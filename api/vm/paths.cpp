#include "api/vm/paths.hpp"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "vmm/error.hpp"

namespace nanovm {

namespace {

std::string env(const char* name) {
    const char* value = std::getenv(name);
    return value ? value : "";
}

std::string home_dir() {
    if (std::string home = env("HOME"); !home.empty()) return home;
    if (const passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_dir) return pw->pw_dir;
    return "/";
}

}  // namespace

std::string cache_dir() {
    if (std::string cache = env("NANOVM_CACHE"); !cache.empty()) return cache;
    std::string xdg = env("XDG_CACHE_HOME");
    if (xdg.empty()) xdg = home_dir() + "/.cache";
    return xdg + "/nanovm";
}

std::string default_kernel_path() { return cache_dir() + "/kernel/current/bzImage"; }

std::string self_executable() {
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) throw Error("cannot find the nanovm binary (/proc/self/exe): " + ec.message());
    return exe.string();
}

std::string executable_dir() {
    try {
        return std::filesystem::path(self_executable()).parent_path().string();
    } catch (const Error&) {
        return ".";
    }
}

std::string default_initrd_path() { return executable_dir() + "/guest-init/initramfs.cpio.lz4"; }

}  // namespace nanovm
