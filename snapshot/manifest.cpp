#include "snapshot/manifest.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "snapshot/crc32c.hpp"
#include "snapshot/snapshot_error.hpp"
#include "snapshot/state_file.hpp"
#include "snapshot/test_stall.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"

namespace nanovm::snapshot {

namespace {

constexpr std::string_view kFirstLine = "nanovm-manifest";

bool safe_name(std::string_view name) {
    if (name.empty() || name.size() > 64 || name == "." || name == "..") return false;
    for (const char c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                        c == '_' || c == '-';
        if (!ok) return false;
    }
    return true;
}

constexpr size_t kMaxChainPath = 4096;

bool plain_path_byte(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '/' || c == '-' || c == '+' || c == ',' || c == '=' || c == '@' || c == '~';
}

std::string escape_path(std::string_view path) {
    std::string out;
    for (const char c : path) out += plain_path_byte(c) ? std::string(1, c) : fmt::format("%{:02X}", static_cast<uint8_t>(c));
    return out;
}

// The path an escaped chain field stands for; nullopt if malformed.
std::optional<std::string> unescape_path(std::string_view field) {
    std::string out;
    for (size_t i = 0; i < field.size(); ++i) {
        if (field[i] != '%') {
            if (!plain_path_byte(field[i])) return std::nullopt;
            out += field[i];
            continue;
        }
        uint8_t byte = 0;
        if (i + 2 >= field.size()) return std::nullopt;
        const std::string_view hex = field.substr(i + 1, 2);
        for (const char c : hex)
            if (!((c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'))) return std::nullopt;
        std::from_chars(hex.data(), hex.data() + 2, byte, 16);
        out += static_cast<char>(byte);
        i += 2;
    }
    return out;
}

bool valid_chain_path(std::string_view path) {
    return !path.empty() && path.size() <= kMaxChainPath && path.front() != '/' &&
           path.find('\0') == std::string_view::npos && path.find('\n') == std::string_view::npos;
}

uint32_t text_crc(std::string_view text) {
    return crc32c({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

std::string join(const std::string& dir, const std::string& name) {
    return (std::filesystem::path(dir) / name).string();
}

void fsync_dir(const std::string& dir) {
    Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) throw_errno("open " + dir);
    if (::fsync(fd.get()) != 0) throw_errno("fsync " + dir);
}

// Splits `text` into fields separated by single spaces.
std::vector<std::string_view> fields(std::string_view line) {
    std::vector<std::string_view> out;
    size_t at = 0;
    while (at <= line.size()) {
        const size_t space = line.find(' ', at);
        const size_t end = space == std::string_view::npos ? line.size() : space;
        out.push_back(line.substr(at, end - at));
        if (space == std::string_view::npos) break;
        at = space + 1;
    }
    return out;
}

template <typename T>
bool parse_number(std::string_view s, T& out, int base) {
    if (s.empty() || s.size() > 20) return false;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
    return ec == std::errc() && end == s.data() + s.size();
}

bool parse_crc(std::string_view s, uint32_t& out) {
    if (s.size() != 8) return false;
    for (const char c : s)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    return parse_number(s, out, 16);
}

}  // namespace

const ManifestPart* Manifest::find(std::string_view name) const noexcept {
    for (const ManifestPart& p : parts)
        if (p.name == name) return &p;
    return nullptr;
}

std::string encode_manifest(const Manifest& manifest) {
    if (manifest.parts.empty() || manifest.parts.size() > kMaxParts)
        throw Error(fmt::format("manifest: {} parts (1 to {} allowed)", manifest.parts.size(), kMaxParts));
    if (manifest.chain.size() > kMaxChainLayers)
        throw Error(fmt::format("manifest: {} chain layers (at most {})", manifest.chain.size(), kMaxChainLayers));
    // Version 1 readers read a manifest without chain lines.
    std::string text = fmt::format("{} {}\n", kFirstLine, manifest.chain.empty() ? 1 : kManifestVersion);
    for (const ManifestPart& p : manifest.parts) {
        if (!safe_name(p.name)) throw Error(fmt::format("manifest: part name '{}' is not a plain file name", p.name));
        text += fmt::format("part {} {} {:08x}\n", p.name, p.bytes, p.crc32c);
    }
    for (const ChainLayer& c : manifest.chain) {
        if (!valid_chain_path(c.path))
            throw Error(fmt::format("manifest: chain layer path '{}' is empty, absolute or too long", c.path));
        text += fmt::format("chain {} {:08x}\n", escape_path(c.path), c.checksum);
    }
    text += fmt::format("end {:08x}\n", text_crc(text));
    return text;
}

Manifest decode_manifest(std::string_view text, const std::string& where) {
    const auto fail = [&](size_t line, const std::string& what) {
        return SnapshotError(fmt::format("{}: line {}: {}", where, line, what));
    };
    if (text.size() > kMaxManifestBytes)
        throw SnapshotError(fmt::format("{}: {} bytes, more than a manifest can have ({})", where, text.size(),
                                        kMaxManifestBytes));
    Manifest manifest;
    std::set<std::string_view> names;
    size_t at = 0, line_no = 0;
    uint32_t version = 0;
    bool ended = false;
    while (at < text.size()) {
        ++line_no;
        const size_t nl = text.find('\n', at);
        if (nl == std::string_view::npos) throw fail(line_no, "truncated (no end of line)");
        const std::string_view line = text.substr(at, nl - at);
        const std::vector<std::string_view> f = fields(line);
        if (ended) throw fail(line_no, "text after the end line");
        if (line_no == 1) {
            if (f.size() != 2 || f[0] != kFirstLine || !parse_number(f[1], version, 10))
                throw fail(line_no, "not a nanovm snapshot manifest");
            if (version > kManifestVersion)
                throw fail(line_no, fmt::format("manifest version {} was written by a newer nanovm; this one reads 1 to {}",
                                                version, kManifestVersion));
            if (version == 0) throw fail(line_no, "manifest version 0 is not valid");
        } else if (!f.empty() && f[0] == "part") {
            ManifestPart p;
            if (f.size() != 4) throw fail(line_no, "a part line is 'part NAME BYTES CRC32C'");
            if (!safe_name(f[1])) throw fail(line_no, "part name is not a plain file name");
            if (!parse_number(f[2], p.bytes, 10)) throw fail(line_no, "part size is not a decimal number");
            if (!parse_crc(f[3], p.crc32c)) throw fail(line_no, "part checksum is not 8 lower-case hex digits");
            if (!names.insert(f[1]).second) throw fail(line_no, fmt::format("part {} listed twice", f[1]));
            if (manifest.parts.size() == kMaxParts) throw fail(line_no, fmt::format("more than {} parts", kMaxParts));
            p.name = std::string(f[1]);
            manifest.parts.push_back(std::move(p));
        } else if (!f.empty() && f[0] == "chain") {
            if (version < 2) throw fail(line_no, "a chain line in a version 1 manifest");
            if (f.size() != 3) throw fail(line_no, "a chain line is 'chain PATH CHECKSUM'");
            const std::optional<std::string> path = unescape_path(f[1]);
            if (!path || !valid_chain_path(*path))
                throw fail(line_no, "chain path is not a relative path (escaped as %XX outside [A-Za-z0-9._/+,=@~-])");
            ChainLayer c;
            c.path = *path;
            if (!parse_crc(f[2], c.checksum)) throw fail(line_no, "chain checksum is not 8 lower-case hex digits");
            if (manifest.chain.size() == kMaxChainLayers)
                throw fail(line_no, fmt::format("more than {} chain layers", kMaxChainLayers));
            manifest.chain.push_back(std::move(c));
        } else if (!f.empty() && f[0] == "end") {
            uint32_t stored = 0;
            if (f.size() != 2 || !parse_crc(f[1], stored)) throw fail(line_no, "an end line is 'end CRC32C'");
            const uint32_t computed = text_crc(text.substr(0, at));
            if (stored != computed)
                throw fail(line_no, fmt::format("checksum mismatch (stored {:08x}, computed {:08x}): corrupt manifest",
                                                stored, computed));
            ended = true;
        } else {
            throw fail(line_no, "unknown record");
        }
        at = nl + 1;
    }
    if (line_no == 0) throw SnapshotError(fmt::format("{}: empty", where));
    if (!ended) throw fail(line_no, "truncated (no end line)");
    if (manifest.parts.empty()) throw fail(line_no, "no parts");
    return manifest;
}

ManifestPart describe_part(const std::string& dir, const std::string& name) {
    const std::string path = join(dir, name);
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) throw_errno("open " + path);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw_errno("fstat " + path);
    ManifestPart p;
    p.name = name;
    p.bytes = static_cast<uint64_t>(st.st_size);
    if (p.bytes == 0) return p;
    void* map = ::mmap(nullptr, p.bytes, PROT_READ, MAP_SHARED, fd.get(), 0);
    if (map == MAP_FAILED) throw_errno("mmap " + path);
    const auto* bytes = static_cast<const uint8_t*>(map);
    // Holes (a memory layer is mostly holes) count as the zeros they read as, but
    // are not read: only the data extents are.
    uint32_t crc = 0;
    uint64_t at = 0;
    while (at < p.bytes) {
        off_t data = ::lseek(fd.get(), static_cast<off_t>(at), SEEK_DATA);
        if (data < 0) {
            if (errno != ENXIO) {
                ::munmap(map, p.bytes);
                throw_errno("lseek(SEEK_DATA) " + path);
            }
            data = static_cast<off_t>(p.bytes);  // only a hole is left
        }
        crc = crc32c_zeros(crc, static_cast<uint64_t>(data) - at);
        at = static_cast<uint64_t>(data);
        if (at >= p.bytes) break;
        off_t hole = ::lseek(fd.get(), data, SEEK_HOLE);
        if (hole < 0) hole = static_cast<off_t>(p.bytes);
        const uint64_t end = std::min<uint64_t>(static_cast<uint64_t>(hole), p.bytes);
        crc = crc32c({bytes + at, end - at}, crc);
        at = end;
    }
    ::munmap(map, p.bytes);
    p.crc32c = crc;
    return p;
}

namespace {

// A part file's identity for parts.verified: what changes when it is rewritten.
struct PartIdentity {
    uint64_t inode = 0, bytes = 0;
    int64_t mtime_ns = 0;
    bool operator==(const PartIdentity&) const = default;
};

PartIdentity identity_of(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw_errno("stat " + path);
    return {static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size),
            static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

using VerifiedParts = std::map<std::string, std::pair<PartIdentity, uint32_t>>;

VerifiedParts read_verified(const std::string& dir) {
    VerifiedParts out;
    std::ifstream in(join(dir, kVerifiedFileName));
    std::string name;
    PartIdentity id;
    std::string crc;
    while (in >> name >> id.inode >> id.bytes >> id.mtime_ns >> crc) {
        if (crc.size() != 8) break;
        out[name] = {id, static_cast<uint32_t>(std::strtoul(crc.c_str(), nullptr, 16))};
    }
    return out;
}

// Best effort: a cache that cannot be written is checked again next time.
void write_verified(const std::string& dir, const VerifiedParts& parts) noexcept {
    std::string text;
    for (const auto& [name, entry] : parts)
        text += fmt::format("{} {} {} {} {:08x}\n", name, entry.first.inode, entry.first.bytes, entry.first.mtime_ns,
                            entry.second);
    const std::string path = join(dir, kVerifiedFileName);
    const std::string tmp = fmt::format("{}.{}.tmp", path, ::getpid());  // restores of one snapshot run at once
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << text;
        if (!out.flush()) {
            std::error_code ec;
            std::filesystem::remove(tmp, ec);
            return;
        }
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) ::unlink(tmp.c_str());
}

}  // namespace

Manifest write_manifest(const std::string& dir, const std::vector<std::string>& names, bool sync,
                        const std::vector<ChainLayer>& chain, const std::vector<DescribedPart>& described) {
    Manifest manifest;
    manifest.chain = chain;
    std::vector<std::string> read;  // the parts described from their bytes: verified
    for (const std::string& name : names) {
        const auto given = std::find_if(described.begin(), described.end(),
                                        [&](const DescribedPart& p) { return p.part.name == name; });
        if (given != described.end()) {
            manifest.parts.push_back(given->part);
            if (given->from_bytes) read.push_back(name);
        } else {
            manifest.parts.push_back(describe_part(dir, name));
            read.push_back(name);
        }
    }
    const std::string text = encode_manifest(manifest);
    const std::string path = join(dir, kManifestFileName), tmp = path + ".tmp";
    {
        Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        if (!fd) throw_errno("open " + tmp);
        if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) throw_errno("write " + tmp);
        if (sync && ::fsync(fd.get()) != 0) throw_errno("fsync " + tmp);
    }
    test_stall_point("manifest-tmp");
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw_errno("rename " + tmp);
    if (sync) fsync_dir(dir);
    // Every part was just read to describe it: that is a verification.
    VerifiedParts verified;
    for (const ManifestPart& part : manifest.parts) {
        if (std::find(read.begin(), read.end(), part.name) == read.end()) continue;
        try {
            verified[part.name] = {identity_of(join(dir, part.name)), part.crc32c};
        } catch (const std::exception&) {
        }
    }
    write_verified(dir, verified);
    return manifest;
}

void check_parts_cached(const std::string& dir, const Manifest& manifest, const std::vector<std::string>& names) {
    VerifiedParts verified = read_verified(dir);
    bool changed = false;
    for (const std::string& name : names) {
        const ManifestPart* want = manifest.find(name);
        if (!want) throw SnapshotError(fmt::format("{}/{}: {} is not listed", dir, kManifestFileName, name));
        const std::string path = join(dir, name);
        if (!std::filesystem::exists(path))
            throw SnapshotError(fmt::format("{}: part listed in the manifest is missing", path));
        const PartIdentity id = identity_of(path);
        if (auto it = verified.find(name);
            it != verified.end() && it->second.first == id && it->second.second == want->crc32c)
            continue;
        if (id.bytes != want->bytes)
            throw SnapshotError(fmt::format("{}: part has {} bytes, the manifest says {} (truncated or rewritten)", path,
                                            id.bytes, want->bytes));
        const ManifestPart got = describe_part(dir, name);
        if (got.crc32c != want->crc32c)
            throw SnapshotError(fmt::format("{}: part checksum mismatch (crc32c {:08x}, the manifest says {:08x}): "
                                            "corrupt part",
                                            path, got.crc32c, want->crc32c));
        verified[name] = {id, want->crc32c};
        changed = true;
    }
    if (changed) write_verified(dir, verified);
}

bool part_verified_cached(const std::string& dir, const Manifest& manifest, const std::string& name) noexcept {
    try {
        const ManifestPart* want = manifest.find(name);
        if (!want) return false;
        const VerifiedParts verified = read_verified(dir);
        const auto it = verified.find(name);
        return it != verified.end() && it->second.second == want->crc32c && it->second.first.bytes == want->bytes &&
               it->second.first == identity_of(join(dir, name));
    } catch (const std::exception&) {
        return false;
    }
}

void remove_manifest(const std::string& dir) {
    const std::string path = join(dir, kManifestFileName);
    if (::unlink(path.c_str()) != 0) {
        if (errno == ENOENT) return;
        throw_errno("unlink " + path);
    }
    fsync_dir(dir);
}

Manifest read_manifest(const std::string& dir) {
    const std::string path = join(dir, kManifestFileName);
    if (!std::filesystem::exists(path)) throw SnapshotError("incomplete snapshot (no manifest): " + dir);
    if (std::filesystem::file_size(path) > kMaxManifestBytes)
        throw SnapshotError(fmt::format("{}: larger than a manifest can be ({} bytes)", path, kMaxManifestBytes));
    const std::vector<uint8_t> bytes = read_whole_file(path);
    return decode_manifest({reinterpret_cast<const char*>(bytes.data()), bytes.size()}, path);
}

void check_parts(const std::string& dir, const Manifest& manifest, PartCheck check) {
    for (const ManifestPart& want : manifest.parts) {
        const std::string path = join(dir, want.name);
        if (!std::filesystem::exists(path))
            throw SnapshotError(fmt::format("{}: part listed in the manifest is missing", path));
        const uint64_t size = std::filesystem::file_size(path);
        if (size != want.bytes)
            throw SnapshotError(fmt::format("{}: part has {} bytes, the manifest says {} (truncated or rewritten)", path,
                                            size, want.bytes));
        if (check == PartCheck::full) {
            const ManifestPart got = describe_part(dir, want.name);
            if (got.crc32c != want.crc32c)
                throw SnapshotError(fmt::format("{}: part checksum mismatch (crc32c {:08x}, the manifest says {:08x}): "
                                                "corrupt part",
                                                path, got.crc32c, want.crc32c));
        }
    }
}

bool is_durable(const std::string& dir) {
    try {
        (void)read_manifest(dir);
        return true;
    } catch (const Error&) {
        return false;
    }
}

}  // namespace nanovm::snapshot
