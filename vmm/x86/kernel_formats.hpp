// Internal to vmm/x86/: the two kernel image formats load_kernel() dispatches to, and
// the bounds-checked reads they share. Public API: boot.hpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>

#include "vmm/x86/boot.hpp"

namespace nanovm::x86::detail {

/// True if `image` starts like a bzImage ("HdrS" at 0x202).
bool is_bzimage(std::span<const uint8_t> image);
/// True if `image` starts with the ELF magic.
bool is_elf(std::span<const uint8_t> image);

/// Loads a bzImage's protected-mode code at 1 MiB (see load_kernel).
LoadedKernel load_bzimage(GuestMemory& mem, std::span<const uint8_t> image);
/// Loads an ELF64 x86-64 vmlinux's PT_LOAD segments at p_paddr (see load_kernel).
LoadedKernel load_elf(GuestMemory& mem, std::span<const uint8_t> image);

/// Decompresses one LZ4 block (the LZ4 block format: sequences of literals and
/// matches) into `out`; returns the bytes written. Throws Error("kernel image: LZ4
/// block: <why>") for a malformed block or one that does not fit in `out`.
size_t lz4_block_decompress(std::span<const uint8_t> in, std::span<uint8_t> out);

/// A bzImage's vmlinux, decompressed by the VMM into an anonymous mapping of its own
/// (populated in one call, unmapped with it: none of it stays in the VMM's heap).
class UnpackedKernel {
public:
    /// Throws Error("kernel image: ...") if `size` bytes cannot be mapped.
    explicit UnpackedKernel(size_t size);
    ~UnpackedKernel();
    UnpackedKernel(UnpackedKernel&& other) noexcept;
    UnpackedKernel& operator=(UnpackedKernel&&) = delete;
    UnpackedKernel(const UnpackedKernel&) = delete;
    UnpackedKernel& operator=(const UnpackedKernel&) = delete;

    std::span<uint8_t> bytes() { return {data_, size_}; }
    std::span<const uint8_t> span() const { return {data_, size_}; }

private:
    uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

/// The ELF vmlinux inside a bzImage whose payload is LZ4 (legacy frame, as the
/// kernel's KERNEL_LZ4 build writes it) and holds nothing but that ELF; nullopt for
/// any other payload (another compressor, relocations appended for KASLR), which
/// the guest's own decompressor then unpacks. Throws Error("kernel image: LZ4 ...")
/// for a corrupt LZ4 payload.
std::optional<UnpackedKernel> unpack_bzimage_vmlinux(std::span<const uint8_t> image);

/// Throws Error("kernel image: <why>").
[[noreturn]] void image_error(std::string_view why);

/// Reads a T at `offset` of `image` (little-endian host), or throws
/// Error("kernel image: truncated ...") naming `what` if the file is too short.
template <typename T>
T read_at(std::span<const uint8_t> image, uint64_t offset, std::string_view what);

/// a + b, or throws Error("kernel image: <what> overflows").
uint64_t checked_add(uint64_t a, uint64_t b, std::string_view what);

[[noreturn]] void throw_truncated(std::string_view what, uint64_t offset, uint64_t len, uint64_t file_size);

template <typename T>
T read_at(std::span<const uint8_t> image, uint64_t offset, std::string_view what) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (offset > image.size() || image.size() - offset < sizeof(T))
        throw_truncated(what, offset, sizeof(T), image.size());
    T value;
    std::memcpy(&value, image.data() + offset, sizeof(T));
    return value;
}

}  // namespace nanovm::x86::detail
