// Hostname and loopback (see net.hpp).
#include "guest-init/net.hpp"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "guest-init/console.hpp"
#include "vmm/fd.hpp"

namespace nanovm::guest_init {

bool set_hostname() {
    if (::sethostname(kHostname.data(), kHostname.size()) != 0) {
        log_errno("sethostname", errno);
        return false;
    }
    return true;
}

bool bring_up_loopback() {
    Fd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!sock) {
        log_errno("socket(AF_INET) for lo", errno);
        return false;
    }
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    if (::ioctl(sock.get(), SIOCGIFFLAGS, &ifr) != 0) {
        log_errno("SIOCGIFFLAGS lo", errno);
        return false;
    }
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    if (::ioctl(sock.get(), SIOCSIFFLAGS, &ifr) != 0) {
        log_errno("SIOCSIFFLAGS lo", errno);
        return false;
    }
    return true;
}

}  // namespace nanovm::guest_init
