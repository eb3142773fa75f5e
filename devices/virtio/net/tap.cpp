#include "devices/virtio/net/tap.hpp"

#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <sys/ioctl.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "devices/virtio/net/net_spec.hpp"
#include "vmm/error.hpp"

namespace nanovm::virtio::net {

namespace {

[[noreturn]] void fail(std::string_view name, std::string_view op, int err, std::string_view advice) {
    throw Error(fmt::format("tap {}: {}: {}{}{}", name, op, ::strerror(err), advice.empty() ? "" : "; ", advice));
}

}  // namespace

Tap open_tap(std::string_view name, const char* tun_path) {
    if (name.empty() || name.size() >= IFNAMSIZ || name.find_first_of("/: \t\n") != std::string_view::npos)
        throw Error(fmt::format("tap '{}': not a valid interface name (1 to {} characters, no '/', ':' or blanks)",
                                name, IFNAMSIZ - 1));

    Fd fd(::open(tun_path, O_RDWR | O_NONBLOCK | O_CLOEXEC));
    if (!fd) {
        const int err = errno;
        if (err == ENOENT || err == ENODEV || err == ENXIO)
            fail(name, fmt::format("open {}", tun_path), err, "load the tun module (modprobe tun)");
        if (err == EACCES || err == EPERM)
            fail(name, fmt::format("open {}", tun_path), err,
                 "the VMM needs read-write access to it (root, or a group that owns it)");
        fail(name, fmt::format("open {}", tun_path), err, "");
    }

    ifreq ifr{};
    std::memcpy(ifr.ifr_name, name.data(), name.size());
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    if (::ioctl(fd.get(), TUNSETIFF, &ifr) != 0) {
        const int err = errno;
        switch (err) {
            case EPERM:
            case EACCES:
                fail(name, "TUNSETIFF", err,
                     fmt::format("creating a tap needs CAP_NET_ADMIN; or create it beforehand for the VMM's user "
                                 "(ip tuntap add {} mode tap user <user>)",
                                 name));
            case EBUSY:
                fail(name, "TUNSETIFF", err, "another process has it open (a single-queue tap takes one)");
            case EINVAL:
                fail(name, "TUNSETIFF", err, "the interface exists but is not a single-queue tap");
            default: fail(name, "TUNSETIFF", err, "");
        }
    }
    int header_bytes = sizeof(VirtioNetHdr);
    if (::ioctl(fd.get(), TUNSETVNETHDRSZ, &header_bytes) != 0) fail(name, "TUNSETVNETHDRSZ", errno, "");
    if (::ioctl(fd.get(), TUNSETOFFLOAD, 0u) != 0) fail(name, "TUNSETOFFLOAD", errno, "");
    return Tap{std::move(fd), std::string(ifr.ifr_name, ::strnlen(ifr.ifr_name, IFNAMSIZ))};
}

}  // namespace nanovm::virtio::net
