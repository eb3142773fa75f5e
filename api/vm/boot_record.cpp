// boot.json and the current top of a VM's writable disks (boot_record.hpp).
#include "api/vm/boot_record.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "devices/virtio/blk/disk_layer.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"

namespace nanovm::vm {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// "<id>-disk<i>-<n>.layer" -> (i, n); false for another name.
bool parse_layer_name(const std::string& id, const std::string& name, size_t& disk, uint32_t& number) {
    const std::string prefix = id + "-disk";
    const std::string suffix = ".layer";
    if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
        return false;
    const std::string middle = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    const size_t dash = middle.find('-');
    if (dash == std::string::npos || dash == 0 || dash + 1 == middle.size()) return false;
    const char* a = middle.data();
    auto r1 = std::from_chars(a, a + dash, disk);
    auto r2 = std::from_chars(a + dash + 1, a + middle.size(), number);
    return r1.ec == std::errc() && r1.ptr == a + dash && r2.ec == std::errc() && r2.ptr == a + middle.size();
}

struct LayerFile {
    std::string path;
    virtio::blk::LayerHeader header;
};

}  // namespace

void write_boot_record(const std::string& path, const BootRecord& record) {
    json disks = json::array();
    for (const DiskOption& d : record.disks)
        disks.push_back(json{{"path", d.path},
                             {"read_only", d.read_only},
                             {"serial", d.serial},
                             {"block_size", d.block_size},
                             {"layer_file", d.layer_file}});
    const std::string text = json{{"version", 1},
                                  {"cpus", record.cpus},
                                  {"memory_mib", record.memory_mib},
                                  {"image", record.image},
                                  {"user_disks", record.user_disks},
                                  {"disks", disks}}
                                 .dump() +
                             "\n";
    const std::string tmp = path + ".tmp";
    {
        Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
        if (!fd) throw_errno("open " + tmp);
        write_all(fd.get(), text);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw_errno("rename " + tmp);
}

BootRecord read_boot_record(const std::string& path) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) throw_errno("open " + path);
    std::string text;
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw_errno("read " + path);
        if (n == 0) break;
        text.append(buf, static_cast<size_t>(n));
        if (text.size() > (1u << 20)) throw Error(fmt::format("{}: larger than 1 MiB", path));
    }
    BootRecord r;
    try {
        const json j = json::parse(text);
        if (j.at("version").get<int>() != 1) throw Error(fmt::format("{}: version {} is not 1", path, j.at("version").dump()));
        j.at("cpus").get_to(r.cpus);
        j.at("memory_mib").get_to(r.memory_mib);
        j.at("image").get_to(r.image);
        j.at("user_disks").get_to(r.user_disks);
        for (const json& d : j.at("disks")) {
            DiskOption o;
            d.at("path").get_to(o.path);
            d.at("read_only").get_to(o.read_only);
            d.at("serial").get_to(o.serial);
            d.at("block_size").get_to(o.block_size);
            d.at("layer_file").get_to(o.layer_file);
            r.disks.push_back(std::move(o));
        }
    } catch (const json::exception& e) {
        throw Error(fmt::format("{}: {}", path, e.what()));
    }
    if (r.disks.empty()) throw Error(fmt::format("{}: no disks", path));
    return r;
}

std::string current_top(const VmPaths& paths, size_t index, const std::string& recorded) {
    std::vector<LayerFile> open;  // this disk's layers that are not frozen
    std::error_code ec;
    for (fs::directory_iterator it(paths.dir, ec), end; !ec && it != end; it.increment(ec)) {
        size_t disk = 0;
        uint32_t number = 0;
        const std::string name = it->path().filename().string();
        if (!parse_layer_name(paths.id, name, disk, number) || disk != index) continue;
        const std::string path = it->path().string();
        Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd) throw_errno("open " + path);
        virtio::blk::LayerHeader header = virtio::blk::read_layer_header(fd.get(), path);
        if (!header.frozen) open.push_back(LayerFile{path, std::move(header)});
    }
    if (ec) throw Error(fmt::format("{}: {}", paths.dir, ec.message()));
    if (open.empty()) return recorded;
    if (open.size() == 1) return open.front().path;
    if (open.size() == 2) {
        // A freeze cut short: the new top (empty) names the old one as its parent.
        for (int child = 0; child < 2; ++child) {
            const LayerFile& c = open[static_cast<size_t>(child)];
            const LayerFile& p = open[static_cast<size_t>(1 - child)];
            if (c.header.parent.kind == virtio::blk::ParentKind::layer &&
                fs::path(c.header.parent.path).filename() == fs::path(p.path).filename() && c.header.parent.id == p.header.id) {
                ::unlink(c.path.c_str());
                return p.path;
            }
        }
    }
    std::string names;
    for (const LayerFile& f : open) names += (names.empty() ? "" : ", ") + fs::path(f.path).filename().string();
    throw Error(fmt::format("{}: disk {} has {} layers that are not frozen ({}): which is its top is not clear",
                            paths.dir, index, open.size(), names));
}

uint32_t last_layer_number(const VmPaths& paths) {
    uint32_t last = 0;
    std::error_code ec;
    for (fs::directory_iterator it(paths.dir, ec), end; !ec && it != end; it.increment(ec)) {
        size_t disk = 0;
        uint32_t number = 0;
        if (parse_layer_name(paths.id, it->path().filename().string(), disk, number)) last = std::max(last, number);
    }
    return last;
}

BootRecord kept_disks(const VmPaths& paths) {
    BootRecord r = read_boot_record(paths.boot_file());
    for (size_t i = 0; i < r.disks.size(); ++i) {
        DiskOption& d = r.disks[i];
        if (d.read_only) continue;
        const std::string top = current_top(paths, i, d.path);
        if (top != d.path) {
            d.path = top;
            d.layer_file = true;
        }
    }
    return r;
}

}  // namespace nanovm::vm
