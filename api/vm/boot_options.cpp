// The kernel command line of a Linux VM (see boot_options.hpp).
#include "api/vm/boot_options.hpp"

#include <string_view>

#include <fmt/format.h>

#include "api/vm/vm_devices.hpp"

namespace nanovm {

std::string boot_cmdline(const BootOptions& options) {
    std::string cmdline = options.cmdline ? *options.cmdline : kDefaultCmdline;
    const auto add = [&cmdline](std::string_view part) {
        if (part.empty()) return;
        if (!cmdline.empty()) cmdline += ' ';
        cmdline += part;
    };
    if (options.root_disk && !options.disks.empty())
        add(fmt::format("root=/dev/vda rootfstype=ext4 {} init={}", options.disks.front().read_only ? "ro" : "rw",
                        kRootInit));
    add(virtio_cmdline(options));
    if (options.until_ready) add(kUntilReadyParam);
    for (const std::string& part : options.append) add(part);
    return cmdline;
}

}  // namespace nanovm
