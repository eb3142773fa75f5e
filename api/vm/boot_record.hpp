// What a VM was booted with, kept in its state directory (boot.json) so that a new
// VMM can boot it cold again over the disks it left: a reboot (vm_ops.hpp
// reboot_vm). The VMM writes it when it starts (boot, restore or reboot); it never
// changes afterwards, since a writable disk's current top is found on disk
// (current_top): every snapshot or fork freezes the top into "<id>-disk<i>-<n>.layer"
// files of the directory, marked frozen in their headers, and the top is the one
// layer that is not.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "api/vm/device_options.hpp"
#include "api/vm/state_dir.hpp"

namespace nanovm::vm {

/// boot.json: the shape and the disks in bus order (/dev/vda first), each writable
/// one as the path it was opened with when this record was written.
struct BootRecord {
    uint32_t cpus = 0;
    uint32_t memory_mib = 0;
    std::string image;                    ///< the root image (VmmOptions::image)
    std::vector<std::string> user_disks;  ///< VmmOptions::disks as given
    std::vector<DiskOption> disks;

    bool operator==(const BootRecord&) const = default;
};

/// Writes `record` to `path` atomically (temp file, rename; no fsync: a host crash
/// loses the VMM anyway, and the tops are found on disk). Throws SysError.
void write_boot_record(const std::string& path, const BootRecord& record);

/// Reads boot.json. Throws SysError (ENOENT: a VM started before boot records
/// existed) or Error("<path>: <what is wrong>").
BootRecord read_boot_record(const std::string& path);

/// The file writable disk `index` of VM `paths` reads and writes now: the one layer
/// file "<id>-disk<index>-<n>.layer" of its directory that is not frozen; if there is
/// none, `recorded` (the raw disk the VM started with, never frozen since: a freeze
/// always makes a layer file). Two unfrozen ones (a VMM killed inside a freeze,
/// between making the new top and marking the old one frozen): the new one is empty
/// and is removed, the old one is the top. Throws Error naming the directory when the
/// layers do not fit that rule (several unfrozen that are not parent and child).
std::string current_top(const VmPaths& paths, size_t index, const std::string& recorded);

/// The highest <n> of the "<id>-disk<i>-<n>.layer" files in the directory (0 if
/// none): a VMM starting there names its next layers above it.
uint32_t last_layer_number(const VmPaths& paths);

/// The record of a dead VM with each writable disk at its current top (current_top),
/// as a layer file where it is one. Throws what read_boot_record and current_top throw.
BootRecord kept_disks(const VmPaths& paths);

}  // namespace nanovm::vm
