#include "snapshot/state_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

#include "snapshot/crc32c.hpp"
#include "snapshot/snapshot_error.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"

namespace nanovm::snapshot {

namespace {

constexpr char kMagic[8] = {'N', 'A', 'N', 'O', 'V', 'M', 'S', 'T'};

struct FileHeader {
    char magic[8];
    uint32_t version;
    uint32_t section_count;
    uint64_t file_bytes;
    uint32_t flags;
    uint32_t header_crc;  // over the 28 bytes before it
};
static_assert(sizeof(FileHeader) == 32);

struct SectionHeader {
    uint32_t type;
    uint32_t instance;
    uint64_t length;
    uint32_t payload_crc;
    uint32_t header_crc;  // over the 20 bytes before it
};
static_assert(sizeof(SectionHeader) == 24);

// Sections allowed in one file: far more than 32 vCPUs x 11 + devices need.
constexpr uint32_t kMaxSections = 1u << 16;

template <typename T>
uint32_t crc_before_last_field(const T& header) {
    return crc32c({reinterpret_cast<const uint8_t*>(&header), sizeof(T) - sizeof(uint32_t)});
}

bool known(uint32_t type) {
    switch (static_cast<SectionType>(type)) {
        case SectionType::machine:
        case SectionType::vcpu_regs:
        case SectionType::vcpu_sregs:
        case SectionType::vcpu_xsave:
        case SectionType::vcpu_xcrs:
        case SectionType::vcpu_debugregs:
        case SectionType::vcpu_msrs:
        case SectionType::vcpu_lapic:
        case SectionType::vcpu_events:
        case SectionType::devices:
        case SectionType::vcpu_mp_state:
        case SectionType::vcpu_cpuid:
        case SectionType::pic_master:
        case SectionType::pic_slave:
        case SectionType::ioapic:
        case SectionType::pit2:
        case SectionType::clock:
            return true;
    }
    return false;
}

}  // namespace

std::string section_name(uint32_t type, uint32_t instance) {
    const char* vcpu_part = nullptr;
    switch (static_cast<SectionType>(type)) {
        case SectionType::machine: return "machine";
        case SectionType::vcpu_regs: vcpu_part = "regs"; break;
        case SectionType::vcpu_sregs: vcpu_part = "sregs"; break;
        case SectionType::vcpu_xsave: vcpu_part = "xsave"; break;
        case SectionType::vcpu_xcrs: vcpu_part = "xcrs"; break;
        case SectionType::vcpu_debugregs: vcpu_part = "debugregs"; break;
        case SectionType::vcpu_msrs: vcpu_part = "msrs"; break;
        case SectionType::vcpu_lapic: vcpu_part = "lapic"; break;
        case SectionType::vcpu_events: vcpu_part = "events"; break;
        case SectionType::vcpu_mp_state: vcpu_part = "mp_state"; break;
        case SectionType::vcpu_cpuid: vcpu_part = "cpuid"; break;
        case SectionType::pic_master: return "pic master";
        case SectionType::pic_slave: return "pic slave";
        case SectionType::ioapic: return "ioapic";
        case SectionType::pit2: return "pit2";
        case SectionType::clock: return "clock";
        case SectionType::devices: return "devices";
    }
    if (vcpu_part) return fmt::format("vcpu {} {}", instance, vcpu_part);
    return fmt::format("type {:#x} instance {}", type, instance);
}

void StateWriter::add(SectionType type, uint32_t instance, std::span<const uint8_t> payload) {
    SectionHeader h{};
    h.type = static_cast<uint32_t>(type);
    h.instance = instance;
    h.length = payload.size();
    h.payload_crc = crc32c(payload);
    h.header_crc = crc_before_last_field(h);
    const auto* hb = reinterpret_cast<const uint8_t*>(&h);
    body_.insert(body_.end(), hb, hb + sizeof(h));
    body_.insert(body_.end(), payload.begin(), payload.end());
    ++count_;
}

std::vector<uint8_t> StateWriter::finish() const {
    FileHeader h{};
    std::memcpy(h.magic, kMagic, sizeof(kMagic));
    h.version = kStateFormatVersion;
    h.section_count = count_;
    h.file_bytes = sizeof(FileHeader) + body_.size();
    h.flags = 0;
    h.header_crc = crc_before_last_field(h);
    std::vector<uint8_t> out(sizeof(FileHeader) + body_.size());
    std::memcpy(out.data(), &h, sizeof(h));
    if (!body_.empty()) std::memcpy(out.data() + sizeof(FileHeader), body_.data(), body_.size());
    return out;
}

std::vector<SectionView> parse_state_file(std::span<const uint8_t> file, std::string_view file_name) {
    const auto fail = [&](const std::string& what) -> SnapshotError {
        return SnapshotError(fmt::format("{}: {}", file_name, what));
    };
    if (file.size() < sizeof(FileHeader))
        throw fail(fmt::format("truncated: the header needs {} bytes, the file has {}", sizeof(FileHeader), file.size()));
    FileHeader h;
    std::memcpy(&h, file.data(), sizeof(h));
    if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) throw fail("not a nanovm state file (bad magic)");
    if (crc_before_last_field(h) != h.header_crc) throw fail("header checksum mismatch (corrupt header)");
    if (h.version > kStateFormatVersion)
        throw fail(fmt::format("format version {} was written by a newer nanovm; this nanovm reads versions 1 to {}",
                               h.version, kStateFormatVersion));
    if (h.version == 0) throw fail("format version 0 is not valid");
    if (h.file_bytes != file.size())
        throw fail(fmt::format("{}: the header says {} bytes, the file has {}",
                               h.file_bytes > file.size() ? "truncated" : "trailing bytes", h.file_bytes,
                               file.size()));
    if (h.section_count > kMaxSections)
        throw fail(fmt::format("{} sections is more than the {} allowed", h.section_count, kMaxSections));

    std::vector<SectionView> sections;
    uint64_t at = sizeof(FileHeader);
    for (uint32_t i = 0; i < h.section_count; ++i) {
        if (file.size() - at < sizeof(SectionHeader))
            throw fail(fmt::format("section {} of {}: truncated header", i, h.section_count));
        SectionHeader s;
        std::memcpy(&s, file.data() + at, sizeof(s));
        if (crc_before_last_field(s) != s.header_crc)
            throw fail(fmt::format("section {}: header checksum mismatch (corrupt section header)", i));
        const std::string name = section_name(s.type, s.instance);
        at += sizeof(SectionHeader);
        if (s.length > file.size() - at)
            throw fail(fmt::format("section {} ({}): truncated: needs {} bytes, {} left", i, name, s.length,
                                   file.size() - at));
        const std::span<const uint8_t> payload = file.subspan(at, s.length);
        at += s.length;
        const uint32_t crc = crc32c(payload);
        if (crc != s.payload_crc)
            throw fail(fmt::format("section {} ({}): checksum mismatch (stored {:#010x}, computed {:#010x})", i, name,
                                   s.payload_crc, crc));
        if (!known(s.type)) {
            if (s.type & kOptionalSection) continue;
            throw fail(fmt::format("section {} ({}): unknown required section type (written by a newer nanovm?)", i,
                                   name));
        }
        sections.push_back({s.type, s.instance, payload});
    }
    if (at != file.size()) throw fail(fmt::format("{} bytes after the last section", file.size() - at));
    return sections;
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes, bool sync) {
    const std::string tmp = path + ".tmp";
    {
        Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        if (!fd) throw_errno("open " + tmp);
        size_t done = 0;
        while (done < bytes.size()) {
            const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
            if (n < 0) {
                if (errno == EINTR) continue;
                throw_errno("write " + tmp);
            }
            done += static_cast<size_t>(n);
        }
        if (sync && ::fsync(fd.get()) != 0) throw_errno("fsync " + tmp);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw_errno("rename " + tmp);
    if (!sync) return;
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dfd) throw_errno("open " + dir);
    if (::fsync(dfd.get()) != 0) throw_errno("fsync " + dir);
}

std::vector<uint8_t> read_whole_file(const std::string& path) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) throw_errno("open " + path);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw_errno("fstat " + path);
    std::vector<uint8_t> out(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < out.size()) {
        const ssize_t n = ::read(fd.get(), out.data() + done, out.size() - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw_errno("read " + path);
        }
        if (n == 0) break;
        done += static_cast<size_t>(n);
    }
    out.resize(done);
    return out;
}

}  // namespace nanovm::snapshot
