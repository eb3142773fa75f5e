// A bzImage's vmlinux unpacked by the VMM (see unpack_bzimage_vmlinux): the kernel's
// LZ4 payload decompressed on the host, so the guest does not run the bzImage's
// decompressor. That decompressor copies the compressed kernel to the end of its
// buffer, decompresses it and moves the ELF segments into place, each page of it a
// nested page fault on 4 KiB guest RAM: natively in the test host a vmlinux booted
// ~350 ms sooner (exec -> guest clock start) than the bzImage it came from
// (2026-12-02, 5 runs each, interleaved). The kernel that runs is the same ELF.
#include <elf.h>
#include <sys/mman.h>

#include <cerrno>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "vmm/x86/boot_params_layout.hpp"
#include "vmm/x86/kernel_formats.hpp"

namespace nanovm::x86::detail {

namespace {

/// The LZ4 "legacy" frame (lz4 -l, what the kernel's KERNEL_LZ4 build writes):
/// this magic, then blocks of <u32 compressed size><LZ4 block>, each at most 8 MiB
/// decompressed; the kernel's build appends the u32 decompressed size.
constexpr uint32_t kLz4LegacyMagic = 0x184c2102;
constexpr uint64_t kLz4LegacyBlockMax = 8u << 20;
constexpr uint64_t kSectorSize = 512;
/// The largest vmlinux unpacked (more is refused, not allocated).
constexpr uint64_t kMaxVmlinux = 256u << 20;

uint32_t le32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

}  // namespace

// MAP_POPULATE: one call faults the whole buffer in (natively ~5,000 page faults
// fewer than a heap buffer written page by page).
UnpackedKernel::UnpackedKernel(size_t size) : size_(size) {
    void* at = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (at == MAP_FAILED) image_error(fmt::format("{} bytes for the unpacked vmlinux: {}", size, std::strerror(errno)));
    data_ = static_cast<uint8_t*>(at);
}

UnpackedKernel::~UnpackedKernel() {
    if (data_) ::munmap(data_, size_);
}

UnpackedKernel::UnpackedKernel(UnpackedKernel&& other) noexcept : data_(other.data_), size_(other.size_) {
    other.data_ = nullptr;
    other.size_ = 0;
}

size_t lz4_block_decompress(std::span<const uint8_t> in, std::span<uint8_t> out) {
    const uint8_t* ip = in.data();
    const uint8_t* const iend = ip + in.size();
    uint8_t* op = out.data();
    uint8_t* const oend = op + out.size();
    const auto bad = [](std::string_view why) -> void { image_error(fmt::format("LZ4 block: {}", why)); };
    // A length nibble of 15 goes on in bytes, each adding up to 255.
    const auto extend = [&](uint64_t length) {
        for (;;) {
            if (ip == iend) bad("truncated length");
            const uint8_t b = *ip++;
            length += b;
            if (length > out.size()) bad("length beyond the output");
            if (b != 255) return length;
        }
    };
    while (ip < iend) {
        const uint8_t token = *ip++;
        uint64_t literals = token >> 4;
        if (literals == 15) literals = extend(literals);
        if (static_cast<uint64_t>(iend - ip) < literals) bad("literals past the input");
        if (static_cast<uint64_t>(oend - op) < literals) bad("literals past the output");
        if (literals <= 16 && iend - ip >= 16 && oend - op >= 16)
            std::memcpy(op, ip, 16);  // fixed size: inlined; the bytes past `literals` are rewritten later
        else
            std::memcpy(op, ip, literals);
        ip += literals;
        op += literals;
        if (ip == iend) break;  // the last sequence has literals only
        if (iend - ip < 2) bad("truncated match offset");
        const uint64_t offset = uint64_t{ip[0]} | uint64_t{ip[1]} << 8;
        ip += 2;
        if (offset == 0 || offset > static_cast<uint64_t>(op - out.data())) bad("match offset before the output");
        uint64_t length = token & 15;
        if (length == 15) length = extend(length);
        length += 4;  // LZ4's minimum match
        if (static_cast<uint64_t>(oend - op) < length) bad("match past the output");
        const uint8_t* from = op - offset;
        if (offset >= 8 && static_cast<uint64_t>(oend - op) >= length + 8) {
            // 8 bytes at a time, up to 7 past the match (rewritten later): with the
            // source 8 or more bytes behind, each chunk reads bytes already written.
            uint8_t* const stop = op + length;
            while (op < stop) {
                std::memcpy(op, from, 8);
                op += 8;
                from += 8;
            }
            op = stop;
        } else if (offset >= length) {
            std::memcpy(op, from, length);
            op += length;
        } else {
            // Overlapping: repeats the last `offset` bytes. [from, op) holds whole
            // periods of that pattern, so it is copied after itself, doubling each
            // time (runs of one byte, the kernel's padding, are long).
            while (length > 0) {
                const uint64_t n = std::min<uint64_t>(length, static_cast<uint64_t>(op - from));
                std::memcpy(op, from, n);
                op += n;
                length -= n;
            }
        }
    }
    return static_cast<size_t>(op - out.data());
}

std::optional<UnpackedKernel> unpack_bzimage_vmlinux(std::span<const uint8_t> image) {
    const uint16_t version = read_at<uint16_t>(image, 0x206, "protocol version");
    if (version < 0x0208) return std::nullopt;  // no payload_offset/payload_length before 2.08
    uint64_t setup_sects = read_at<uint8_t>(image, 0x1f1, "setup_sects");
    if (setup_sects == 0) setup_sects = 4;
    const uint64_t payload_start = checked_add((setup_sects + 1) * kSectorSize,
                                               read_at<uint32_t>(image, 0x248, "payload_offset"), "payload");
    const uint64_t payload_length = read_at<uint32_t>(image, 0x24c, "payload_length");
    if (payload_start > image.size() || image.size() - payload_start < payload_length || payload_length < 12)
        return std::nullopt;
    const std::span<const uint8_t> payload = image.subspan(payload_start, payload_length);
    if (le32(payload.data()) != kLz4LegacyMagic) return std::nullopt;  // another compressor: the guest's decompressor
    const uint64_t size = le32(payload.data() + payload.size() - 4);
    if (size == 0 || size > kMaxVmlinux) return std::nullopt;

    UnpackedKernel out(size);
    uint64_t done = 0;
    uint64_t at = 4;
    const uint64_t end = payload.size() - 4;  // the appended size
    while (at < end) {
        if (end - at < 4) image_error("LZ4 payload: truncated block size");
        const uint32_t block = le32(payload.data() + at);
        at += 4;
        if (block == kLz4LegacyMagic) continue;  // concatenated frames
        if (block > end - at) image_error("LZ4 payload: block past the payload");
        const uint64_t room = std::min<uint64_t>(kLz4LegacyBlockMax, size - done);
        done += lz4_block_decompress(payload.subspan(at, block), out.bytes().subspan(done, room));
        at += block;
    }
    if (done != size)
        image_error(fmt::format("LZ4 payload: {} bytes decompressed, the image says {}", done, size));
    const std::span<const uint8_t> elf = out.span();
    if (!is_elf(elf)) return std::nullopt;
    // Only a bare vmlinux: with relocations appended (CONFIG_X86_NEED_RELOCS, e.g. for
    // KASLR) the decompressor's work is more than unpacking, so the guest does it.
    const auto eh = read_at<Elf64_Ehdr>(elf, 0, "unpacked ELF header");
    if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) ||
        eh.e_shoff + uint64_t{eh.e_shnum} * eh.e_shentsize != size)
        return std::nullopt;
    return out;
}

}  // namespace nanovm::x86::detail
