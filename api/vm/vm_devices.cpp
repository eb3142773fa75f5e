#include "api/vm/vm_devices.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>
#include <fmt/format.h>

#include "devices/virtio/blk/block_device.hpp"
#include "devices/virtio/blk/sparse_disk.hpp"
#include "devices/virtio/net/net_device.hpp"
#include "devices/virtio/net/tap.hpp"
#include "devices/virtio/rng/rng_device.hpp"
#include "devices/virtio/vsock/vsock_device.hpp"
#include "vmm/error.hpp"

namespace nanovm {

size_t virtio_device_count(const BootOptions& options) {
    return options.disks.size() + (options.scratch.empty() ? 0 : 1) + (options.net ? 1 : 0) + (options.vsock ? 1 : 0) +
           (options.rng ? 1 : 0);
}

std::string virtio_cmdline(const BootOptions& options) {
    return virtio::virtio_mmio_cmdline(static_cast<uint32_t>(virtio_device_count(options)));
}

void check_disk_paths(const BootOptions& options) {
    for (size_t i = 0; i < options.disks.size(); ++i) {
        const std::string& path = options.disks[i].path;
        const char* option = options.root_disk && i == 0 ? "--root" : "--disk";
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0) throw Error(fmt::format("{} {}: {}", option, path, ::strerror(errno)));
        if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
            throw Error(fmt::format("{} {}: not a regular file or block device", option, path));
    }
}

namespace {

// A serial the guest sees in /sys/block/vdX/serial: the file name, cut to 20 bytes.
std::string default_serial(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    if (name.size() > 20) name.resize(20);
    return name;
}

}  // namespace

VmDevices::VmDevices(const BootOptions& options, Machine& machine, MmioBus& mmio)
    : devices_(machine.vm(), machine.memory(), mmio, loop_) {
    const auto add_disk = [&](const std::string& option, virtio::blk::BlockOptions disk) {
        try {
            auto device = std::make_unique<virtio::blk::BlockDevice>(std::move(disk));
            disks_.push_back(device.get());
            devices_.add(std::move(device));
        } catch (const Error& e) {
            throw Error(fmt::format("{}: {}", option, e.what()));
        }
    };
    for (const DiskOption& disk : options.disks) {
        virtio::blk::BlockOptions blk{disk.path, disk.read_only,
                                      disk.serial.empty() ? default_serial(disk.path) : disk.serial};
        if (disk.block_size) blk.block_size = disk.block_size;
        if (disk.layer_file) blk.format = virtio::blk::DiskFormat::layer;
        add_disk("--disk", std::move(blk));
    }
    if (!options.scratch.empty()) {
        try {
            virtio::blk::create_sparse_disk(options.scratch);
        } catch (const Error& e) {
            throw Error(fmt::format("--scratch: {}", e.what()));
        }
        add_disk("--scratch", {options.scratch, false, "scratch"});
    }
    if (options.net) {
        try {
            virtio::net::Tap tap = virtio::net::open_tap(options.net->tap);
            std::optional<virtio::net::MacAddress> mac;
            if (options.net->mac) mac = virtio::net::MacAddress{*options.net->mac};
            auto net = std::make_unique<virtio::net::NetDevice>(std::move(tap.fd),
                                                                 virtio::net::NetDeviceOptions{tap.name, mac});
            net_ = net.get();
            devices_.add(std::move(net));
        } catch (const Error& e) {
            throw Error(fmt::format("--net: {}", e.what()));
        }
    }
    if (options.vsock) {
        try {
            virtio::vsock::VsockOptions vsock_options;
            vsock_options.guest_cid = options.vsock->cid;
            vsock_options.uds_path = options.vsock->path;
            auto vsock = std::make_unique<virtio::vsock::VsockDevice>(loop_, std::move(vsock_options));
            vsock_ = vsock.get();
            devices_.add(std::move(vsock));
        } catch (const Error& e) {
            throw Error(fmt::format("--vsock: {}", e.what()));
        }
    }
    if (options.rng) {
        auto rng = std::make_unique<virtio::RngDevice>();
        rng_ = rng.get();
        devices_.add(std::move(rng));
    }
    if (devices_.size() != virtio_device_count(options))
        throw Error(fmt::format("internal: {} virtio devices made, {} declared", devices_.size(),
                                virtio_device_count(options)));
}

VmDevices::~VmDevices() = default;

std::string VmDevices::stats_json() const {
    nlohmann::json out;
    out["disks"] = nlohmann::json::array();
    for (const virtio::blk::BlockDevice* disk : disks_) {
        const virtio::blk::BlockCounters c = disk->counters();
        out["disks"].push_back({{"path", disk->options().path},
                                {"read_only", disk->options().read_only},
                                {"capacity_bytes", disk->capacity_sectors() * 512},
                                {"reads", c.reads},
                                {"writes", c.writes},
                                {"flushes", c.flushes},
                                {"discards", c.discards},
                                {"write_zeroes", c.write_zeroes},
                                {"bytes_read", c.bytes_read},
                                {"bytes_written", c.bytes_written},
                                {"io_errors", c.io_errors}});
    }
    if (net_) {
        const virtio::net::NetState s = static_cast<const virtio::net::NetDevice*>(net_)->save_state();
        out["net"] = {{"mac", s.mac.to_string()}, {"rx_frames", s.rx_frames}, {"rx_bytes", s.rx_bytes},
                      {"rx_dropped", s.rx_dropped}, {"tx_frames", s.tx_frames}, {"tx_bytes", s.tx_bytes},
                      {"tx_dropped", s.tx_dropped}};
    }
    if (rng_) {
        const virtio::RngState s = static_cast<const virtio::RngDevice*>(rng_)->save_state();
        out["rng"] = {{"requests", s.requests}, {"bytes", s.bytes}};
    }
    return out.dump();
}

}  // namespace nanovm
