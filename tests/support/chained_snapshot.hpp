// A snapshot directory whose memory and disk chains reach into another directory,
// written over real files for the tests that pack, export or import such chains
// (tests/daemon/archive_test.cpp, snapshot_export_test.cpp). One definition, as
// temp_dir.hpp: the two tests built the same chain line by line.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "devices/virtio/blk/layered_disk.hpp"
#include "snapshot/manifest.hpp"
#include "snapshot/memory_layer.hpp"
#include "snapshot/state_file.hpp"
#include "snapshot/vm_state.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"

namespace nanovm::test {

/// One 4 KiB page of `fill` bytes.
inline std::vector<uint8_t> filled_page(uint8_t fill) { return std::vector<uint8_t>(4096, fill); }

/// A 1-vCPU machine's state for the chain's vm.state: `ram_bytes` of RAM, no
/// irqchip, one runnable vCPU (rip 0x1234, a 4 KiB xsave area of 1s), `devices` the
/// devices section (JSON text, as api/vm/vmm_process.cpp writes it).
inline snapshot::VmState one_vcpu_state(uint64_t ram_bytes, const std::string& devices) {
    snapshot::VmState s;
    s.machine = {1, 0, ram_bytes};
    snapshot::VcpuState v;
    v.regs.rip = 0x1234;
    v.xsave.assign(4096, 1);
    v.mp_state.mp_state = KVM_MP_STATE_RUNNABLE;
    s.vcpus.push_back(v);
    s.devices = devices;
    return s;
}

/// Size of the chain's sparse raw disk base: 1 GiB.
inline constexpr uint64_t kChainDiskBytes = uint64_t{1} << 30;

/// Writes snapshot `s2` (both directories made) whose chains start in `s1`:
///   memory: a base layer s1/memory.layer (pages 0 = 0x10, 1 = 0x11, 500 = 0x50 of
///           `ram_bytes`) and a diff s2/memory.layer over it (page 1 = 0x21, 700 =
///           0x70); with `zero_page_3`, page 3 is 0x33 in the base and written as
///           zeros in the diff;
///   disk:   a raw base s1/base.raw (kChainDiskBytes, sparse; blocks 0 = 0xb0 and
///           5 = 0xb5, 4 KiB blocks), a frozen layer s2/d-1.layer over it (block 5 =
///           0xc5, 9 = 0xc9) and a new top s2/d-2.layer;
///   s2/vm.state = `vm_state` (encoded by the caller), then a manifest naming
///           vm.state, memory.layer and d-1.layer with s1's base layer as its chain.
/// Throws what LayerBuilder, LayeredDisk and write_manifest throw; SysError (open,
/// ftruncate, pwrite).
inline void write_chained_snapshot(const std::string& s1, const std::string& s2, uint64_t ram_bytes,
                                   const std::vector<uint8_t>& vm_state, bool zero_page_3 = false) {
    namespace fs = std::filesystem;
    fs::create_directories(s1);
    fs::create_directories(s2);
    const std::string base_ref = "../" + fs::path(s1).filename().string() + "/memory.layer";
    snapshot::LayerWriteResult base;
    {
        snapshot::LayerBuilder b(s1 + "/memory.layer", ram_bytes, std::nullopt, true);
        b.put(0, 1, filled_page(0x10).data());
        b.put(1, 1, filled_page(0x11).data());
        b.put(500, 1, filled_page(0x50).data());
        if (zero_page_3) b.put(3, 1, filled_page(0x33).data());
        base = b.finish();
    }
    {
        snapshot::LayerBuilder d(s2 + "/memory.layer", ram_bytes, snapshot::ParentRef{base_ref, base.checksum}, false);
        d.put(1, 1, filled_page(0x21).data());
        d.put(700, 1, filled_page(0x70).data());
        if (zero_page_3) d.put(3, 1, filled_page(0).data());
        d.finish();
    }
    {
        Fd raw(::open((s1 + "/base.raw").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
        if (!raw) throw_errno("open " + s1 + "/base.raw");
        if (::ftruncate(raw.get(), static_cast<off_t>(kChainDiskBytes)) != 0) throw_errno("ftruncate base.raw");
        snapshot::pwrite_all(raw.get(), filled_page(0xb0).data(), 4096, 0, "base.raw");
        snapshot::pwrite_all(raw.get(), filled_page(0xb5).data(), 4096, 5 * 4096, "base.raw");
    }
    virtio::blk::LayeredDisk::create_top(s2 + "/d-1.layer", s1 + "/base.raw", virtio::blk::ParentKind::raw);
    {
        auto disk = virtio::blk::LayeredDisk::open(s2 + "/d-1.layer", true);
        for (auto [block, fill] : {std::pair<uint64_t, uint8_t>{5, 0xc5}, {9, 0xc9}}) {
            snapshot::pwrite_all(disk.top_fd(), filled_page(fill).data(), 4096, disk.top_data_offset() + block * 4096,
                                 "d-1.layer");
            disk.mark_present(block * 4096, 4096);
        }
        disk.freeze(s2 + "/d-2.layer");
    }
    snapshot::write_file_atomic(s2 + "/vm.state", vm_state);
    const uint32_t base_crc = snapshot::LayerFile::open(s1 + "/memory.layer").checksum();
    snapshot::write_manifest(s2, {"vm.state", "memory.layer", "d-1.layer"}, true, {{base_ref, base_crc}});
}

}  // namespace nanovm::test
