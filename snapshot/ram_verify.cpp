#include "snapshot/ram_verify.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <span>
#include <thread>

#include <fmt/format.h>

#include "snapshot/crc32c.hpp"
#include "snapshot/memory_layer.hpp"
#include "snapshot/state_file.hpp"
#include "vmm/log.hpp"

namespace nanovm::snapshot {

namespace {

constexpr const char* kSumsFile = "ram.crc";
constexpr size_t kListed = 12;  // GPAs named per line

/// log_line, and a line appended to $NANOVM_DEBUG_RAM_VERIFY_LOG if set (one file
/// for every VMM of a test run, which outlives their state directories).
void report(const std::string& line) {
    log_line(line);
    const char* path = std::getenv("NANOVM_DEBUG_RAM_VERIFY_LOG");
    if (path == nullptr || *path == '\0') return;
    const int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    const std::string text = fmt::format("{} pid {}: {}\n", std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                 std::chrono::system_clock::now().time_since_epoch())
                                                                 .count(),
                                         ::getpid(), line);
    [[maybe_unused]] const ssize_t n = ::write(fd, text.data(), text.size());
    ::close(fd);
}

bool lazy(const GuestMemory& memory) {
    return memory.backing() == GuestMemory::Backing::lazy_memfd ||
           memory.backing() == GuestMemory::Backing::lazy_private_memfd;
}

/// GPA of linear page `p` of a layout with region (gpa, size) pairs.
uint64_t page_gpa(const std::vector<std::pair<uint64_t, uint64_t>>& regions, uint64_t p) {
    for (const auto& [gpa, size] : regions) {
        if (p < size / kPageSize) return gpa + p * kPageSize;
        p -= size / kPageSize;
    }
    return ~0ull;
}

std::string describe(const std::vector<uint64_t>& gpas, uint64_t total) {
    std::string out = fmt::format("{} of {} pages differ", gpas.size(), total);
    for (size_t i = 0; i < gpas.size() && i < kListed; ++i) out += fmt::format("{}{:#x}", i == 0 ? ": GPA " : " ", gpas[i]);
    if (gpas.size() > kListed) out += " ...";
    return out;
}

}  // namespace

bool ram_verify_enabled() {
    const char* v = std::getenv("NANOVM_DEBUG_RAM_VERIFY");
    return v != nullptr && std::strcmp(v, "1") == 0;
}

std::vector<uint32_t> guest_page_checksums(const GuestMemory& memory) {
    std::vector<uint32_t> sums;
    if (lazy(memory)) return sums;
    sums.reserve(memory.ram_bytes() / kPageSize);
    for (const MemoryRegion& r : memory.regions())
        for (uint64_t off = 0; off < r.size; off += kPageSize)
            sums.push_back(crc32c(std::span<const uint8_t>(r.host + off, kPageSize)));
    return sums;
}

void write_page_checksums(const std::string& dir, const std::vector<uint32_t>& sums) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(sums.data());
    write_file_atomic(dir + "/" + kSumsFile, std::span<const uint8_t>(bytes, sums.size() * 4), /*sync=*/false);
}

void verify_against_page_checksums(const GuestMemory& memory, const std::string& dir, const std::string& what) {
    try {
        std::ifstream in(dir + "/" + kSumsFile, std::ios::binary);
        if (!in) return;
        std::vector<uint32_t> want(memory.ram_bytes() / kPageSize);
        in.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * 4));
        if (static_cast<size_t>(in.gcount()) != want.size() * 4) {
            report(fmt::format("ram verify ({}): {}/{} has {} bytes, want {}", what, dir, kSumsFile, in.gcount(),
                                 want.size() * 4));
            return;
        }
        const std::vector<uint32_t> got = guest_page_checksums(memory);
        if (got.empty()) return;
        std::vector<std::pair<uint64_t, uint64_t>> regions;
        for (const MemoryRegion& r : memory.regions()) regions.emplace_back(r.gpa.value, r.size);
        std::vector<uint64_t> differ;
        for (uint64_t p = 0; p < got.size(); ++p)
            if (got[p] != want[p]) differ.push_back(page_gpa(regions, p));
        report(differ.empty() ? fmt::format("ram verify ({}): RAM equals the parent's at the freeze ({} pages)", what,
                                              got.size())
                                : fmt::format("ram verify ({}): NOT the parent's RAM at the freeze: {}", what,
                                              describe(differ, got.size())));
    } catch (const std::exception& e) {
        report(fmt::format("ram verify ({}): {}", what, e.what()));
    }
}

void watch_frozen_layer(const std::vector<Fd>& memfds, const std::vector<uint64_t>& bytes, std::vector<uint32_t> sums,
                        std::string what) {
    if (sums.empty()) return;
    std::vector<int> fds;
    for (const Fd& fd : memfds) {
        const int dup = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, 0);
        if (dup < 0) {
            for (int f : fds) ::close(f);
            report(fmt::format("ram verify ({}): dup failed, no watch", what));
            return;
        }
        fds.push_back(dup);
    }
    std::thread([fds, bytes, sums = std::move(sums), what = std::move(what)] {
        std::vector<uint8_t> page(kPageSize);
        uint64_t changed_total = 0;
        int slept = 0;
        for (int at : {1, 5, 20, 60, 120, 240}) {
            std::this_thread::sleep_for(std::chrono::seconds(at - slept));
            slept = at;
            std::vector<uint64_t> changed;  // linear page indices
            uint64_t p = 0;
            for (size_t k = 0; k < fds.size(); ++k)
                for (uint64_t off = 0; off < bytes[k]; off += kPageSize, ++p) {
                    const ssize_t n = ::pread(fds[k], page.data(), kPageSize, static_cast<off_t>(off));
                    if (n != static_cast<ssize_t>(kPageSize)) std::memset(page.data(), 0, kPageSize);
                    if (p < sums.size() && sums[p] != kUnknownPageSum && crc32c(page) != sums[p]) changed.push_back(p);
                }
            changed_total = changed.size();
            if (!changed.empty()) {
                std::string list;
                for (size_t i = 0; i < changed.size() && i < kListed; ++i)
                    list += fmt::format(" {:#x}", changed[i] * kPageSize);
                report(fmt::format("ram verify ({}): the frozen layer CHANGED after the freeze, at +{} s: {} pages "
                                     "(linear offsets{}{})",
                                     what, at, changed.size(), list, changed.size() > kListed ? " ..." : ""));
            }
        }
        if (changed_total == 0)
            report(fmt::format("ram verify ({}): the frozen layer stayed as frozen for 240 s", what));
        for (int f : fds) ::close(f);
    }).detach();
}

}  // namespace nanovm::snapshot
