// Opening the host side of a VM's network interface: a Linux tap device
// (Documentation/networking/tuntap.rst) set up to carry virtio-net frames as they are,
// each preceded by the 12-byte virtio_net_hdr (devices/virtio/net/net_spec.hpp).
#pragma once

#include <string>
#include <string_view>

#include "vmm/fd.hpp"

namespace nanovm::virtio::net {

/// An open tap: a nonblocking, close-on-exec fd on which each read(2) returns and each
/// write(2) takes one frame preceded by a 12-byte virtio_net_hdr.
struct Tap {
    Fd fd;
    std::string name;  ///< the interface's name as the kernel has it
};

/// Attaches to the tap interface `name`, or creates it (it then vanishes when the fd
/// is closed) if it does not exist and the caller has CAP_NET_ADMIN. The fd is set
/// up with IFF_TAP | IFF_NO_PI | IFF_VNET_HDR, TUNSETVNETHDRSZ 12 and no offloads
/// (TUNSETOFFLOAD 0: the kernel hands over only whole frames with complete
/// checksums, so every header it writes is zero). `tun_path` is the clone device
/// (a parameter for tests). Throws Error with the cause and what to do: the tun
/// module is not loaded, permission denied (EPERM/EACCES), the tap is already in use
/// (EBUSY), `name` is a tun or multi-queue device (EINVAL), bad name.
Tap open_tap(std::string_view name, const char* tun_path = "/dev/net/tun");

}  // namespace nanovm::virtio::net
