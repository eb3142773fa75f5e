// Durable snapshot directories without KVM (snapshot/snapshot_writer.hpp): the
// manifest lists every part and is written last; a process SIGKILLed at any step of
// a snapshot (NANOVM_TEST_SNAPSHOT_STALL) leaves no durable-looking snapshot, even
// over an older complete one; a flipped byte in any part is refused naming it.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "snapshot/manifest.hpp"
#include "snapshot/memory_layer.hpp"
#include "snapshot/snapshot_error.hpp"
#include "snapshot/snapshot_writer.hpp"
#include "snapshot/state_file.hpp"
#include "snapshot/test_stall.hpp"
#include "tests/support/temp_dir.hpp"
#include "vmm/fd.hpp"
#include "vmm/guest_memory.hpp"

using namespace nanovm;
using namespace nanovm::snapshot;

namespace {

constexpr uint64_t kRam = 8 * MiB;

// A small vm.state in the real format (one machine section of made-up bytes).
std::vector<uint8_t> some_state() {
    StateWriter w;
    const std::vector<uint8_t> payload(64, 0x11);
    w.add(SectionType::machine, 0, payload);
    return w.finish();
}

GuestMemory patterned_memory() {
    GuestMemory memory = GuestMemory::create(kRam);
    for (uint64_t p = 0; p < kRam / kPageSize; p += 3)
        memory.write<uint64_t>(Gpa(p * kPageSize + 8), 0x1000 + p);  // every third page non-zero
    return memory;
}

SnapshotContent full_content(const GuestMemory& memory) {
    SnapshotContent c;
    c.state = some_state();
    c.pages = populated_pages(memory);
    c.drop_zero_pages = true;
    return c;
}

void flip_byte(const std::string& path, uint64_t offset) {
    Fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    REQUIRE(fd.valid());
    uint8_t b = 0;
    REQUIRE(::pread(fd.get(), &b, 1, static_cast<off_t>(offset)) == 1);
    b ^= 0x04;
    REQUIRE(::pwrite(fd.get(), &b, 1, static_cast<off_t>(offset)) == 1);
}

// Runs a background snapshot of patterned memory into `dir` in a child process
// stalled at `step`, SIGKILLs it there, and returns what the child logged.
std::string kill_at(const std::string& dir, const std::string& step) {
    int pipefd[2];
    REQUIRE(::pipe2(pipefd, O_CLOEXEC) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::dup2(pipefd[1], 2);
        ::setenv(kTestStallEnv, step.c_str(), 1);
        try {
            GuestMemory memory = patterned_memory();
            PendingSnapshot s(dir, memory, full_content(memory), CopyMode::background);
            s.wait_durable();
        } catch (...) {
        }
        ::_exit(3);  // the stall never returns; getting here is a failure
    }
    ::close(pipefd[1]);
    std::string log;
    const std::string want = "test stall at " + step;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (log.find(want) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
        pollfd p{pipefd[0], POLLIN, 0};
        if (::poll(&p, 1, 1000) <= 0) continue;
        char buf[512];
        const ssize_t n = ::read(pipefd[0], buf, sizeof(buf));
        if (n <= 0) break;
        log.append(buf, static_cast<size_t>(n));
    }
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ::close(pipefd[0]);
    CHECK(WIFSIGNALED(status));
    return log;
}

}  // namespace

TEST_CASE("a snapshot directory lists vm.state and memory.layer in a manifest written last", "[snapshot][durable]") {
    for (const CopyMode mode : {CopyMode::in_pause, CopyMode::background}) {
        test::TempDir dir("durable");
        GuestMemory memory = patterned_memory();
        PendingSnapshot s(dir.file("s"), memory, full_content(memory), mode);
        const SnapshotStats& stats = s.wait_durable();
        CHECK(s.durable());
        CHECK(stats.present_pages == (kRam / kPageSize + 2) / 3);
        CHECK(stats.durable_ms > 0);
        const Manifest m = read_manifest(dir.file("s"));
        REQUIRE(m.parts.size() == 2);
        CHECK(m.parts[0].name == kStateFileName);
        CHECK(m.parts[1].name == kLayerFileName);
        CHECK(m.parts[1].bytes == std::filesystem::file_size(dir.file("s/memory.layer")));
        CHECK_NOTHROW(check_parts(dir.file("s"), m, PartCheck::full));
        CHECK(!std::filesystem::exists(dir.file("s/manifest.tmp")));
    }
}

TEST_CASE("SIGKILL at any step of a snapshot leaves no durable-looking snapshot", "[snapshot][durable]") {
    test::TempDir dir("killed");
    for (const char* step : {"state", "layer", "manifest-tmp"}) {
        INFO("stalled at " << step);
        const std::string fresh = dir.file(std::string("fresh-") + step);
        const std::string log = kill_at(fresh, step);
        CHECK(log.find(std::string("test stall at ") + step) != std::string::npos);
        CHECK(std::filesystem::exists(fresh + "/vm.state"));
        CHECK(!is_durable(fresh));
        CHECK_THROWS_WITH(read_manifest(fresh), "incomplete snapshot (no manifest): " + fresh);

        // Over an older complete snapshot: its manifest goes first, so the mix of
        // old and new parts is not taken for a snapshot either.
        const std::string over = dir.file(std::string("over-") + step);
        {
            GuestMemory memory = patterned_memory();
            PendingSnapshot(over, memory, full_content(memory), CopyMode::in_pause).wait_durable();
        }
        REQUIRE(is_durable(over));
        kill_at(over, step);
        CHECK(!is_durable(over));
        CHECK_THROWS_WITH(read_manifest(over), "incomplete snapshot (no manifest): " + over);
    }
}

TEST_CASE("a flipped byte in any part of a snapshot is refused naming the part", "[snapshot][durable]") {
    test::TempDir dir("flip");
    const std::string good = dir.file("good");
    {
        GuestMemory memory = patterned_memory();
        PendingSnapshot(good, memory, full_content(memory), CopyMode::background).wait_durable();
    }
    const uint64_t layer_bytes = std::filesystem::file_size(good + "/memory.layer");
    struct Case {
        const char* part;
        uint64_t offset;
    };
    const Case cases[] = {
        {"vm.state", 3},                                  // file header
        {"vm.state", 40},                                 // section payload
        {"memory.layer", 100},                            // layer header
        {"memory.layer", kLayerDataOffset + 3 * kPageSize + 8},   // a data page
        {"memory.layer", kLayerDataOffset + 1 * kPageSize + 100}, // a hole (absent page)
        {"memory.layer", layer_bytes - 2},                // the page CRC table
    };
    for (const Case& c : cases) {
        const std::string bad = dir.file(std::string("bad-") + c.part + "-" + std::to_string(c.offset));
        std::filesystem::copy(good, bad);
        flip_byte(bad + "/" + c.part, c.offset);
        INFO(c.part << " byte " << c.offset);
        const Manifest m = read_manifest(bad);
        CHECK_NOTHROW(check_parts(bad, m, PartCheck::sizes));  // same sizes: only the checksum can tell
        CHECK_THROWS_WITH(check_parts(bad, m, PartCheck::full),
                          Catch::StartsWith(bad + "/" + c.part + ": part checksum mismatch"));
    }
    // The manifest itself.
    const std::string bad = dir.file("bad-manifest");
    std::filesystem::copy(good, bad);
    flip_byte(bad + "/manifest", 30);
    CHECK_THROWS_WITH(read_manifest(bad), Catch::StartsWith(bad + "/manifest: line "));
    CHECK(!is_durable(bad));
}
