// libFuzzer harness for virtio-vsock (devices/virtio/vsock/vsock_device.hpp) behind
// its mmio transport, with real Unix sockets on the host side: host programs that
// connect to the device's socket and say `CONNECT <port>`, send bytes, read, half-
// close or close; a host listener at `<path>_5000` that guest connections reach; a
// hostile driver's register writes, resets, rx buffers and tx packets
// (fuzz/device_ops.hpp), in any order. Deadlines are a few ms, so that REQUESTs the
// guest never answers and SHUTDOWNs it never completes time out within an input.
// Invariants: those of device_ops.hpp, plus never more streams than max_streams.
//
// Input format: device_ops.hpp's ops; host events (op % 16 = 12 + n):
//   n = 0  a host program connects: u8 port (1024 + port % 4), CONNECT line sent
//          (bit 7 of port: a malformed line instead)
//   n = 1  host connection u8 which (mod the open ones) sends u8 len bytes (follow)
//   n = 2  host side: u8 what; bits 0-1: connection `what >> 4` reads all it can /
//          half-closes (SHUT_WR) / closes / nothing; bit 2: accept what the listener
//          at _5000 has; bit 3: sleep 6 ms (deadlines pass)
//   n = 3  a tx packet: u8 op (kOps[op % 7]; 0: a u16 op follows), u16 src port
//          (the guest's), u8 dst (0-7: port 1024 + dst, the host side of a host
//          connection (they are numbered from 1024); else 5000, the host listener),
//          u32 flags, u32 buf_alloc, u32 fwd_cnt, u8 payload length (payload
//          follows), u8 bit 0: header split across two buffers
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "devices/virtio/vsock/unix_socket.hpp"
#include "devices/virtio/vsock/vsock_device.hpp"
#include "fuzz/device_ops.hpp"

using namespace nanovm;
using namespace nanovm::virtio;
using namespace nanovm::virtio::vsock;
using nanovm::fuzz::fuzz_check;
using nanovm::fuzz::FuzzInput;

namespace {

constexpr uint32_t kMaxStreams = 8;
constexpr uint32_t kHostListenerPort = 5000;

const std::string& socket_path() {
    static const std::string path = "/tmp/nanovm-fuzz-vsock-" + std::to_string(::getpid()) + ".sock";
    return path;
}

void drain(int fd) {
    char buf[4096];
    while (::recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const fuzz::DeviceRig rig = fuzz::device_rig();
    GuestMemory& memory = rig.memory;
    EventLoop& loop = rig.loop;

    FuzzInput in(data, size);
    VsockOptions options;
    options.uds_path = socket_path();
    options.max_streams = kMaxStreams;
    options.stream_buf_alloc = 4096;
    options.connect_timeout = std::chrono::milliseconds(5);
    options.shutdown_timeout = std::chrono::milliseconds(5);
    const std::string listener_path = socket_path() + "_" + std::to_string(kHostListenerPort);
    ::unlink(listener_path.c_str());
    Fd host_listener = listen_unix(listener_path);
    std::vector<Fd> conns;  // the host programs' ends, and connections the guest opened
    {
        VsockDevice device(loop, options);
        {
            MmioTransport transport(device, memory, loop);
            fuzz::DeviceOps ops(memory, loop, transport);
            ops.run(in, [&](uint8_t event, FuzzInput& input) {
                switch (event) {
                    case 0: {
                        const uint8_t port = input.u8();
                        if (conns.size() >= 16) break;
                        int error = 0;
                        Fd fd = connect_unix(socket_path(), error);
                        if (!fd) break;
                        const std::string line =
                            (port & 0x80) ? "CONNECT x\n" : "CONNECT " + std::to_string(1024 + port % 4) + "\n";
                        [[maybe_unused]] ssize_t n = ::send(fd.get(), line.data(), line.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
                        conns.push_back(std::move(fd));
                        break;
                    }
                    case 1: {
                        const uint8_t which = input.u8();
                        const auto bytes = input.bytes(input.u8());
                        if (conns.empty() || !conns[which % conns.size()]) break;
                        [[maybe_unused]] ssize_t n =
                            ::send(conns[which % conns.size()].get(), bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
                        break;
                    }
                    case 2: {
                        const uint8_t what = input.u8();
                        if (!conns.empty()) {
                            Fd& fd = conns[(what >> 4) % conns.size()];
                            if (fd) {
                                if ((what & 3) == 0) drain(fd.get());
                                if ((what & 3) == 1) ::shutdown(fd.get(), SHUT_WR);
                                if ((what & 3) == 2) fd.reset();
                            }
                        }
                        if (what & 4) {
                            for (int error = 0; conns.size() < 32;) {
                                Fd fd = accept_unix(host_listener.get(), error);
                                if (!fd) break;
                                conns.push_back(std::move(fd));
                            }
                        }
                        if (what & 8) std::this_thread::sleep_for(std::chrono::milliseconds(6));
                        break;
                    }
                    default: {
                        static constexpr uint16_t kOps[] = {op::kRequest,  op::kResponse,     op::kRst,
                                                            op::kShutdown, op::kRw,           op::kCreditUpdate,
                                                            op::kCreditRequest};
                        const uint8_t o = input.u8();
                        PacketHeader h{};
                        h.src_cid = 3;
                        h.dst_cid = kHostCid;
                        h.op = o == 0 ? input.u16() : kOps[o % 7];
                        h.type = kTypeStream;
                        h.src_port = input.u16();
                        const uint8_t dst = input.u8();
                        h.dst_port = dst < 8 ? 1024 + dst : kHostListenerPort;
                        h.flags = input.u32();
                        h.buf_alloc = input.u32();
                        h.fwd_cnt = input.u32();
                        const auto payload = input.bytes(input.u8());
                        h.len = static_cast<uint32_t>(payload.size());
                        const bool split = input.u8() & 1;
                        std::vector<uint8_t> header = fuzz::bytes_of(h);
                        std::vector<test::TestBuffer> buffers;
                        if (split) {
                            buffers.push_back(test::TestBuffer::in({header.begin(), header.begin() + 20}));
                            buffers.push_back(test::TestBuffer::in({header.begin() + 20, header.end()}));
                        } else {
                            buffers.push_back(test::TestBuffer::in(header));
                        }
                        if (!payload.empty()) buffers.push_back(test::TestBuffer::in({payload.begin(), payload.end()}));
                        ops.post(kTxQueue, buffers);
                        break;
                    }
                }
            });
            fuzz_check(device.stream_count() <= kMaxStreams, "never more streams than max_streams");
        }
    }
    ::unlink(listener_path.c_str());
    return 0;
}
