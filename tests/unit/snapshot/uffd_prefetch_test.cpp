// The uffd restore backend's prefetch (snapshot/uffd_backend.hpp, prefetch_list.hpp)
// without KVM: a restore records the pages it faults on first, in order; the next
// restore of the same layers copies exactly those in before anyone touches them, so
// touching them then faults no more; a damaged or foreign list is ignored, with why.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>
#include <vector>

#include "snapshot/memory_layer.hpp"
#include "snapshot/prefetch_list.hpp"
#include "snapshot/uffd_backend.hpp"
#include "tests/support/temp_dir.hpp"
#include "vmm/guest_memory.hpp"

using namespace nanovm;
using namespace nanovm::snapshot;

namespace {

constexpr uint64_t kRam = 8 * MiB;  // 2048 pages

uint64_t value_at(uint64_t page) { return 0x5a5a0000 + page; }

}  // namespace

TEST_CASE("uffd restore: the first faults are recorded in order, and the next restore prefetches them",
          "[snapshot][unit][uffd]") {
    test::TempDir dir("prefetch");
    const std::string layer = dir.file("memory.layer");
    const std::string list = dir.file(kPrefetchFileName);
    {
        GuestMemory source = GuestMemory::create(kRam);
        for (uint64_t p = 0; p < kRam / kPageSize; p += 3) source.write<uint64_t>(Gpa(p * kPageSize), value_at(p));
        write_layer(source, nonzero_pages(source), layer, std::nullopt);
    }
    const std::vector<uint64_t> touched{1500, 9, 600, 30};  // each outside the others' 16-page runs
    {
        GuestMemory memory = GuestMemory::create(kRam);
        UffdServer server(memory, LayerChain::open(layer), {}, UffdPrefetch{{}, list});
        for (uint64_t p : touched) CHECK(memory.read<uint64_t>(Gpa(p * kPageSize)) == value_at(p));
        CHECK(server.faults_served() == touched.size());
    }
    std::string why;
    const std::vector<uint32_t> recorded = read_prefetch_list(list, kRam / kPageSize, why);
    CHECK(why.empty());
    CHECK(recorded == std::vector<uint32_t>{1500, 9, 600, 30});

    {
        GuestMemory memory = GuestMemory::create(kRam);
        UffdServer server(memory, LayerChain::open(layer), {}, UffdPrefetch{recorded, list});
        for (int i = 0; i < 500 && !server.prefetch_done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        REQUIRE(server.prefetch_done());
        CHECK(server.pages_prefetched() == 4);
        for (uint64_t p : touched) CHECK(memory.read<uint64_t>(Gpa(p * kPageSize)) == value_at(p));
        CHECK(server.faults_served() == 0);  // all there before the first touch
        CHECK(memory.read<uint64_t>(Gpa(1200 * kPageSize)) == value_at(1200));  // others still fault in
        CHECK(server.faults_served() == 1);
    }
    // A restore that prefetched keeps the list it was given (it saw no faults to record).
    CHECK(read_prefetch_list(list, kRam / kPageSize, why) == recorded);
}

TEST_CASE("a damaged or foreign prefetch list is ignored, saying why", "[snapshot][unit][uffd]") {
    test::TempDir dir("prefetch-bad");
    const std::string list = dir.file(kPrefetchFileName);
    std::string why;
    CHECK(read_prefetch_list(list, 2048, why).empty());
    CHECK(why.empty());  // missing: simply no prefetch
    write_prefetch_list(list, 2048, {1, 2, 3});
    CHECK(read_prefetch_list(list, 4096, why).empty());
    CHECK_THAT(why, Catch::Contains("recorded for 2048 pages"));
    write_prefetch_list(list, 2048, {1, 2, 4000});
    CHECK(read_prefetch_list(list, 2048, why).empty());
    CHECK_THAT(why, Catch::Contains("outside"));
    write_prefetch_list(list, 2048, {7, 8});
    {
        std::FILE* f = std::fopen(list.c_str(), "r+b");
        REQUIRE(f);
        std::fseek(f, 32, SEEK_SET);
        std::fputc(9, f);  // page 7 -> 9: the checksum no longer matches
        std::fclose(f);
    }
    CHECK(read_prefetch_list(list, 2048, why).empty());
    CHECK_THAT(why, Catch::Contains("damaged"));
}

TEST_CASE("uffd prefetch: each listed page brings its fault's run, from one source, before the constructor returns",
          "[snapshot][unit][uffd]") {
    test::TempDir dir("prefetch-runs");
    const std::string layer = dir.file("memory.layer");
    {
        GuestMemory source = GuestMemory::create(kRam);
        for (uint64_t p = 0; p < 1024; ++p) source.write<uint64_t>(Gpa(p * kPageSize), value_at(p));  // above: zeros
        write_layer(source, nonzero_pages(source), layer, std::nullopt);
    }
    GuestMemory memory = GuestMemory::create(kRam);
    // 5 and 10: pages 5-25 from the layer (10's run reaches past 5's); 1020: 1020-1023
    // (the layer ends there); 1500: 1500-1515, zeros; 2040: 2040-2047 (the RAM ends).
    UffdServer server(memory, LayerChain::open(layer), {}, UffdPrefetch{{1500, 5, 2040, 10, 1020}, {}});
    CHECK(server.prefetch_done());
    CHECK(server.pages_prefetched() == 5);
    CHECK(server.pages_copied() == 21 + 4);
    CHECK(server.pages_zeroed() == 16 + 8);
    for (uint64_t p = 5; p <= 25; ++p) CHECK(memory.read<uint64_t>(Gpa(p * kPageSize)) == value_at(p));
    for (uint64_t p = 1020; p <= 1023; ++p) CHECK(memory.read<uint64_t>(Gpa(p * kPageSize)) == value_at(p));
    CHECK(memory.read<uint64_t>(Gpa(1515 * kPageSize)) == 0);
    CHECK(memory.read<uint64_t>(Gpa(2047 * kPageSize)) == 0);
    CHECK(server.faults_served() == 0);
    CHECK(memory.read<uint64_t>(Gpa(26 * kPageSize)) == value_at(26));  // past the runs: faults in
    CHECK(memory.read<uint64_t>(Gpa(1024 * kPageSize)) == 0);
    CHECK(server.faults_served() == 2);
}
