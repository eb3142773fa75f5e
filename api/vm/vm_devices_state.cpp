// Saving and loading the device state of a VM built by VmDevices (see
// vm_devices.hpp): the JSON that goes into vm.state's "devices" section.
//
// Layout (version 1):
//   {"version": 1,
//    "virtio": [{"kind": "blk"|"net"|"vsock"|"rng",
//                "transport": {status, device_features_sel, driver_features_sel,
//                              driver_features, queue_sel, interrupt_status,
//                              config_generation},
//                "queues": [{size, ready, desc_table, avail_ring, used_ring,
//                            next_avail, next_used, event_idx, indirect,
//                            signalled_used, signalled_used_valid}, ...],
//                "device": {...the device's own state struct...}}, ...]}
// in the order the devices sit on the bus. Everything read back is untrusted: a
// wrong type, a missing key or a value out of range is an Error naming the device.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "api/vm/vm_devices.hpp"
#include "devices/virtio/blk/block_device.hpp"
#include "devices/virtio/net/net_device.hpp"
#include "devices/virtio/rng/rng_device.hpp"
#include "devices/virtio/vsock/vsock_device.hpp"
#include "vmm/error.hpp"

// JSON forms of the plain state structs (nlohmann's macros: every field by its own
// name; a missing key or a wrong type throws json::exception).
namespace nanovm::virtio {
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(MmioTransportState, status, device_features_sel, driver_features_sel,
                                   driver_features, queue_sel, interrupt_status, config_generation)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(QueueState, size, ready, desc_table, avail_ring, used_ring, next_avail, next_used,
                                   event_idx, indirect, signalled_used, signalled_used_valid)
}  // namespace nanovm::virtio

namespace nanovm {

namespace {

using nlohmann::json;

constexpr int kDevicesStateVersion = 1;

const char* kind_of(uint32_t device_id) {
    switch (device_id) {
        case virtio::device_id::kBlock: return "blk";
        case virtio::device_id::kNet: return "net";
        case virtio::device_id::kVsock: return "vsock";
        case virtio::device_id::kRng: return "rng";
    }
    return "unknown";
}

json device_json(virtio::VirtioDevice& device) {
    if (auto* blk = dynamic_cast<virtio::blk::BlockDevice*>(&device)) {
        const virtio::blk::BlockState s = blk->save_state();
        const virtio::blk::BlockCounters& c = s.counters;
        return json{{"capacity_sectors", s.capacity_sectors},
                    {"read_only", s.read_only},
                    {"counters",
                     {c.reads, c.writes, c.flushes, c.discards, c.write_zeroes, c.get_ids, c.bytes_read,
                      c.bytes_written, c.io_errors, c.unsupported, c.dropped_at_reset}}};
    }
    if (auto* vsock = dynamic_cast<virtio::vsock::VsockDevice*>(&device)) {
        const virtio::vsock::VsockState s = vsock->save_state();
        return json{{"guest_cid", s.guest_cid},
                    {"next_local_port", s.next_local_port},
                    {"transport_reset_pending", s.transport_reset_pending}};
    }
    if (auto* rng = dynamic_cast<virtio::RngDevice*>(&device)) {
        const virtio::RngState s = rng->save_state();
        return json{{"requests", s.requests}, {"bytes", s.bytes}};
    }
    if (auto* net = dynamic_cast<virtio::net::NetDevice*>(&device)) {
        const virtio::net::NetState s = net->save_state();
        return json{{"mac", s.mac.to_string()},
                    {"counters", {s.rx_frames, s.rx_bytes, s.rx_dropped, s.tx_frames, s.tx_bytes, s.tx_dropped}}};
    }
    throw Error(fmt::format("{}: no snapshot support", device.name()));
}

// Loads `j` (the "device" object) into `device`; the vsock device is reset afterwards by the caller.
void load_device(virtio::VirtioDevice& device, const json& j) {
    if (auto* blk = dynamic_cast<virtio::blk::BlockDevice*>(&device)) {
        virtio::blk::BlockState s;
        j.at("capacity_sectors").get_to(s.capacity_sectors);
        j.at("read_only").get_to(s.read_only);
        const std::vector<uint64_t> c = j.at("counters").get<std::vector<uint64_t>>();
        if (c.size() != 11) throw Error("counters: 11 numbers expected");
        s.counters = {c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10]};
        blk->load_state(s);
        return;
    }
    if (auto* vsock = dynamic_cast<virtio::vsock::VsockDevice*>(&device)) {
        virtio::vsock::VsockState s;
        j.at("guest_cid").get_to(s.guest_cid);
        j.at("next_local_port").get_to(s.next_local_port);
        j.at("transport_reset_pending").get_to(s.transport_reset_pending);
        vsock->load_state(s);
        return;
    }
    if (auto* rng = dynamic_cast<virtio::RngDevice*>(&device)) {
        virtio::RngState s;
        j.at("requests").get_to(s.requests);
        j.at("bytes").get_to(s.bytes);
        rng->load_state(s);
        return;
    }
    if (auto* net = dynamic_cast<virtio::net::NetDevice*>(&device)) {
        virtio::net::NetState s;
        s.mac = virtio::net::MacAddress::parse(j.at("mac").get<std::string>());
        const std::vector<uint64_t> c = j.at("counters").get<std::vector<uint64_t>>();
        if (c.size() != 6) throw Error("counters: 6 numbers expected");
        s.rx_frames = c[0];
        s.rx_bytes = c[1];
        s.rx_dropped = c[2];
        s.tx_frames = c[3];
        s.tx_bytes = c[4];
        s.tx_dropped = c[5];
        net->load_state(s);
        return;
    }
    throw Error(fmt::format("{}: no snapshot support", device.name()));
}

}  // namespace

void VmDevices::run_quiesced(const std::function<void()>& work) {
    loop_.run_sync([&] {
        for (virtio::blk::BlockDevice* disk : disks_) disk->drain();
        work();
    });
}

nlohmann::json VmDevices::save_state() {
    json virtio_devices = json::array();
    for (size_t i = 0; i < devices_.size(); ++i) {
        virtio::MmioTransport& t = devices_.transport(i);
        json queues = json::array();
        for (const virtio::QueueState& q : t.queue_states()) queues.push_back(q);
        virtio_devices.push_back(json{{"kind", kind_of(t.device().device_id())},
                                      {"transport", t.state()},
                                      {"queues", std::move(queues)},
                                      {"device", device_json(t.device())}});
    }
    return json{{"version", kDevicesStateVersion}, {"virtio", std::move(virtio_devices)}};
}

void VmDevices::load_state(const nlohmann::json& state) {
    try {
        const int version = state.at("version").get<int>();
        if (version > kDevicesStateVersion)
            throw Error(fmt::format("device state version {} is newer than this nanovm reads ({})", version,
                                    kDevicesStateVersion));
        const json& list = state.at("virtio");
        if (!list.is_array() || list.size() != devices_.size())
            throw Error(fmt::format("{} virtio devices saved, this VM has {}", list.is_array() ? list.size() : 0,
                                    devices_.size()));
        for (size_t i = 0; i < devices_.size(); ++i) {
            virtio::MmioTransport& t = devices_.transport(i);
            const json& saved = list[i];
            const std::string kind = saved.at("kind").get<std::string>();
            if (kind != kind_of(t.device().device_id()))
                throw Error(fmt::format("device {}: saved as {}, this VM has {}", i, kind, t.device().name()));
            try {
                load_device(t.device(), saved.at("device"));
                t.load_state(saved.at("transport").get<virtio::MmioTransportState>(),
                             saved.at("queues").get<std::vector<virtio::QueueState>>());
            } catch (const json::exception& e) {
                throw Error(fmt::format("{}: {}", t.device().name(), e.what()));
            } catch (const Error& e) {
                throw Error(fmt::format("{}: {}", t.device().name(), e.what()));
            }
        }
    } catch (const json::exception& e) {
        throw Error(fmt::format("device state: {}", e.what()));
    }
    // Connections of the old VMM's host sockets are gone: the guest must drop its
    // streams (virtio 1.2 §5.10.6.7); listeners survive.
    if (vsock_) static_cast<virtio::vsock::VsockDevice*>(vsock_)->send_transport_reset();
}

}  // namespace nanovm
