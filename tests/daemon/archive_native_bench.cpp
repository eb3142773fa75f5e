// A native benchmark of pack_snapshot and unpack_archive (no KVM, no guest): a
// snapshot directory shaped like tools/bench/archive_bench.py's sandbox (256 MiB of
// guest RAM, most of it random bytes as a page cache full of /dev/urandom output,
// and a writable disk layer holding 256 MiB of random bytes over a sparse raw base)
// packed with one zstd worker at level 3 (the daemon's settings on a 1-vCPU host),
// then unpacked; prints the wall time of each and the pack's MB/s.
//
//   archive_native_bench [DIR] [RANDOM_RAM_MIB] [DISK_MIB] [WORKERS]
//
// DIR (default: a fresh directory under /tmp) is removed after. Not a test: timings
// depend on the machine; run by hand (tools/bench or a profiler around it).
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/daemon/archive/blob_store.hpp"
#include "api/daemon/archive/sandbox_archive.hpp"
#include "devices/virtio/blk/layered_disk.hpp"
#include "snapshot/manifest.hpp"
#include "snapshot/memory_layer.hpp"
#include "snapshot/state_file.hpp"
#include "snapshot/vm_state.hpp"
#include "tests/support/chained_snapshot.hpp"
#include "vmm/fd.hpp"

namespace {

using namespace nanovm;
using nlohmann::json;
namespace fs = std::filesystem;

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void fill_random(std::vector<uint8_t>& buf, std::mt19937_64& rng) {
    for (size_t i = 0; i + 8 <= buf.size(); i += 8) {
        const uint64_t v = rng();
        std::memcpy(buf.data() + i, &v, 8);
    }
}

std::string devices_json(const std::string& image) {
    const json config{{"cpus", 1},
                      {"memory_mib", 256},
                      {"image", image},
                      {"user_disks", json::array()},
                      {"disk_options",
                       {{{"path", image}, {"read_only", true}, {"serial", "nanovm-root"}, {"block_size", 512}},
                        {{"path", "/old/vm/disk.ext4"}, {"read_only", false}, {"serial", "nanovm-upper"}, {"block_size", 4096}}}}};
    return json{{"version", 1},
                {"config", config},
                {"disks", {{{"frozen", nullptr}}, {{"frozen", "d-1.layer"}, {"frozen_kind", "layer"}}}},
                {"devices", {{"version", 1}, {"virtio", json::array()}}},
                {"serial", json::object()}}
        .dump();
}

}  // namespace

int main(int argc, char** argv) {
    const std::string root = argc > 1 ? argv[1] : fmt::format("/tmp/archive-bench-{}", ::getpid());
    const uint64_t ram_random_mib = argc > 2 ? std::stoull(argv[2]) : 240;
    const uint64_t disk_mib = argc > 3 ? std::stoull(argv[3]) : 256;
    const int workers = argc > 4 ? std::stoi(argv[4]) : 1;
    constexpr uint64_t kRam = 256u << 20;
    constexpr uint64_t kMiB = 1u << 20;
    try {
        fs::remove_all(root);
        const std::string base = root + "/base", snap = root + "/snap", out = root + "/out";
        fs::create_directories(base);
        fs::create_directories(snap);
        std::mt19937_64 rng(42);
        std::vector<uint8_t> chunk(kMiB);
        // RAM: random MiBs, then a few small (kernel-like: compressible) ones, zeros after.
        {
            snapshot::LayerBuilder b(snap + "/memory.layer", kRam, std::nullopt, true);
            for (uint64_t m = 0; m < ram_random_mib; ++m) {
                fill_random(chunk, rng);
                b.put(m * 256, 256, chunk.data());
            }
            for (uint64_t m = ram_random_mib; m < std::min<uint64_t>(ram_random_mib + 8, 256); ++m) {
                for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<uint8_t>(rng() % 7);
                b.put(m * 256, 256, chunk.data());
            }
            b.finish();
        }
        // Disk: a sparse 1 GiB raw base, a layer over it with disk_mib of random bytes.
        {
            Fd raw(::open((base + "/base.raw").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
            if (!raw || ::ftruncate(raw.get(), static_cast<off_t>(test::kChainDiskBytes)) != 0) throw_errno("base.raw");
        }
        virtio::blk::LayeredDisk::create_top(snap + "/d-1.layer", base + "/base.raw", virtio::blk::ParentKind::raw);
        {
            auto disk = virtio::blk::LayeredDisk::open(snap + "/d-1.layer", true);
            for (uint64_t m = 0; m < disk_mib; ++m) {
                fill_random(chunk, rng);
                snapshot::pwrite_all(disk.top_fd(), chunk.data(), kMiB, disk.top_data_offset() + (64 + m) * kMiB, "d-1.layer");
                disk.mark_present((64 + m) * kMiB, kMiB);
            }
            disk.freeze(snap + "/d-2.layer");
        }
        snapshot::write_file_atomic(
            snap + "/vm.state",
            snapshot::encode_vm_state(test::one_vcpu_state(kRam, devices_json("/cache/rootfs/disk.ext4"))));
        snapshot::write_manifest(snap, {"vm.state", "memory.layer", "d-1.layer"}, true);
        ::sync();

        daemon::archive::DirBlobStore store(root + "/archives");
        auto t0 = std::chrono::steady_clock::now();
        daemon::archive::PackStats stats;
        {
            auto w = store.put("sb.nva");
            stats = daemon::archive::pack_snapshot(snap, json{{"sandbox_id", "sb"}}, *w, nullptr,
                                                   daemon::archive::ZstdOptions{3, workers});
            w->commit();
        }
        const double pack_ms = ms_since(t0);
        ::sync();
        // DEFERRED=1: the daemon's unarchive (Durability::deferred), then make_durable timed apart.
        const bool deferred = std::getenv("DEFERRED") != nullptr;
        t0 = std::chrono::steady_clock::now();
        daemon::archive::UnpackStats us;
        {
            auto r = store.get("sb.nva");
            daemon::archive::unpack_archive(*r, out, "/state/images/abc", nullptr, "sb.nva", &us,
                                            deferred ? daemon::archive::Durability::deferred
                                                     : daemon::archive::Durability::durable);
        }
        const double unpack_ms = ms_since(t0);
        std::printf("unpack (%s) %.0f ms: read+decompress %.0f, RAM pages %.0f, disk runs %.0f, syncs %.0f (layer %.0f, "
                    "disks %.0f, manifest %.0f)\n",
                    deferred ? "deferred" : "durable", us.ms, us.read_ms, us.ram_ms, us.disk_ms, us.sync_ms,
                    us.layer_ms, us.disk_sync_ms, us.manifest_ms);
        if (deferred) std::printf("then make_durable %.0f ms\n", daemon::archive::make_durable(out));
        std::printf("packed %llu MiB into %llu MiB with %d worker(s): pack+commit %.0f ms (pack %.0f ms, %.1f MB/s); "
                    "unpack %.0f ms; unpack %.2fx faster\n",
                    static_cast<unsigned long long>(stats.raw_bytes >> 20),
                    static_cast<unsigned long long>(stats.compressed_bytes >> 20), stats.workers, pack_ms, stats.ms,
                    static_cast<double>(stats.raw_bytes) / 1e3 / stats.ms, unpack_ms, pack_ms / unpack_ms);
        if (!std::getenv("KEEP")) fs::remove_all(root);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "archive_native_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
