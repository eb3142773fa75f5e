// load_kernel(): recognises the image format and hands it to its loader.
#include <fmt/format.h>

#include "vmm/error.hpp"
#include "vmm/x86/boot.hpp"
#include "vmm/x86/kernel_formats.hpp"

namespace nanovm::x86 {

namespace detail {

void image_error(std::string_view why) { throw Error(fmt::format("kernel image: {}", why)); }

void throw_truncated(std::string_view what, uint64_t offset, uint64_t len, uint64_t file_size) {
    image_error(fmt::format("truncated: {} at offset {:#x} ({} bytes) is past the end of the {}-byte file",
                            what, offset, len, file_size));
}

uint64_t checked_add(uint64_t a, uint64_t b, std::string_view what) {
    if (a > UINT64_MAX - b) image_error(fmt::format("{} overflows", what));
    return a + b;
}

}  // namespace detail

LoadedKernel load_kernel(GuestMemory& mem, std::span<const uint8_t> image) {
    if (image.empty()) detail::image_error("the file is empty");
    if (detail::is_elf(image)) return detail::load_elf(mem, image);
    if (detail::is_bzimage(image)) {
        // Its vmlinux unpacked by the VMM where it can (LZ4, nothing appended), else
        // the guest's decompressor runs.
        if (const std::optional<detail::UnpackedKernel> vmlinux = detail::unpack_bzimage_vmlinux(image)) {
            LoadedKernel kernel = detail::load_elf(mem, vmlinux->span());
            kernel.unpacked_bzimage = true;
            return kernel;
        }
        return detail::load_bzimage(mem, image);
    }
    detail::image_error(fmt::format("not a bzImage (no \"HdrS\" at 0x202) nor an ELF file ({} bytes)", image.size()));
}

}  // namespace nanovm::x86
