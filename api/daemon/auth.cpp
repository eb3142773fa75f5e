// Bearer token (auth.hpp).
#include "api/daemon/auth.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include "api/daemon/random_bytes.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"

namespace nanovm::daemon {

namespace {

constexpr size_t kTokenBytes = 32;

bool is_token(std::string_view text) {
    if (text.size() != 2 * kTokenBytes) return false;
    for (char c : text)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    return true;
}

std::string read_token(const std::string& path) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) throw_errno("open " + path);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw_errno("fstat " + path);
    if ((st.st_mode & 077) != 0 || st.st_uid != ::geteuid())
        throw Error(fmt::format("{}: the token file must be ours and mode 0600 (it is {:o}): chmod 600 it", path,
                                st.st_mode & 0777));
    char buf[128];
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0) throw_errno("read " + path);
    std::string text(buf, static_cast<size_t>(n));
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    if (!is_token(text)) throw Error(fmt::format("{}: not a token (64 hex digits); remove it to make a new one", path));
    return text;
}

}  // namespace

std::string load_or_make_token(const std::string& path) {
    Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) {
        if (errno == EEXIST) return read_token(path);
        throw_errno("create " + path);
    }
    unsigned char bytes[kTokenBytes];
    random_bytes(bytes, sizeof(bytes));
    std::string token;
    for (unsigned char b : bytes) token += fmt::format("{:02x}", b);
    const std::string line = token + "\n";
    if (::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()) || ::fsync(fd.get()) != 0) {
        const int err = errno;
        ::unlink(path.c_str());
        throw SysError("write " + path, err);
    }
    return token;
}

bool bearer_matches(std::string_view header, std::string_view token) noexcept {
    constexpr std::string_view kScheme = "Bearer ";
    // Compare every byte of the longer of the two, so the time does not tell where
    // the first difference is.
    const size_t want = kScheme.size() + token.size();
    unsigned diff = header.size() == want ? 0u : 1u;
    const size_t n = header.size() > want ? header.size() : want;
    for (size_t i = 0; i < n; ++i) {
        const unsigned char expected = i < kScheme.size() ? static_cast<unsigned char>(kScheme[i])
                                       : i < want         ? static_cast<unsigned char>(token[i - kScheme.size()])
                                                          : 0u;
        const unsigned char given = i < header.size() ? static_cast<unsigned char>(header[i]) : 0u;
        // The scheme's six letters in any case (RFC 9110 §11.1): of all bytes only a
        // letter's upper and lower case give that letter's lower case OR 0x20.
        const unsigned char fold = i + 1 < kScheme.size() ? 0x20 : 0x00;
        diff |= static_cast<unsigned>((expected | fold) ^ (given | fold));
    }
    return diff == 0 && !token.empty();
}

}  // namespace nanovm::daemon
