// bzImage loading (Linux boot protocol, "64-bit boot protocol"): the protected-mode
// code goes to 1 MiB and is entered in long mode at 1 MiB + 0x200 (startup_64). The
// setup header is kept so that write_boot_params() can copy it into the zero page,
// where the kernel's decompressor reads kernel_alignment and init_size.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "vmm/x86/boot.hpp"
#include "vmm/x86/boot_params_layout.hpp"
#include "vmm/x86/kernel_formats.hpp"

namespace nanovm::x86::detail {

namespace {

using bootproto::SetupHeader;

constexpr uint64_t kSectorSize = 512;
constexpr uint64_t k64BitEntryOffset = 0x200;  ///< startup_64 - startup_32
/// xloadflags (where XLF_KERNEL_64 lives) exists from protocol 2.12 on, so that is the
/// oldest protocol whose 64-bit entry point a loader can know about.
constexpr uint16_t kMinProtocol = 0x020c;
/// The header must reach at least to the end of init_size (protocol 2.10), which
/// the kernel's 64-bit entry code reads from boot_params.
constexpr uint64_t kMinHeaderEnd = 0x264;
/// Default initrd_addr_max of protocols < 2.03 (never true for 2.12+, but a zero
/// field must not mean "nowhere").
constexpr uint32_t kDefaultInitrdAddrMax = 0x37ffffff;

std::string protocol_string(uint16_t version) {
    return fmt::format("{}.{:02}", version >> 8, version & 0xff);
}

bool is_power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

uint64_t align_up(uint64_t v, uint64_t align) { return checked_add(v, align - 1, "kernel_alignment") & ~(align - 1); }

}  // namespace

bool is_bzimage(std::span<const uint8_t> image) {
    return image.size() >= 0x206 && read_at<uint32_t>(image, 0x202, "header magic") == bootproto::kHeaderMagic;
}

LoadedKernel load_bzimage(GuestMemory& mem, std::span<const uint8_t> image) {
    const uint16_t boot_flag = read_at<uint16_t>(image, 0x1fe, "boot_flag");
    if (boot_flag != bootproto::kBootFlag)
        image_error(fmt::format("bad boot_flag {:#06x} at 0x1fe (expected 0xaa55)", boot_flag));

    const uint16_t version = read_at<uint16_t>(image, 0x206, "protocol version");
    if (version < kMinProtocol)
        image_error(fmt::format("boot protocol {} is too old: 64-bit boot needs {} or newer (xloadflags)",
                                protocol_string(version), protocol_string(kMinProtocol)));

    uint64_t setup_sects = read_at<uint8_t>(image, 0x1f1, "setup_sects");
    if (setup_sects == 0) setup_sects = 4;  // the boot protocol's "0 means 4"
    const uint64_t setup_size = (setup_sects + 1) * kSectorSize;
    if (image.size() <= setup_size)
        image_error(fmt::format("truncated: {} setup bytes but the file has only {} bytes, so no kernel code",
                                setup_size, image.size()));

    const uint64_t header_end = 0x202 + uint64_t{read_at<uint8_t>(image, bootproto::kHeaderEndByte, "jump")};
    if (header_end < kMinHeaderEnd)
        image_error(fmt::format("setup header ends at {:#x}, before init_size (needs >= {:#x})", header_end,
                                kMinHeaderEnd));
    // header_end <= 0x202 + 0xff < 2 * 512 <= setup_size: always inside the setup area,
    // which the file was checked to contain.
    static_assert(0x202 + 0xff < 2 * kSectorSize);

    // The kernel's view of its own header (fields past header_end read as zero).
    const uint64_t header_len = std::min<uint64_t>(header_end - bootproto::kSetupHeaderOffset,
                                                   bootproto::kSetupHeaderSpace);
    SetupHeader hdr{};
    std::memcpy(&hdr, image.data() + bootproto::kSetupHeaderOffset, std::min<uint64_t>(header_len, sizeof hdr));

    if (!(hdr.xloadflags & bootproto::kXlfKernel64))
        image_error(fmt::format("xloadflags {:#x} lacks XLF_KERNEL_64: no 64-bit entry point", +hdr.xloadflags));
    if (!(hdr.loadflags & bootproto::kLoadedHigh))
        image_error("loadflags lacks LOADED_HIGH: a zImage, not a bzImage");

    const uint64_t load = layout::kHighMemory.value;
    const std::span<const uint8_t> payload = image.subspan(setup_size);
    const uint64_t syssize_bytes = uint64_t{hdr.syssize} * 16;  // syssize counts 16-byte paragraphs
    if (payload.size() < syssize_bytes)
        image_error(fmt::format("truncated: syssize says {} bytes of kernel code but the file has {} after the setup",
                                syssize_bytes, payload.size()));
    if (!mem.contains(Gpa(load), payload.size()))
        image_error(fmt::format("{} bytes of kernel code at {:#x} do not fit in guest RAM", payload.size(), load));

    // Where the decompressor puts the kernel: the load address rounded up to
    // kernel_alignment (relocatable) but never below pref_address (LOAD_PHYSICAL_ADDR);
    // it needs init_size bytes from there.
    // (Packed fields are copied out by value: no reference may bind to them.)
    const uint64_t alignment = hdr.kernel_alignment;
    const bool relocatable = hdr.relocatable_kernel != 0;
    const uint64_t pref_address = hdr.pref_address;
    const uint64_t init_size = hdr.init_size;
    if (relocatable && !is_power_of_two(alignment))
        image_error(fmt::format("kernel_alignment {:#x} is not a power of two", alignment));
    const uint64_t runtime_start = std::max(relocatable ? align_up(load, alignment) : load, pref_address);
    const uint64_t load_end =
        std::max(load + payload.size(), checked_add(runtime_start, init_size, "pref_address + init_size"));
    if (!mem.contains(Gpa(load), load_end - load))
        image_error(fmt::format("the kernel needs guest RAM up to {:#x} (init_size {:#x} from {:#x}), "
                                "beyond the guest's low RAM",
                                load_end, init_size, runtime_start));

    mem.write_bytes(Gpa(load), payload);

    LoadedKernel kernel;
    kernel.entry = Gpa(load + k64BitEntryOffset);
    kernel.load_start = Gpa(load);
    kernel.load_end = Gpa(load_end);
    kernel.bzimage = true;
    kernel.protocol_version = version;
    const uint32_t initrd_addr_max = hdr.initrd_addr_max;
    kernel.initrd_addr_max = initrd_addr_max ? initrd_addr_max : kDefaultInitrdAddrMax;
    const auto header_bytes = image.subspan(bootproto::kSetupHeaderOffset, header_len);
    kernel.setup_header.assign(header_bytes.begin(), header_bytes.end());
    return kernel;
}

}  // namespace nanovm::x86::detail
