// Test fixtures for virtio-blk: a temporary directory, a BlockDevice on an MmioTransport
// over simulated guest memory driven by TestDriver, and helpers that post blk requests
// (header + data + status byte) and read their outcome.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "devices/virtio/blk/block_device.hpp"
#include "devices/virtio/mmio_transport.hpp"
#include "tests/unit/devices/virtio/test_driver.hpp"
#include "vmm/error.hpp"

namespace nanovm::test {

/// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class TempDir {
public:
    TempDir() {
        std::string templ = (std::filesystem::temp_directory_path() / "nanovm-blk-XXXXXX").string();
        if (!::mkdtemp(templ.data())) throw_errno("mkdtemp");
        path_ = templ;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string file(const std::string& name) const { return (path_ / name).string(); }

private:
    std::filesystem::path path_;
};

/// Creates (or truncates) `path` as a sparse file of `bytes`.
inline void make_image(const std::string& path, uint64_t bytes) {
    Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd) throw_errno("open(test image)");
    if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) throw_errno("ftruncate(test image)");
}

/// Bytes [offset, offset + len) of the file at `path`.
inline std::vector<uint8_t> read_file_range(const std::string& path, uint64_t offset, size_t len) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    std::vector<uint8_t> out(len);
    if (!fd || ::pread(fd.get(), out.data(), len, static_cast<off_t>(offset)) != static_cast<ssize_t>(len))
        throw_errno("pread(test image)");
    return out;
}

/// 512-byte blocks the file at `path` has allocated (st_blocks).
inline uint64_t allocated_blocks(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw_errno("stat(test image)");
    return static_cast<uint64_t>(st.st_blocks);
}

/// `len` bytes of a pattern that depends on `seed` and the position.
inline std::vector<uint8_t> pattern(size_t len, uint32_t seed) {
    std::vector<uint8_t> out(len);
    for (size_t i = 0; i < len; ++i) out[i] = static_cast<uint8_t>((i * 131 + seed * 7919 + (i >> 9)) & 0xff);
    return out;
}

/// The 16-byte request header as the driver writes it.
inline std::vector<uint8_t> blk_header(uint32_t type, uint64_t sector) {
    virtio::blk::RequestHeader h{type, 0, sector};
    const auto* p = reinterpret_cast<const uint8_t*>(&h);
    return {p, p + sizeof(h)};
}

/// DISCARD / WRITE_ZEROES segment list.
inline std::vector<uint8_t> blk_segments(const std::vector<virtio::blk::DiscardWriteZeroesSegment>& segments) {
    const auto* p = reinterpret_cast<const uint8_t*>(segments.data());
    return {p, p + segments.size() * sizeof(virtio::blk::DiscardWriteZeroesSegment)};
}

/// One posted request: its head, the GPAs of its writable data buffers and of the
/// status byte.
struct PostedRequest {
    uint16_t head = 0;
    std::vector<uint64_t> data_gpas;
    std::vector<uint32_t> data_lens;
    uint64_t status_gpa = 0;
};

/// Memory, loop, device, transport and driver, destroyed in the safe order (driver,
/// transport: resets the device, device, loop, memory).
struct BlkRig {
    explicit BlkRig(virtio::blk::BlockOptions options, uint64_t ram = 64 * MiB, EventLoop* shared_loop = nullptr,
                    GuestMemory* shared_memory = nullptr, uint64_t ring_base = 0x10000, uint64_t buffer_base = 0x100000)
        : own_memory(shared_memory ? GuestMemory{} : GuestMemory::create(ram)),
          memory(shared_memory ? *shared_memory : own_memory),
          own_loop(shared_loop ? nullptr : std::make_unique<EventLoop>()),
          loop(shared_loop ? *shared_loop : *own_loop),
          device(std::move(options)),
          transport(device, memory, loop),
          driver(memory, transport, ring_base, buffer_base) {}

    /// Brings the device up with every offered feature (or `features`).
    void up(std::optional<uint64_t> features = {}) {
        if (!driver.bring_up(features)) throw Error("virtio-blk test: FEATURES_OK refused");
        used = 0;
    }

    /// Posts header + readable `data_out` buffers + writable `data_in` lengths + a
    /// status byte (`with_status` false: none).
    PostedRequest post(uint32_t type, uint64_t sector, const std::vector<std::vector<uint8_t>>& data_out,
                       const std::vector<uint32_t>& data_in, bool with_status = true) {
        std::vector<TestBuffer> buffers{TestBuffer::in(blk_header(type, sector))};
        for (const auto& d : data_out) buffers.push_back(TestBuffer::in(d));
        for (uint32_t len : data_in) buffers.push_back(TestBuffer::out(len));
        if (with_status) buffers.push_back(TestBuffer::out(1));
        const auto posted = driver.post(0, buffers);
        PostedRequest r;
        r.head = posted.head;
        r.data_lens = data_in;
        r.data_gpas.assign(posted.writable_gpas.begin(), posted.writable_gpas.begin() + data_in.size());
        if (with_status) r.status_gpa = posted.writable_gpas.back();
        return r;
    }
    PostedRequest post_read(uint64_t sector, const std::vector<uint32_t>& lens) {
        return post(virtio::blk::request_type::kIn, sector, {}, lens);
    }
    PostedRequest post_write(uint64_t sector, const std::vector<std::vector<uint8_t>>& segments) {
        return post(virtio::blk::request_type::kOut, sector, segments, {});
    }

    /// Kicks and waits until `n` more requests have been used. False on timeout.
    bool complete(uint16_t n = 1) {
        driver.kick(0);
        used = static_cast<uint16_t>(used + n);
        return driver.wait_used(0, used);
    }
    uint8_t status(const PostedRequest& r) { return memory.read<uint8_t>(Gpa(r.status_gpa)); }
    /// The data a read request received, its buffers concatenated.
    std::vector<uint8_t> data(const PostedRequest& r) {
        std::vector<uint8_t> out;
        for (size_t i = 0; i < r.data_gpas.size(); ++i) {
            const auto part = driver.read_guest(r.data_gpas[i], r.data_lens[i]);
            out.insert(out.end(), part.begin(), part.end());
        }
        return out;
    }
    /// The used element published for chain `head` among the last `used` ones.
    std::optional<virtio::UsedElement> used_of(uint16_t head) {
        for (uint16_t i = 0; i < used; ++i) {
            const auto e = driver.queue(0).used(i);
            if (e.id == head) return e;
        }
        return std::nullopt;
    }
    uint32_t status_register() { return transport.status(); }

    GuestMemory own_memory;
    GuestMemory& memory;
    std::unique_ptr<EventLoop> own_loop;
    EventLoop& loop;
    virtio::blk::BlockDevice device;
    virtio::MmioTransport transport;
    TestDriver driver;
    uint16_t used = 0;  ///< used elements expected so far
};

}  // namespace nanovm::test
