// libFuzzer harness for virtio-blk's state machine (devices/virtio/blk/block_device.hpp)
// behind its mmio transport, with the real io_uring backend on a 1 MiB temporary file
// (in /dev/shm when there is one): a hostile driver's register writes, resets, rings
// and requests (fuzz/device_ops.hpp) interleaved with the host side -- io_uring
// completions reaped by the loop, a snapshot's drain(), I/O left to finish in the
// background while the driver goes on. Invariants: those of device_ops.hpp, plus
// no request left in flight after drain(), save_state() then possible, and the disk
// file never written past its end (every transfer inside the capacity).
//
// Input format: u8 flags (bit 0 read-only disk, bit 1 block size 4096, else 512),
// then device_ops.hpp's ops; host events (op % 16 = 12 + n):
//   n = 0  complete: release a held loop, wait (up to 200 ms) until no request is in
//          flight, settle
//   n = 1  drain: the snapshot path, drain() on the loop thread; then in_flight() == 0
//          and save_state() succeeds
//   n = 2  post a request: u8 type (IN, OUT, FLUSH, GET_ID, DISCARD, WRITE_ZEROES, an
//          unknown one), u16 sector, u8 data (bit 7: device-writable, length
//          ((data & 0x7f) + 1) * 512 bytes, 0x7f: none), u8 bit 0: no status byte;
//          DISCARD / WRITE_ZEROES carry one segment (u32 sector, u32 count, u32 flags)
//   n = 3  sleep 1 ms (background I/O progresses between the driver's next steps)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "devices/virtio/blk/block_device.hpp"
#include "fuzz/device_ops.hpp"

using namespace nanovm;
using namespace nanovm::virtio;
using nanovm::fuzz::fuzz_check;
using nanovm::fuzz::FuzzInput;

namespace {

constexpr uint64_t kDiskBytes = 1 * MiB;

/// The disk file, made once per process and removed at exit.
const std::string& disk_path() {
    static const std::string path = [] {
        const char* dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        std::string p = std::string(dir) + "/nanovm-fuzz-blk-" + std::to_string(::getpid()) + ".img";
        const int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        fuzz_check(fd >= 0 && ::ftruncate(fd, kDiskBytes) == 0, "create the disk file");
        ::close(fd);
        std::atexit([] { ::unlink(disk_path().c_str()); });
        return p;
    }();
    return path;
}

uint64_t file_size(const std::string& path) {
    struct stat st {};
    fuzz_check(::stat(path.c_str(), &st) == 0, "stat the disk file");
    return static_cast<uint64_t>(st.st_size);
}

void post_request(fuzz::DeviceOps& ops, FuzzInput& in) {
    static constexpr uint32_t kTypes[] = {blk::request_type::kIn,      blk::request_type::kOut,
                                          blk::request_type::kFlush,   blk::request_type::kGetId,
                                          blk::request_type::kDiscard, blk::request_type::kWriteZeroes,
                                          blk::request_type::kSecureErase};
    const uint32_t type = kTypes[in.u8() % std::size(kTypes)];
    const uint64_t sector = in.u16();
    const uint8_t data = in.u8();
    const bool no_status = in.u8() & 1;
    std::vector<test::TestBuffer> buffers{test::TestBuffer::in(fuzz::bytes_of(blk::RequestHeader{type, 0, sector}))};
    if (type == blk::request_type::kDiscard || type == blk::request_type::kWriteZeroes) {
        const blk::DiscardWriteZeroesSegment segment{in.u32(), in.u32(), in.u32()};
        buffers.push_back(test::TestBuffer::in(fuzz::bytes_of(segment)));
    }
    if ((data & 0x7f) != 0x7f) {
        const uint32_t len = ((data & 0x7fu) + 1) * 512;
        if (data & 0x80)
            buffers.push_back(test::TestBuffer::out(len));
        else
            buffers.push_back(test::TestBuffer::in(std::vector<uint8_t>(len, static_cast<uint8_t>(sector))));
    }
    if (!no_status) buffers.push_back(test::TestBuffer::out(1));
    ops.post(0, buffers);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const fuzz::DeviceRig rig = fuzz::device_rig();
    GuestMemory& memory = rig.memory;
    EventLoop& loop = rig.loop;

    FuzzInput in(data, size);
    const uint8_t flags = in.u8();
    blk::BlockOptions options;
    options.path = disk_path();
    options.read_only = flags & 1;
    options.serial = "fuzz";
    options.block_size = (flags & 2) ? 4096 : 512;
    blk::BlockDevice device(options);
    {
        MmioTransport transport(device, memory, loop);
        fuzz::DeviceOps ops(memory, loop, transport);
        ops.run(in, [&](uint8_t event, FuzzInput& input) {
            switch (event) {
                case 0:
                    test::eventually([&] { return device.in_flight() == 0; }, std::chrono::milliseconds(200));
                    break;
                case 1: {
                    loop.run_sync([&] { device.drain(); });
                    fuzz_check(device.in_flight() == 0, "drain() leaves no request in flight");
                    (void)device.save_state();  // throws (a crash here) if a request were in flight
                    break;
                }
                case 2:
                    post_request(ops, input);
                    break;
                default:
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                    break;
            }
        });
    }
    // The transport reset the device: it waited for every I/O.
    fuzz_check(device.in_flight() == 0, "nothing in flight after the transport went away");
    fuzz_check(file_size(disk_path()) == kDiskBytes, "the disk file never grows past the disk");
    return 0;
}
