// Directory references (file_refs.hpp).
#include "api/daemon/store/file_refs.hpp"

#include <fcntl.h>

#include <filesystem>
#include <set>
#include <system_error>

#include "api/daemon/store/store.hpp"
#include "devices/virtio/blk/disk_layer.hpp"
#include "snapshot/manifest.hpp"
#include "vmm/fd.hpp"
#include "vmm/log.hpp"

namespace nanovm::daemon::store {

namespace fs = std::filesystem;

namespace {

// The parent path of the layer file at `path`, "" if it is not a layer or has none.
std::string layer_parent(const std::string& path) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd || !virtio::blk::is_layer_file(fd.get())) return {};
    try {
        const virtio::blk::LayerHeader header = virtio::blk::read_layer_header(fd.get(), path);
        return header.parent.path;
    } catch (const std::exception&) {
        return {};
    }
}

void remove_dirs(Store& store, const std::vector<std::string>& dirs) {
    for (const std::string& dir : dirs) {
        std::error_code ec;
        fs::remove_all(dir, ec);
        if (ec) {
            log_line("removing " + dir + ": " + ec.message());
            continue;  // stays marked removing: tried again at the next start
        }
        store.forget_dir(dir);
    }
}

}  // namespace

std::vector<std::string> external_files(const std::string& dir) {
    std::set<std::string> out;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        if (!it->is_regular_file(ec)) continue;
        std::string current = it->path().string();
        // Within dir, a chain is at most a few layers (LayeredDisk::kMaxDepth).
        for (int depth = 0; depth < 64; ++depth) {
            const std::string parent = layer_parent(current);
            if (parent.empty()) break;
            if (parent.find('/') == std::string::npos) {
                current = dir + "/" + parent;
                continue;
            }
            out.insert(fs::path(parent).lexically_normal().string());
            break;
        }
    }
    // A snapshot's memory may be a diff over other snapshots' memory layers: its
    // manifest's chain lines name them, relative to the directory.
    if (fs::exists(dir + "/" + snapshot::kManifestFileName, ec)) {
        try {
            for (const snapshot::ChainLayer& layer : snapshot::read_manifest(dir).chain)
                out.insert((fs::path(dir) / layer.path).lexically_normal().string());
        } catch (const std::exception& e) {
            log_line("references of " + dir + ": " + e.what());
        }
    }
    return {out.begin(), out.end()};
}

void track_dir(Store& store, const std::string& dir, const std::string& kind, const std::string& owner, Sync sync) {
    store.add_dir(dir, kind, owner, sync);
    store.add_refs(dir, external_files(dir), sync);
}

std::vector<std::string> release_and_collect(Store& store, const std::string& dir) {
    store.release_dir(dir);
    const std::vector<std::string> dirs = store.collect();
    remove_dirs(store, dirs);
    return dirs;
}

std::vector<std::string> finish_removals(Store& store) {
    std::vector<std::string> dirs = store.removing_dirs();
    for (const std::string& d : store.collect()) dirs.push_back(d);
    remove_dirs(store, dirs);
    return dirs;
}

}  // namespace nanovm::daemon::store
