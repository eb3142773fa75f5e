#include "snapshot/prefetch_list.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "snapshot/crc32c.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"

namespace nanovm::snapshot {

namespace {

constexpr char kMagic[8] = {'N', 'V', 'P', 'R', 'E', 'F', '0', '1'};

struct Header {
    char magic[8];
    uint64_t total_pages;
    uint64_t count;
    uint32_t crc;
    uint32_t zero;
};
static_assert(sizeof(Header) == 32);

uint32_t crc_of(const std::vector<uint32_t>& pages) {
    return crc32c({reinterpret_cast<const uint8_t*>(pages.data()), pages.size() * sizeof(uint32_t)});
}

}  // namespace

void write_prefetch_list(const std::string& path, uint64_t total_pages, const std::vector<uint32_t>& pages) {
    Header h{};
    std::memcpy(h.magic, kMagic, sizeof(kMagic));
    h.total_pages = total_pages;
    h.count = pages.size();
    h.crc = crc_of(pages);
    std::string bytes(reinterpret_cast<const char*>(&h), sizeof(h));
    bytes.append(reinterpret_cast<const char*>(pages.data()), pages.size() * sizeof(uint32_t));
    const std::string tmp = fmt::format("{}.{}.tmp", path, ::getpid());
    {
        Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        if (!fd) throw_errno("open " + tmp);
        size_t done = 0;
        while (done < bytes.size()) {
            const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) throw_errno("write " + tmp);
            done += static_cast<size_t>(n);
        }
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw_errno("rename " + tmp);
}

std::vector<uint32_t> read_prefetch_list(const std::string& path, uint64_t total_pages, std::string& why) {
    why.clear();
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
        if (errno != ENOENT) why = fmt::format("{}: {}", path, std::strerror(errno));
        return {};
    }
    Header h{};
    if (::pread(fd.get(), &h, sizeof(h), 0) != static_cast<ssize_t>(sizeof(h)) ||
        std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 || h.zero != 0) {
        why = fmt::format("{}: not a prefetch list", path);
        return {};
    }
    if (h.total_pages != total_pages) {
        why = fmt::format("{}: recorded for {} pages of RAM, not {}", path, h.total_pages, total_pages);
        return {};
    }
    if (h.count > kMaxPrefetchPages) {
        why = fmt::format("{}: {} pages listed (at most {})", path, h.count, kMaxPrefetchPages);
        return {};
    }
    std::vector<uint32_t> pages(h.count);
    const ssize_t want = static_cast<ssize_t>(pages.size() * sizeof(uint32_t));
    if (::pread(fd.get(), pages.data(), static_cast<size_t>(want), sizeof(h)) != want || crc_of(pages) != h.crc) {
        why = fmt::format("{}: truncated or damaged (checksum)", path);
        return {};
    }
    for (uint32_t p : pages) {
        if (p >= total_pages) {
            why = fmt::format("{}: page {} is outside the {} pages of RAM", path, p, total_pages);
            return {};
        }
    }
    return pages;
}

}  // namespace nanovm::snapshot
