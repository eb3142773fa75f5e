// The overlay root switch (see overlay_root.hpp).
#include "guest-init/overlay_root.hpp"

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "guest-init/cmdline.hpp"
#include "guest-init/console.hpp"

namespace nanovm::guest_init {
namespace {

bool make_dir(const std::string& path) {
    if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return true;
    log_errno("mkdir " + path, errno);
    return false;
}

bool mount_logged(const std::string& source, const std::string& target, const char* fstype, unsigned long flags,
                  const std::string& data) {
    if (::mount(source.c_str(), target.c_str(), fstype, flags, data.empty() ? nullptr : data.c_str()) == 0)
        return true;
    log_errno("mount " + source + " (" + fstype + ") on " + target, errno);
    return false;
}

}  // namespace

std::string overlay_mount_options(const std::string& layer_dir) {
    return "lowerdir=/,upperdir=" + layer_dir + "/upper,workdir=" + layer_dir + "/work";
}

bool switch_to_overlay_root(const std::string& device) {
    const std::string staging = kOverlayStaging;
    const std::string layer = staging + "/layer";
    const std::string root = staging + "/root";
    if (!make_dir(staging) || !make_dir(layer) || !make_dir(root)) return false;

    const bool in_ram = device == kOverlayTmpfs;
    if (in_ram) {
        if (!mount_logged("tmpfs", layer, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")) return false;
    } else if (!mount_logged(device, layer, "ext4", MS_NOATIME, "noinit_itable")) {
        // noinit_itable: the host formats the disk with lazy_itable_init and keeps the
        // file sparse (unwritten inode tables read as zeros); without it the kernel's
        // ext4lazyinit thread zeroes ~256 MiB of inode tables of the 16 GiB disk in the
        // background, costing guest I/O and host disk allocation for nothing.
        return false;
    }
    // upper/ is the new root's top directory: its mode is what / shows.
    if (::mkdir((layer + "/upper").c_str(), 0755) != 0 && errno != EEXIST) {
        log_errno("mkdir " + layer + "/upper", errno);
        return false;
    }
    if (!make_dir(layer + "/work")) return false;
    if (!mount_logged("overlay", root, "overlay", 0, overlay_mount_options(layer))) return false;

    // switch_root(8): the new root mounted over /, then chroot into it.
    if (::chdir(root.c_str()) != 0) {
        log_errno("chdir " + root, errno);
        return false;
    }
    if (::mount(root.c_str(), "/", nullptr, MS_MOVE, nullptr) != 0) {
        log_errno("mount --move " + root + " /", errno);
        return false;
    }
    if (::chroot(".") != 0) {
        log_errno("chroot into the overlay root", errno);
        return false;
    }
    if (::chdir("/") != 0) log_errno("chdir /", errno);
    return true;
}

}  // namespace nanovm::guest_init
