// The guest's network identity: hostname and interfaces (loopback for now; eth0
// arrives with virtio-net).
#pragma once

#include <string_view>

namespace nanovm::guest_init {

/// The guest's hostname.
inline constexpr std::string_view kHostname = "nanovm";

/// sethostname(kHostname). Reports an error line and returns false on failure.
bool set_hostname();

/// Sets IFF_UP on "lo" (SIOCGIFFLAGS/SIOCSIFFLAGS); the kernel then gives it
/// 127.0.0.1/8 and ::1. Reports an error line and returns false on failure.
bool bring_up_loopback();

}  // namespace nanovm::guest_init
