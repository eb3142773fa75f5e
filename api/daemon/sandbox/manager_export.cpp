// The sandbox manager: snapshot export and import (manager.hpp; the file format:
// archive/snapshot_export.hpp).
//
// Export reads a durable snapshot's directory (the files of its chain in other
// directories too) and streams the flattened, compressed file; nothing is written on
// this host. Import, on a worker, from the body the HTTP server spooled to
// <state>/uploads/.upload-XXXXXX (removed when the request ends, whatever happens):
//   1. the file checked and unpacked into <state>/imports/<new id> (removed on any
//      failure), over this host's file with the root image's digest
//   2. the snapshot's record (saving) and its directory in the store, then the
//      directory renamed to <state>/snapshots/<id> and that directory fsync'd
//   3. the record ready and durable: it restores like any other snapshot
// A daemon killed during 1 leaves <state>/imports/<id> and the upload: both removed
// at the next start (recover_imports). Killed during 2: the record is saving and its
// directory not durable (or missing), so the start's snapshot recovery deletes it;
// once the rename is done the directory is durable and the recovery keeps it.
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "api/daemon/api_error.hpp"
#include "api/daemon/archive/snapshot_export.hpp"
#include "api/daemon/sandbox/manager.hpp"
#include "api/daemon/store/file_refs.hpp"
#include "vmm/log.hpp"

namespace nanovm::daemon {

namespace fs = std::filesystem;
using store::SnapshotRecord;

namespace {

// How long an export waits for its snapshot to become durable (as a restore).
constexpr auto kExportWait = std::chrono::minutes(10);

bool is_disk_full(const std::exception& e) {
    if (const auto* sys = dynamic_cast<const SysError*>(&e); sys && (sys->code() == ENOSPC || sys->code() == EDQUOT))
        return true;
    return std::string_view(e.what()).find("No space left on device") != std::string_view::npos;
}

}  // namespace

std::string SandboxManager::upload_dir() const { return options_.state_dir + "/uploads"; }

void SandboxManager::recover_imports() {
    // Uploads and unpacked imports belong to no record: a request that was cut short.
    size_t n = 0;
    for (const std::string& dir : {upload_dir(), options_.state_dir + "/imports"}) {
        std::error_code ec;
        std::vector<fs::path> left;
        for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) left.push_back(it->path());
        for (const fs::path& p : left) n += fs::remove_all(p, ec) > 0 ? 1 : 0;
        ec.clear();
        fs::create_directories(dir, ec);
        if (ec) throw SysError("mkdir " + dir, ec.value());
    }
    if (n > 0) log_line(fmt::format("removed {} upload(s) or import(s) a daemon stopped before they finished", n));
}

SnapshotExport SandboxManager::prepare_export(const std::string& id) {
    SnapshotRecord s = get_snapshot(id);
    if (s.state == "error") throw ApiError("wrong_state", fmt::format("snapshot {} failed: {}", s.id, s.error));
    if (!s.durable) s = wait_durable(s.id, kExportWait);
    if (!s.durable) throw ApiError("wrong_state", fmt::format("snapshot {} is not saved yet", s.id));
    // A snapshot of a sandbox made before images were pinned (or from a template):
    // the image its vm.state names is pinned now, so the export can name its digest.
    std::string digest = s.image_digest;
    if (digest.empty()) digest = pins_.pin(archive::snapshot_root_image(s.dir)).digest;
    const std::string root = pins_.path_of(digest);
    std::error_code ec;
    const uint64_t root_bytes = root.empty() ? 0 : fs::file_size(root, ec);
    if (root.empty() || ec)
        throw ApiError("image_not_found", fmt::format("snapshot {}: its root image (sha256 {}) is not pinned in {}", s.id,
                                                      digest, pins_.dir()));
    archive::SnapshotExportInfo info;
    info.snapshot_id = s.id;
    info.created_ms = s.created_ms;
    info.cpus = s.cpus;
    info.memory_mb = s.memory_mb;
    info.disable_internet = s.disable_internet;
    info.image = s.image;
    info.image_digest = digest;
    info.image_bytes = root_bytes;
    return SnapshotExport{s, info};
}

void SandboxManager::write_export(const SnapshotExport& e, archive::BlobWriter& out) {
    const archive::PackStats stats = archive::export_snapshot(e.snapshot.dir, e.info, out, [this](uint64_t, uint64_t) {
        if (stopping_) throw Error("the daemon is stopping");
    });
    log_line(fmt::format("snapshot {}: exported {} MiB as {} MiB ({} zstd workers) in {:.0f} ms", e.snapshot.id,
                         stats.raw_bytes >> 20, stats.compressed_bytes >> 20, stats.workers, stats.ms));
}

std::string SandboxManager::import_root(const archive::SnapshotExportInfo& info) {
    if (std::string root = pins_.path_of(info.image_digest); !root.empty()) return root;
    // Not pinned here yet: this host's image of the same name, if its bytes are the same.
    std::string local_digest;
    if (info.image == "default" || info.image == "tiny") {
        const store::ImagePin pin = pins_.pin(VmDriver::image_path(info.image));
        if (pin.digest == info.image_digest) return pin.path;
        local_digest = pin.digest;
    }
    throw ApiError("image_not_found",
                   fmt::format("the snapshot's root image (\"{}\", sha256 {}, {} bytes) is not on this host: not pinned "
                               "in {}{}",
                               info.image, info.image_digest, info.image_bytes, pins_.dir(),
                               local_digest.empty() ? ""
                                                    : fmt::format(", and this host's image \"{}\" is sha256 {}",
                                                                  info.image, local_digest)));
}

SnapshotRecord SandboxManager::import_snapshot(const std::string& file) {
    const std::string id = new_uuid();
    const std::string work = options_.state_dir + "/imports/" + id;
    std::error_code ec;
    fs::create_directories(options_.state_dir + "/imports", ec);
    fs::create_directories(options_.state_dir + "/snapshots", ec);
    archive::SnapshotExportInfo info;
    try {
        info = archive::import_snapshot(
            file, work, [this](const archive::SnapshotExportInfo& i) { return import_root(i); },
            [this](uint64_t, uint64_t) {
                if (stopping_) throw Error("the daemon is stopping");
            });
    } catch (const ApiError&) {
        throw;
    } catch (const archive::ArchiveError& e) {
        throw ApiError("invalid_archive", e.what());
    } catch (const std::exception& e) {
        if (is_disk_full(e)) throw ApiError("disk_full", fmt::format("import: {}", e.what()));
        throw;
    }
    SnapshotRecord snap = new_snapshot_record(id, info);
    try {
        store_.put_snapshot(snap);
        store_.add_dir(snap.dir, "snapshot", snap.id);
        if (::rename(work.c_str(), snap.dir.c_str()) != 0) throw_errno(fmt::format("rename {} {}", work, snap.dir));
        archive::sync_dir(options_.state_dir + "/snapshots");
        snap.state = "ready";
        snap.durable = true;
        store_.add_refs(snap.dir, store::external_files(snap.dir));
        store_.put_snapshot(snap);
    } catch (const std::exception& e) {
        fs::remove_all(work, ec);
        try {
            store_.delete_snapshot(snap.id);
            release(snap.dir);
        } catch (const std::exception& undoing) {
            log_line(fmt::format("import {}: undoing: {}", snap.id, undoing.what()));
        }
        if (is_disk_full(e)) throw ApiError("disk_full", fmt::format("import: {}", e.what()));
        throw;
    }
    log_line(fmt::format("snapshot {}: imported (exported as {} from a sandbox of {} cpus, {} MiB)", snap.id,
                         info.snapshot_id, info.cpus, info.memory_mb));
    return snap;
}

}  // namespace nanovm::daemon
