// libFuzzer harness for the split-virtqueue parser (devices/virtio/queue.hpp) and chain
// I/O (devices/virtio/chain_io.hpp). The input is a hostile driver's view of one
// queue: its layout, descriptor table, indirect tables, avail ring and a few bytes of
// data in guest RAM of two regions ([0, 3 GiB) and [4 GiB, 4 GiB + 64 KiB)). The
// harness pops chains until the ring is empty or a QueueError, reads and writes every
// chain through ChainReader/ChainWriter, returns it with push_used, and checks what
// the parser promises: every segment lies inside one RAM region, is not empty, the
// byte counts add up, readable segments come first, no chain exceeds
// kMaxChainDescriptors, and chain I/O stays inside the chain.
//
// Input format (little endian; everything past the end reads as zero; see
// fuzz/make_seeds.py, which writes the same fields):
//   u8  size_code      bit 7 clear: queue size = 1 << (size_code % 11)
//                      bit 7 set:   a raw u16 queue size follows (check_layout's refusals)
//   u8  features       bit 0 VIRTIO_F_EVENT_IDX, bit 1 VIRTIO_F_INDIRECT_DESC
//   u16 next_avail     the device's avail and used indices at the start (wrap-around)
//   addr desc_table, addr avail_ring, addr used_ring
//   u8  payloads       each: addr, u16 len, len bytes copied there
//   u8  tables         each: addr, u16 n, n x desc written there (indirect tables)
//   u16 descs          min(descs, size) x desc written to the descriptor table
//   u16 avail_delta    avail.idx = next_avail + avail_delta
//   u16 avail_flags    u16 used_event
//   u16 heads          min(heads, size) x u16 written to avail.ring[(next_avail + i) % size]
//   u8  after          bit 0: call enable_notification, bit 1: with enable = true
//   addr = u8 base, then base % 5: 0 low window + u32, 1 end of low RAM - u32,
//          2 start of high RAM + u32, 3 end of high RAM - u32, 4 raw u64
//   desc = addr, u32 len, u16 flags, u16 next
#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "devices/virtio/chain_io.hpp"
#include "devices/virtio/queue.hpp"
#include "fuzz/fuzz_input.hpp"
#include "fuzz/fuzz_support.hpp"

using namespace nanovm;
using namespace nanovm::virtio;
using nanovm::fuzz::fuzz_check;
using nanovm::fuzz::FuzzInput;

namespace {

constexpr uint64_t kHighBytes = 64 * KiB;
constexpr uint64_t kRamBytes = kMmioHoleStart + kHighBytes;
constexpr uint64_t kLowWindow = 0x10000;
/// Bytes of chain I/O per input at most: bounds time and the RAM pages touched.
constexpr uint64_t kIoBudget = 256 * KiB;
/// Inputs between two discards of all guest RAM (pages only read are freed then).
constexpr uint64_t kDiscardEvery = 64;

/// Guest ranges this input wrote, zeroed again afterwards so that the next input
/// starts from all-zero RAM (cheaper than discarding 3 GiB of mappings every time).
class WrittenRanges {
public:
    explicit WrittenRanges(GuestMemory& memory) : memory_(memory) {}
    ~WrittenRanges() {
        for (const auto& [gpa, len] : ranges_) std::fill_n(memory_.slice(gpa, len).data(), len, uint8_t{0});
    }
    void add(Gpa gpa, uint64_t len) {
        if (len > 0) ranges_.emplace_back(gpa, len);
    }
    /// Copies `bytes` to gpa if the range is inside one region; else does nothing.
    void write(Gpa gpa, std::span<const uint8_t> bytes) {
        if (bytes.empty() || !memory_.contains(gpa, bytes.size())) return;
        memory_.write_bytes(gpa, bytes);
        add(gpa, bytes.size());
    }
    template <typename T>
    void write(Gpa gpa, const T& value) {
        write(gpa, std::span(reinterpret_cast<const uint8_t*>(&value), sizeof(T)));
    }

private:
    GuestMemory& memory_;
    std::vector<std::pair<Gpa, uint64_t>> ranges_;
};

uint64_t read_addr(FuzzInput& in) {
    const uint8_t base = in.u8();
    switch (base % 5) {
        case 0: return kLowWindow + in.u32();
        case 1: return kMmioHoleStart - in.u32();
        case 2: return kHighRamStart + in.u32();
        case 3: return kHighRamStart + kHighBytes - in.u32();
        default: return in.u64();
    }
}

Descriptor read_desc(FuzzInput& in) {
    Descriptor d{};
    d.addr = read_addr(in);
    d.len = in.u32();
    d.flags = in.u16();
    d.next = in.u16();
    return d;
}

/// The parser's promises about a chain it handed out.
void check_chain(const GuestMemory& memory, const Virtqueue& queue, const DescriptorChain& chain) {
    fuzz_check(chain.head < queue.state().size, "chain head below the queue size");
    fuzz_check(chain.readable.size() + chain.writable.size() <= kMaxChainDescriptors,
               "at most kMaxChainDescriptors buffers");
    uint64_t readable = 0, writable = 0;
    for (const BufferSegment& s : chain.readable) {
        fuzz_check(s.len > 0, "no empty readable segment");
        fuzz_check(memory.contains(s.addr, s.len), "readable segment inside one RAM region");
        readable += s.len;
    }
    for (const BufferSegment& s : chain.writable) {
        fuzz_check(s.len > 0, "no empty writable segment");
        fuzz_check(memory.contains(s.addr, s.len), "writable segment inside one RAM region");
        writable += s.len;
    }
    fuzz_check(readable == chain.readable_bytes, "readable_bytes is the sum of the readable segments");
    fuzz_check(writable == chain.writable_bytes, "writable_bytes is the sum of the writable segments");
}

/// Every iovec lies inside guest RAM and they add up to at most `bytes`.
void check_iovecs(const GuestMemory& memory, const std::vector<iovec>& iov, uint64_t bytes) {
    uint64_t total = 0;
    for (const iovec& v : iov) {
        bool inside = false;
        for (const MemoryRegion& r : memory.regions()) {
            const auto* p = static_cast<const uint8_t*>(v.iov_base);
            inside |= p >= r.host && v.iov_len <= r.size && static_cast<uint64_t>(p - r.host) <= r.size - v.iov_len;
        }
        fuzz_check(inside && v.iov_len > 0, "iovec inside guest RAM and not empty");
        total += v.iov_len;
    }
    fuzz_check(total <= bytes, "iovecs cover at most what was asked");
}

/// Reads the chain's readable bytes and fills its writable ones through every
/// ChainReader/ChainWriter call, within `budget` bytes. Returns the bytes written.
uint32_t exercise(GuestMemory& memory, const DescriptorChain& chain, uint64_t& budget, WrittenRanges& written) {
    static constexpr std::array<size_t, 5> kPieces = {1, 3, 16, 100, 4096};
    std::array<uint8_t, 4096> buf{};

    ChainReader in(memory, chain);
    check_iovecs(memory, in.peek_iovecs(budget), budget);
    for (size_t i = 0; in.remaining() > 0 && budget > 0; ++i) {
        const size_t want = std::min<uint64_t>(kPieces[i % kPieces.size()], budget);
        const uint64_t before = in.remaining();
        const size_t n = in.read(std::span(buf).first(want));
        fuzz_check(n == std::min<uint64_t>(want, before) && in.remaining() == before - n, "read consumes what it returns");
        budget -= n;
    }
    const uint64_t left = in.remaining();
    bool threw = false;
    try {
        (void)in.read_obj<uint64_t>("fuzz");
    } catch (const QueueError&) {
        threw = true;
    }
    fuzz_check(threw == (left < 8), "read_obj throws exactly when too few bytes remain");
    const uint64_t to_skip = in.remaining();
    fuzz_check(in.skip(to_skip + 1) == to_skip && in.remaining() == 0, "skip stops at the end");

    ChainWriter out(memory, chain);
    for (size_t i = 0; out.remaining() > 0 && budget > 0; ++i) {
        const size_t want = std::min<uint64_t>(kPieces[i % kPieces.size()], budget);
        if (i % 3 == 2) {  // direct fill, as readv or io_uring would
            const std::vector<iovec> iov = out.peek_iovecs(want);
            check_iovecs(memory, iov, want);
            uint64_t n = 0;
            for (const iovec& v : iov) {
                std::fill_n(static_cast<uint8_t*>(v.iov_base), v.iov_len, uint8_t{0xa5});
                n += v.iov_len;
            }
            out.advance(n);
            budget -= n;
        } else {
            budget -= out.write(std::span(buf).first(want));
        }
    }
    fuzz_check(out.written() + out.remaining() == chain.writable_bytes, "written + remaining = writable bytes");
    const uint64_t room = out.remaining();
    threw = false;
    try {
        out.write_obj(uint32_t{0}, "fuzz");
    } catch (const QueueError&) {
        threw = true;
    }
    fuzz_check(threw == (room < 4), "write_obj throws exactly when too little room remains");
    // Zero what was written, segment by segment, in chain order.
    uint64_t to_clear = out.written();
    for (const BufferSegment& s : chain.writable) {
        if (to_clear == 0) break;
        const uint64_t n = std::min<uint64_t>(s.len, to_clear);
        written.add(s.addr, n);
        to_clear -= n;
    }
    return static_cast<uint32_t>(out.written());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static GuestMemory memory = GuestMemory::create(kRamBytes);
    static uint64_t inputs = 0;
    if (++inputs % kDiscardEvery == 0) fuzz::discard_guest_ram(memory);

    FuzzInput in(data, size);
    WrittenRanges written(memory);
    Virtqueue queue(0, kMaxQueueSize);
    QueueState& s = queue.state();
    const uint8_t size_code = in.u8();
    s.size = (size_code & 0x80) ? in.u16() : static_cast<uint16_t>(1u << (size_code % 11));
    const uint8_t features = in.u8();
    s.event_idx = (features & 1) != 0;
    s.indirect = (features & 2) != 0;
    s.next_avail = s.next_used = s.signalled_used = in.u16();
    s.desc_table = read_addr(in);
    s.avail_ring = read_addr(in);
    s.used_ring = read_addr(in);
    try {
        queue.check_layout(memory);
    } catch (const QueueError&) {
        return 0;  // the transport never makes such a queue ready
    }
    s.ready = true;

    for (uint8_t n = in.u8(); n > 0 && !in.empty(); --n) {
        const uint64_t gpa = read_addr(in);
        const uint16_t len = in.u16();
        written.write(Gpa(gpa), in.bytes(len));
    }
    for (uint8_t n = in.u8(); n > 0 && !in.empty(); --n) {
        const uint64_t gpa = read_addr(in);
        const uint16_t entries = in.u16();
        for (uint32_t i = 0; i < entries && !in.empty(); ++i) written.write(Gpa(gpa + 16ull * i), read_desc(in));
    }
    const uint16_t descs = std::min(in.u16(), s.size);
    for (uint16_t i = 0; i < descs; ++i) written.write(Gpa(s.desc_table + 16ull * i), read_desc(in));
    const uint16_t avail_idx = static_cast<uint16_t>(s.next_avail + in.u16());
    written.write(Gpa(s.avail_ring), in.u16());                  // flags
    written.write(Gpa(s.avail_ring + 4 + 2ull * s.size), in.u16());  // used_event
    const uint16_t heads = std::min(in.u16(), s.size);
    for (uint16_t i = 0; i < heads; ++i)
        written.write(Gpa(s.avail_ring + 4 + 2ull * ((s.next_avail + i) % s.size)), in.u16());
    written.write(Gpa(s.avail_ring + 2), avail_idx);
    const uint8_t after = in.u8();
    // push_used, needs_interrupt and enable_notification write the used ring.
    written.add(Gpa(s.used_ring), 6 + 8ull * s.size);

    uint64_t budget = kIoBudget;
    for (uint32_t popped = 0;; ++popped) {
        std::optional<DescriptorChain> chain;
        try {
            chain = queue.pop(memory);
        } catch (const QueueError&) {
            break;  // the device would now be failed until reset
        }
        if (!chain) break;
        fuzz_check(popped < s.size, "no more chains than the ring holds");
        check_chain(memory, queue, *chain);
        const uint16_t used_before = s.next_used;
        queue.push_used(memory, chain->head, exercise(memory, *chain, budget, written));
        fuzz_check(s.next_used == static_cast<uint16_t>(used_before + 1), "push_used advances the used index");
        fuzz_check(memory.read<uint16_t>(Gpa(s.used_ring + 2)) == s.next_used, "used.idx published");
    }
    (void)queue.needs_interrupt(memory);
    if (after & 1) (void)queue.enable_notification(memory, (after & 2) != 0);
    return 0;
}
