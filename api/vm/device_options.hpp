// The device options of the CLI (`--disk`, `--scratch`, `--net`, `--vsock`) parsed
// from their "VALUE[,key=value...]" spelling into plain structs. Parsing only: the
// files, taps and sockets are opened when the VM is built (api/vm/vm_devices.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nanovm {

/// `--disk PATH[,ro][,serial=ID]`: a raw image as a virtio-blk disk.
struct DiskOption {
    std::string path;
    bool read_only = false;
    std::string serial;  ///< VIRTIO_BLK_T_GET_ID answer (<= 20 bytes); empty: derived from the path
    uint32_t block_size = 0;  ///< logical block size offered (VIRTIO_BLK_F_BLK_SIZE), bytes; 0: the device's default
    /// The file is a nanovm disk layer (devices/virtio/blk/disk_layer.hpp), not a raw
    /// image. Never guessed from its contents: a guest can write anything into a raw one.
    bool layer_file = false;

    bool operator==(const DiskOption&) const = default;
};

/// `--net TAP[,mac=XX:XX:XX:XX:XX:XX]`: virtio-net on the tap device named TAP.
struct NetOption {
    std::string tap;
    std::optional<std::array<uint8_t, 6>> mac;  ///< none: a random locally administered MAC
};

/// `--vsock PATH[,cid=N]`: virtio-vsock whose host side is the Unix socket PATH
/// (guest connections to host port P reach PATH_P).
struct VsockOption {
    std::string path;
    uint32_t cid = 3;  ///< guest CID, >= 3 (0-2 are reserved, virtio 1.2 §5.10.4)
};

/// Each parser throws Error("--disk a,b: unknown key 'b'")-style messages naming the
/// option and the bad part.
DiskOption parse_disk_option(const std::string& text);
NetOption parse_net_option(const std::string& text);
VsockOption parse_vsock_option(const std::string& text);
/// "52:54:00:12:34:56" -> bytes. Throws Error for anything else.
std::array<uint8_t, 6> parse_mac(const std::string& text);

}  // namespace nanovm
