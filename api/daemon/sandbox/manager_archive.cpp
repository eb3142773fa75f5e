// The sandbox manager: archive and unarchive (manager.hpp), and their recovery.
//
// Archive, under the sandbox's lock:
//   1. the archive's record ("writing", with a blob name new to this attempt), and
//      the sandbox in state archiving
//   2. a snapshot with wait_durable and leave_paused into <state>/archiving/<id>
//      (the VM stays paused from here)
//   3. pack_snapshot into the archive store's blob; commit (durable); record ready
//   4. stop the VMM (its RAM is released); the sandbox archived, no vm_id, end_at
//      null; its VM directory and the work snapshot released (the store collects
//      them once nothing else references them)
// A failure before 4 removes the blob and the record and resumes the VM: the
// sandbox is back in its state before. Unarchive:
//   1. the sandbox in state unarchiving (the caps are checked first)
//   2. unpack_archive into <state>/unarchived/<id>-<ms>, over the pinned root image
//      the archive names, its files left in the page cache (Durability::deferred:
//      a running VM needs no fsync of them; in the test host the fsyncs proper were
//      small by the end, the writeback started as each run was written)
//   3. a VMM restored from it; the sandbox running with the new vm_id (one write);
//      the answer
//   4. in the background (settle_unarchived, under the lock; archive, snapshot and
//      fork run it first): the directory made durable (fsync of its files, itself
//      and its parent), released (the VM's disk layer keeps it), the archive removed.
//      Until then the archive is the sandbox's durable copy: a running VM needs its
//      RAM file only while the host runs, but a host crash must not leave a sandbox
//      whose disk base (disk<i>.raw) was never written out.
// A failure before 3 leaves it archived (the reason in `error`).
//
// Recovery at daemon start (kill -9, host reboot): archiving with a committed
// blob -> finish (step 4); without one and a live VMM -> resumed, running; without
// one and no VMM but a durable work snapshot -> packed now, archived; else error.
// unarchiving -> archived (the VMM it may have started is no record's: the start's
// sweep stops it), its unpack directory released. Another state with an archive
// (cut between 3 and the end of 4): its VMM alive (a daemon killed) -> step 4 now
// (the page cache kept the files), running; its VMM gone (a host crash: the files
// may be torn) -> archived again, the VM's directory and the unpack released.
// Never archived and running both.
#include <sys/wait.h>

#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "api/daemon/api_error.hpp"
#include "api/daemon/archive/sandbox_archive.hpp"
#include "api/daemon/sandbox/manager.hpp"
#include "api/daemon/store/file_refs.hpp"
#include "snapshot/manifest.hpp"
#include "vmm/log.hpp"

namespace nanovm::daemon {

namespace fs = std::filesystem;
using store::ArchiveRecord;
using store::SandboxRecord;

namespace {

std::string work_dir(const std::string& state_dir, const std::string& id) { return state_dir + "/archiving/" + id; }

nlohmann::json archive_info(const SandboxRecord& r) {
    return {{"sandbox_id", r.id}, {"cpus", r.cpus},       {"memory_mb", r.memory_mb},
            {"image", r.image},   {"image_digest", r.image_digest}, {"created_ms", r.created_ms}};
}

// The catalogue error for a failed archive step.
ApiError archive_error(const std::string& what, const std::exception& e) {
    if (const auto* api = dynamic_cast<const ApiError*>(&e)) return ApiError(api->code(), fmt::format("{}: {}", what, api->what()));
    const std::string message = fmt::format("{}: {}", what, e.what());
    return ApiError(message.find("No space left on device") != std::string::npos ? "disk_full" : "vm_error", message);
}

}  // namespace

void SandboxManager::set_progress(const std::string& id, const std::string& phase, uint64_t done, uint64_t total) {
    std::lock_guard lock(progress_mutex_);
    progress_[id] = ArchiveProgress{phase, done, total};
}

void SandboxManager::clear_progress(const std::string& id) {
    std::lock_guard lock(progress_mutex_);
    progress_.erase(id);
}

std::optional<ArchiveProgress> SandboxManager::progress(const std::string& id) {
    std::lock_guard lock(progress_mutex_);
    const auto it = progress_.find(id);
    if (it == progress_.end()) return std::nullopt;
    return it->second;
}

void SandboxManager::start_job(std::function<void()> work) {
    std::lock_guard lock(jobs_mutex_);
    jobs_.emplace_back([work = std::move(work)] {
        try {
            work();
        } catch (const std::exception& e) {
            log_line(fmt::format("background job: {}", e.what()));
        }
    });
}

SandboxRecord SandboxManager::archive(const std::string& id, bool wait) {
    const auto s = slot(must_get(id).id);
    SandboxState before;
    {
        std::lock_guard op(s->op);
        SandboxRecord r = must_get(id);
        before = state_of(r);
        require_allowed(SandboxOp::archive, before);
        if (no_op(SandboxOp::archive, before)) return r;  // archived already
        settle_unarchived(r.id);  // its archive record is replaced below
        const int64_t now = store::now_ms();
        store_.put_archive(ArchiveRecord{r.id, fmt::format("{}-{}.nva", r.id, now), "writing", r.image_digest, 0, 0, now});
        set_progress(r.id, "snapshot", 0, 0);
        set_state(r, *transition(SandboxOp::archive).during);
    }
    const std::string key = must_get(id).id;
    if (!wait) {
        start_job([this, key, before] { run_archive(key, before); });
        return must_get(key);
    }
    run_archive(key, before);
    return must_get(key);
}

void SandboxManager::run_archive(const std::string& id, SandboxState before) {
    const auto s = slot(id);
    std::lock_guard op(s->op);
    auto found = store_.sandbox(id);
    auto a = store_.archive(id);
    if (!found || state_of(*found) != SandboxState::archiving || !a) {
        clear_progress(id);
        return;  // deleted meanwhile
    }
    SandboxRecord r = *found;
    const std::string work = work_dir(options_.state_dir, r.id);
    try {
        std::error_code ec;
        fs::remove_all(work, ec);
        fs::create_directories(fs::path(work).parent_path(), ec);
        store_.add_dir(work, "archive", r.id);
        vms_.snapshot(r.vm_id, work, /*wait_durable=*/true, /*leave_paused=*/true);
        store_.add_refs(work, store::external_files(work));
        pack_into(r, *a, work);
    } catch (const std::exception& e) {
        // Back to where it was: no blob, no record, the VM running again.
        try {
            blobs_.remove(a->blob);
        } catch (const std::exception& removing) {
            log_line(fmt::format("sandbox {}: removing the partial archive: {}", r.id, removing.what()));
        }
        store_.delete_archive(r.id);
        release(work);
        clear_progress(r.id);
        if (vms_.alive(r.vm_id)) {
            try {
                if (before != SandboxState::paused) resume_vmm(r);
                // The reason stays in `error` (until its next change of state): a client
                // that did not wait (wait false) sees why it is running again.
                set_state(r, before == SandboxState::paused ? SandboxState::paused : SandboxState::running,
                          fmt::format("archive failed: {}", e.what()));
            } catch (const std::exception& resuming) {
                set_state(r, SandboxState::error, fmt::format("archive failed ({}), then resume: {}", e.what(), resuming.what()));
            }
        } else {
            set_state(r, SandboxState::error, fmt::format("archive failed: {}; its VMM ended: {}", e.what(), vms_.end_reason(r.vm_id)));
        }
        log_line(fmt::format("sandbox {}: archive failed: {}", r.id, e.what()));
        throw archive_error("archive", e);
    }
    finish_archive(r);
}

void SandboxManager::pack_into(const SandboxRecord& r, ArchiveRecord& a, const std::string& work) {
    set_progress(r.id, "pack", 0, 0);
    // A sandbox that runs over an image not pinned yet (made from a template, or by
    // a daemon before pinning): the image its snapshot names is pinned now, so the
    // archive can name it by digest.
    const bool pinned_here = a.image_digest.empty();
    if (pinned_here) a.image_digest = pins_.pin(archive::snapshot_root_image(work)).digest;
    auto writer = blobs_.put(a.blob);
    const archive::PackStats stats =
        archive::pack_snapshot(work, archive_info(r), *writer, [this, &r](uint64_t done, uint64_t total) {
            if (stopping_) throw Error("the daemon is stopping");
            set_progress(r.id, "pack", done, total);
        });
    writer->commit();
    a.state = "ready";
    a.raw_bytes = static_cast<int64_t>(stats.raw_bytes);
    a.compressed_bytes = static_cast<int64_t>(stats.compressed_bytes);
    store_.put_archive(a);
    if (pinned_here) pins_.recorded(a.image_digest);
    log_line(fmt::format("sandbox {}: archived {} MiB into {} MiB ({}, {} zstd workers) in {:.0f} ms ({:.1f} MB/s)", r.id,
                         stats.raw_bytes >> 20, stats.compressed_bytes >> 20, a.blob, stats.workers, stats.ms,
                         stats.ms > 0 ? static_cast<double>(stats.raw_bytes) / 1e3 / stats.ms : 0.0));
}

void SandboxManager::finish_archive(SandboxRecord r) {
    set_progress(r.id, "stop", 0, 0);
    const std::string vm_id = r.vm_id;
    if (!vm_id.empty()) {
        const pid_t pid = vms_.pid(vm_id);
        if (!vms_.stop(vm_id)) log_line(fmt::format("sandbox {}: its VMM ({}) did not stop", r.id, vm_id));
        if (pid > 0) ::waitpid(pid, nullptr, WNOHANG);
    }
    r.vm_id.clear();
    r.end_at_ms.reset();  // the timeout stops while archived
    clear_progress(r.id);  // first: an answer never shows the new state with the old progress
    set_state(r, *transition(SandboxOp::archive).to);
    if (!vm_id.empty()) release(vms_.paths(vm_id).dir);
    release(work_dir(options_.state_dir, r.id));
}

SandboxRecord SandboxManager::unarchive(const std::string& id, bool wait) {
    const auto s = slot(must_get(id).id);
    std::string key;
    {
        std::lock_guard op(s->op);
        SandboxRecord r = must_get(id);
        require_allowed(SandboxOp::unarchive, state_of(r));
        if (no_op(SandboxOp::unarchive, state_of(r))) return r;  // running already
        const auto a = store_.archive(r.id);
        if (!a || a->state != "ready")
            throw ApiError("wrong_state", fmt::format("sandbox {} has no complete archive", r.id));
        {
            std::lock_guard caps(mutex_);
            check_fits(1, r.memory_mb);
            set_progress(r.id, "unpack", 0, static_cast<uint64_t>(a->compressed_bytes));
            set_state(r, *transition(SandboxOp::unarchive).during);
        }
        key = r.id;
    }
    if (!wait) {
        start_job([this, key] {
            run_unarchive(key);
            settle_later(key);
        });
        return must_get(key);
    }
    run_unarchive(key);
    settle_later(key);
    return must_get(key);
}

std::vector<std::string> SandboxManager::unarchive_dirs(const std::string& id) {
    std::vector<std::string> dirs;
    for (const store::DirRecord& d : store_.dirs())
        if (d.kind == "unarchive" && d.owner == id && !d.released) dirs.push_back(d.path);
    return dirs;
}

void SandboxManager::release_unarchive_dirs(const std::string& id) {
    for (const std::string& dir : unarchive_dirs(id)) release(dir);
}

void SandboxManager::settle_later(const std::string& id) {
    start_job([this, id] {
        if (!store_.sandbox(id)) return;  // deleted meanwhile (its delete released the files)
        const auto s = slot(id);
        std::lock_guard op(s->op);
        if (stopping_) return;  // the next start settles it
        settle_unarchived(id);
    });
}

void SandboxManager::settle_unarchived(const std::string& id) {
    const auto r = store_.sandbox(id);
    if (!r) return;
    const SandboxState st = state_of(*r);
    if (st == SandboxState::archived || st == SandboxState::archiving || st == SandboxState::unarchiving) return;
    const auto a = store_.archive(id);
    if (!a) return;
    const std::vector<std::string> dirs = unarchive_dirs(id);
    double ms = 0;
    for (const std::string& dir : dirs)
        if (fs::is_directory(dir)) ms += archive::make_durable(dir);
    for (const std::string& dir : dirs) release(dir);  // the VM's disk layer keeps its raw disk
    try {
        blobs_.remove(a->blob);
    } catch (const std::exception& e) {
        log_line(fmt::format("sandbox {}: removing its archive {}: {}", id, a->blob, e.what()));
    }
    store_.delete_archive(id);
    log_line(fmt::format("sandbox {}: its unarchived files are durable ({:.0f} ms of fsync): archive {} removed", id,
                         ms, a->blob));
}

void SandboxManager::run_unarchive(const std::string& id) {
    const auto s = slot(id);
    std::lock_guard op(s->op);
    auto found = store_.sandbox(id);
    const auto a = store_.archive(id);
    if (!found || state_of(*found) != SandboxState::unarchiving || !a) {
        clear_progress(id);
        return;
    }
    SandboxRecord r = *found;
    const std::string dir = fmt::format("{}/unarchived/{}-{}", options_.state_dir, r.id, store::now_ms());
    VmDriver::Started started;
    try {
        const std::string root = pins_.path_of(a->image_digest);
        if (root.empty())
            throw ApiError("vm_error", fmt::format("its root image (sha256 {}) is not pinned in {} any more",
                                                   a->image_digest.empty() ? "unknown" : a->image_digest, pins_.dir()));
        std::error_code ec;
        fs::create_directories(fs::path(dir).parent_path(), ec);
        store_.add_dir(dir, "unarchive", r.id);
        auto reader = blobs_.get(a->blob);
        archive::UnpackStats unpacked;
        archive::unpack_archive(
            *reader, dir, root,
            [this, &r](uint64_t done, uint64_t total) {
                if (stopping_) throw Error("the daemon is stopping");
                set_progress(r.id, "unpack", done, total);
            },
            a->blob, &unpacked, archive::Durability::deferred);
        set_progress(r.id, "restore", 0, 0);
        const auto restore_start = std::chrono::steady_clock::now();
        started = vms_.start(static_cast<uint32_t>(r.cpus), static_cast<uint32_t>(r.memory_mb), "", dir, {}, r.id);
        log_line(fmt::format("sandbox {}: unarchived {} MiB from {} in {:.0f} ms (read and decompress {:.0f}, RAM pages "
                             "{:.0f}, disk runs {:.0f}, syncs {:.0f}: layer {:.0f}, disks {:.0f}, manifest {:.0f}), "
                             "then restored in {:.0f} ms",
                             r.id, unpacked.raw_bytes >> 20, a->blob, unpacked.ms, unpacked.read_ms, unpacked.ram_ms,
                             unpacked.disk_ms, unpacked.sync_ms, unpacked.layer_ms, unpacked.disk_sync_ms,
                             unpacked.manifest_ms,
                             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - restore_start)
                                 .count()));
    } catch (const std::exception& e) {
        release(dir);
        clear_progress(r.id);
        set_state(r, SandboxState::archived, fmt::format("unarchive failed: {}", e.what()));
        log_line(fmt::format("sandbox {}: unarchive failed: {}", r.id, e.what()));
        throw archive_error("unarchive", e);
    }
    r.vm_id = started.vm_id;
    if (r.timeout_s && *r.timeout_s > 0) r.end_at_ms = store::now_ms() + *r.timeout_s * 1000;
    clear_progress(r.id);
    set_state(r, *transition(SandboxOp::unarchive).to);
    store::track_dir(store_, started.dir, "vm", r.id);
    // `dir` stays recorded and the archive kept until settle_unarchived made it durable.
}

void SandboxManager::recover_archives() {
    if (const size_t n = blobs_.remove_partials(); n > 0)
        log_line(fmt::format("removed {} partial archive file(s) (an archive cut short)", n));
    for (SandboxRecord r : store_.all_sandboxes()) {
        const SandboxState st = state_of(r);
        auto a = store_.archive(r.id);
        try {
            if (st == SandboxState::archiving) {
                const std::string work = work_dir(options_.state_dir, r.id);
                if (a && (a->state == "ready" || blobs_.exists(a->blob))) {
                    if (a->state != "ready") {
                        a->state = "ready";
                        store_.put_archive(*a);
                    }
                    log_line(fmt::format("sandbox {}: its archive was complete: archived", r.id));
                    finish_archive(r);
                    continue;
                }
                if (a) {
                    blobs_.remove(a->blob);
                    store_.delete_archive(r.id);
                }
                const vm::Adoption adoption = r.vm_id.empty() ? vm::Adoption{} : vms_.adopt(r.vm_id);
                if (!r.vm_id.empty() && adoption.state == vm::Adoption::State::ready) {
                    if (adoption.status.value("state", "") == "paused") resume_vmm(r);
                    set_state(r, SandboxState::running);
                    release(work);
                    log_line(fmt::format("sandbox {}: an archive cut short: running again", r.id));
                } else if (snapshot::is_durable(work)) {
                    ArchiveRecord again{r.id, fmt::format("{}-{}.nva", r.id, store::now_ms()), "writing", r.image_digest, 0,
                                        0, store::now_ms()};
                    store_.put_archive(again);
                    pack_into(r, again, work);
                    finish_archive(r);
                    log_line(fmt::format("sandbox {}: an archive cut short, its VMM gone: packed from its snapshot", r.id));
                } else {
                    release(work);
                    set_state(r, SandboxState::error,
                              fmt::format("an archive was cut short and its VMM is gone: {}", vms_.end_reason(r.vm_id)));
                }
            } else if (st == SandboxState::unarchiving) {
                release_unarchive_dirs(r.id);
                r.vm_id.clear();
                set_state(r, SandboxState::archived, "an unarchive was cut short: archived still");
                log_line(fmt::format("sandbox {}: an unarchive cut short: archived still", r.id));
            } else if (st == SandboxState::archived) {
                if (!a || !blobs_.exists(a->blob))
                    set_state(r, SandboxState::error, "archived, but its archive is missing from " + blobs_.dir());
            } else if (a) {
                // Unarchived, cut short before its files were durable and its archive removed.
                const vm::Adoption adoption = r.vm_id.empty() ? vm::Adoption{} : vms_.adopt(r.vm_id);
                if (!r.vm_id.empty() && adoption.state == vm::Adoption::State::ready) {
                    settle_unarchived(r.id);  // the page cache kept what the unpack wrote
                    log_line(fmt::format("sandbox {}: an unarchive cut short: its files made durable, running", r.id));
                } else if (blobs_.exists(a->blob)) {
                    // A host crash (or its VMM died): the unpacked files may be torn; the
                    // archive is whole. The sweep after stops a VMM no record names.
                    if (!r.vm_id.empty()) {
                        if (adoption.state != vm::Adoption::State::dead && adoption.state != vm::Adoption::State::missing)
                            vms_.stop(r.vm_id);
                        release(vms_.paths(r.vm_id).dir);
                    }
                    release_unarchive_dirs(r.id);
                    r.vm_id.clear();
                    r.end_at_ms.reset();
                    set_state(r, SandboxState::archived,
                              "unarchived, but its VMM was gone before its files were durable: archived still");
                    log_line(fmt::format("sandbox {}: its VMM gone before its unarchived files were durable: archived "
                                         "still", r.id));
                } else {
                    // Its files were made durable and the blob removed: the record goes;
                    // the sandbox is settled as any other (adopted, or error without its VMM).
                    release_unarchive_dirs(r.id);
                    store_.delete_archive(r.id);
                }
            }
        } catch (const std::exception& e) {
            log_line(fmt::format("sandbox {}: settling its archive at start: {}", r.id, e.what()));
        }
    }
}

}  // namespace nanovm::daemon
