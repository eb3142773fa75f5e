#include "snapshot/snapshot_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "snapshot/manifest.hpp"
#include "snapshot/state_file.hpp"
#include "snapshot/test_stall.hpp"
#include "snapshot/wp_copy.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"
#include "vmm/log.hpp"

namespace nanovm::snapshot {

namespace {

using Clock = std::chrono::steady_clock;

// Makes `dir`'s entry in its parent durable.
void make_durable_dir(const std::string& dir) {
    std::string parent = std::filesystem::absolute(dir).lexically_normal().parent_path().string();
    if (parent.empty()) parent = "/";
    Fd fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) throw_errno("open " + parent);
    if (::fsync(fd.get()) != 0) throw_errno("fsync " + parent);
}

void fsync_dir(const std::string& dir) {
    Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) throw_errno("open " + dir);
    if (::fsync(fd.get()) != 0) throw_errno("fsync " + dir);
}

}  // namespace

std::vector<ChainLayer> chain_lines(const std::string& dir, const LayerChain& chain, size_t first) {
    const std::filesystem::path base = std::filesystem::absolute(dir);
    std::vector<ChainLayer> out;
    for (size_t i = first; i < chain.layers().size(); ++i) {
        const LayerFile& layer = chain.layers()[i];
        out.push_back({std::filesystem::relative(std::filesystem::absolute(layer.path()), base).string(),
                       layer.checksum()});
    }
    return out;
}

PendingSnapshot::PendingSnapshot(const std::string& dir, GuestMemory& memory, SnapshotContent content, CopyMode mode)
    : dir_(dir), memory_(memory), content_(std::move(content)), start_(Clock::now()) {
    // Inside the pause: only what must see the memory as it is now. Nothing here
    // waits for the disk; the fsyncs are in write_rest().
    std::filesystem::create_directories(dir_);
    const std::string manifest = snapshot_part(dir_, kManifestFileName);
    if (::unlink(manifest.c_str()) != 0 && errno != ENOENT) throw_errno("unlink " + manifest);
    builder_ = std::make_unique<LayerBuilder>(snapshot_part(dir_, kLayerFileName) + ".tmp", memory_.ram_bytes(),
                                              content_.parent, content_.drop_zero_pages);
    if (!content_.sync) builder_->skip_sync();
    if (content_.frozen) {
        // Nothing to protect: nobody writes the frozen memfds any more.
        stats_.frozen = true;
    } else if (mode != CopyMode::in_pause) {
        std::string reason = WriteProtectCopy::unsupported_reason(memory_, content_.uffd);
        if (reason.empty()) {
            const auto t = Clock::now();
            try {
                copy_ = std::make_unique<WriteProtectCopy>(memory_, content_.pages, *builder_, content_.uffd);
            } catch (const Error& e) {
                reason = e.what();
            }
            stats_.arm_ms = ms_since(t);
        }
        if (!reason.empty()) {
            stats_.fallback = reason;
            log_line("snapshot: copying guest memory inside the pause: " + reason);
        }
    }
    if (copy_ || content_.frozen) {
        stats_.background = true;
        writer_ = std::thread([this] {
            try {
                write_rest();
            } catch (...) {
                error_ = std::current_exception();
            }
        });
        return;
    }
    write_rest();
}

void PendingSnapshot::write_rest() {
    // The old manifest's removal is on disk before any part changes, so a crash
    // leaves either the old complete snapshot or a directory without a manifest.
    const bool sync = content_.sync;
    if (sync) {
        make_durable_dir(dir_);
        fsync_dir(dir_);
    }
    auto t = Clock::now();
    write_file_atomic(snapshot_part(dir_, kStateFileName), content_.state, sync);
    stats_.state_write_ms = ms_since(t);
    test_stall_point("state");
    t = Clock::now();
    if (content_.frozen) {
        write_frozen_ram(*content_.frozen, *builder_);
        content_.frozen.reset();
    } else if (copy_) {
        copy_->copy_all();
        stats_.wp_faults = copy_->faults();
        copy_.reset();
    } else {
        put_pages(*builder_, memory_, content_.pages);
    }
    if (content_.fill_from) put_chain_rest(*builder_, *content_.fill_from);
    const LayerWriteResult r = builder_->finish();
    builder_.reset();
    const std::string layer = snapshot_part(dir_, kLayerFileName);
    if (::rename((layer + ".tmp").c_str(), layer.c_str()) != 0) throw_errno("rename " + layer + ".tmp");
    if (sync) fsync_dir(dir_);
    stats_.memory_ms = ms_since(t);
    stats_.present_pages = r.present_pages;
    stats_.data_pages = r.data_pages;
    stats_.layer_checksum = r.checksum;
    test_stall_point("layer");
    std::vector<std::string> parts{kStateFileName, kLayerFileName};
    if (content_.extra_parts) {
        t = Clock::now();
        for (std::string& name : content_.extra_parts(dir_)) parts.push_back(std::move(name));
        if (sync) fsync_dir(dir_);
        stats_.extra_ms = ms_since(t);
    }
    std::vector<ChainLayer> chain;
    if (content_.parent) chain = chain_lines(dir_, LayerChain::open(layer), 1);
    write_manifest(dir_, parts, sync, chain);
    stats_.durable_ms = ms_since(start_);
    durable_.store(true, std::memory_order_release);
}

const SnapshotStats& PendingSnapshot::wait_durable() {
    if (writer_.joinable()) writer_.join();
    waited_ = true;
    if (error_) std::rethrow_exception(error_);
    return stats_;
}

PendingSnapshot::~PendingSnapshot() {
    if (writer_.joinable()) writer_.join();
    if (error_ && !waited_) {
        try {
            std::rethrow_exception(error_);
        } catch (const std::exception& e) {
            log_line("snapshot " + dir_ + " failed in the background: " + e.what());
        }
    }
}

}  // namespace nanovm::snapshot
