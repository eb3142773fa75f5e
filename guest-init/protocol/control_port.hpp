// The nanovm control port: how the guest tells the VMM what its next reset means.
//
// Without ACPI, a Linux guest's poweroff, reboot and panic all reach the VMM as a
// machine reset (i8042 command 0xFE with reboot=k, or a triple fault with reboot=t;
// panic=-1 resets at once). To tell them apart, guest-init writes ONE byte to I/O
// port control_port::kPort (0x5f0) just before it resets the machine:
//
//     outb(control_port::kPoweroff, control_port::kPort);   // 1: "poweroff follows"
//     outb(control_port::kReboot,   control_port::kPort);   // 2: "reboot follows"
//
// A reset with no announcement before it is a crash. The last value written wins;
// kClear (0) withdraws an announcement; other values are ignored. Reading the port
// returns kSignature ('N'), so a guest can check that it runs under nanovm (an
// unclaimed port reads 0xff).
//
// A guest/host protocol like the agent's (the other headers of guest-init/protocol/):
// guest-init (power.cpp) writes the port, the VMM's legacy device
// (devices/legacy/control_port.hpp) reads it. Keep it dependency-free (constexpr
// values only).
#pragma once

namespace nanovm::control_port {

inline constexpr unsigned short kPort = 0x5f0;       ///< 1-byte I/O port
inline constexpr unsigned char kClear = 0;           ///< withdraw an announcement
inline constexpr unsigned char kPoweroff = 1;        ///< the next reset is a poweroff
inline constexpr unsigned char kReboot = 2;          ///< the next reset is a reboot
inline constexpr unsigned char kSignature = 0x4e;    ///< 'N': what reads return

}  // namespace nanovm::control_port
