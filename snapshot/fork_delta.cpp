#include "snapshot/fork_delta.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "snapshot/snapshot_error.hpp"
#include "vmm/error.hpp"

namespace nanovm::snapshot {

namespace {

constexpr char kDeltaMagic[8] = {'N', 'V', 'M', 'D', 'E', 'L', 'T', 'A'};
constexpr uint64_t kFixedHeader = 24;  // magic, count, total_pages

uint64_t data_offset(uint64_t count) { return (kFixedHeader + count * 8 + kPageSize - 1) / kPageSize * kPageSize; }

void pread_all(int fd, void* data, uint64_t bytes, uint64_t offset, std::string_view what) {
    auto* p = static_cast<uint8_t*>(data);
    while (bytes > 0) {
        const ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
        if (n < 0) {
            if (errno == EINTR) continue;
            throw_errno(fmt::format("pread({})", what));
        }
        if (n == 0) throw SnapshotError(fmt::format("{}: ends early (at byte {})", what, offset));
        p += n;
        bytes -= static_cast<uint64_t>(n);
        offset += static_cast<uint64_t>(n);
    }
}

/// Linear page `p` of `memory` as a host pointer (regions in GPA order).
uint8_t* page_host(const GuestMemory& memory, uint64_t p) {
    for (const MemoryRegion& r : memory.regions()) {
        const uint64_t pages = r.size / kPageSize;
        if (p < pages) return r.host + p * kPageSize;
        p -= pages;
    }
    return nullptr;
}

}  // namespace

Fd write_fork_delta(const GuestMemory& memory, const PageBitmap& pages, uint64_t& count) {
    const uint64_t total = memory.ram_bytes() / kPageSize;
    std::vector<uint64_t> header{0, 0, total};
    std::memcpy(&header[0], kDeltaMagic, 8);
    for (uint64_t p = 0; p < total; ++p)
        if (page_set(pages, p)) header.push_back(p);
    count = header.size() - 3;
    header[1] = count;
    Fd fd(::memfd_create("nanovm-fork-delta", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!fd) throw_errno("memfd_create(fork delta)");
    const uint64_t data = data_offset(count);
    if (::ftruncate(fd.get(), static_cast<off_t>(data + count * kPageSize)) != 0) throw_errno("ftruncate(fork delta)");
    pwrite_all(fd.get(), reinterpret_cast<const uint8_t*>(header.data()), header.size() * 8, 0, "fork delta");
    // Runs of pages adjacent in RAM and in the delta go in one write.
    for (uint64_t i = 0; i < count;) {
        uint64_t n = 1;
        uint8_t* host = page_host(memory, header[3 + i]);
        while (i + n < count && header[3 + i + n] == header[3 + i] + n &&
               page_host(memory, header[3 + i + n]) == host + n * kPageSize)
            ++n;
        pwrite_all(fd.get(), host, n * kPageSize, data + i * kPageSize, "fork delta");
        i += n;
    }
    if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
        throw_errno("fcntl(F_ADD_SEALS) on the fork delta");
    return fd;
}

uint64_t apply_fork_delta(int fd, GuestMemory& memory, std::string_view what) {
    const uint64_t total = memory.ram_bytes() / kPageSize;
    uint64_t fixed[3];
    pread_all(fd, fixed, sizeof(fixed), 0, what);
    if (std::memcmp(&fixed[0], kDeltaMagic, 8) != 0) throw SnapshotError(fmt::format("{}: not a fork delta (magic)", what));
    const uint64_t count = fixed[1];
    if (fixed[2] != total)
        throw SnapshotError(fmt::format("{}: made for {} pages of RAM, this VM has {}", what, fixed[2], total));
    if (count > total) throw SnapshotError(fmt::format("{}: {} pages for {} pages of RAM", what, count, total));
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw_errno(fmt::format("fstat({})", what));
    const uint64_t data = data_offset(count);
    if (static_cast<uint64_t>(st.st_size) < data + count * kPageSize)
        throw SnapshotError(fmt::format("{}: {} bytes cannot hold its {} pages", what, st.st_size, count));
    std::vector<uint64_t> index(count);
    if (count > 0) pread_all(fd, index.data(), count * 8, kFixedHeader, what);
    for (uint64_t i = 0; i < count; ++i)
        if (index[i] >= total || (i > 0 && index[i] <= index[i - 1]))
            throw SnapshotError(fmt::format("{}: page index {} ({}) out of range or not ascending", what, i, index[i]));
    for (uint64_t i = 0; i < count;) {
        uint64_t n = 1;
        uint8_t* host = page_host(memory, index[i]);
        while (i + n < count && index[i + n] == index[i] + n && page_host(memory, index[i + n]) == host + n * kPageSize)
            ++n;
        pread_all(fd, host, n * kPageSize, data + i * kPageSize, what);
        i += n;
    }
    return count;
}

}  // namespace nanovm::snapshot
