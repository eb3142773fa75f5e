// File requests through a nanovm-agent host process: large transfers, atomic
// writes, errno names, list/stat/mkdir/remove/chmod.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>

#include "tests/agent/agent_fixture.hpp"

using namespace nanovm::agent;
using namespace nanovm::agent::testing;

namespace {

// The errno name of the AgentError `fn` throws ("" if none).
template <typename Fn>
std::string error_of(Fn&& fn) {
    try {
        fn();
    } catch (const AgentError& e) {
        return e.errno_name();
    }
    return "";
}

bool host_exists(const std::string& path) {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace

TEST_CASE("a 256 MiB file is written and read back with equal sha256", "[agent][files][large]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    const uint64_t size = 256ull << 20;
    const std::string path = agent.dir() + "/big.bin";

    Sha256 sent_sha;
    uint64_t offset = 0;
    double start = now_seconds();
    const uint64_t written = client.write_file(path, [&](char* buf, size_t max) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(max & ~size_t{7}, size - offset));
        fill_pattern(buf, n, 7, offset);
        sent_sha.update(std::string_view(buf, n));
        offset += n;
        return n;
    });
    const double write_s = now_seconds() - start;
    CHECK(written == size);
    const std::string sent = sent_sha.hex();
    CHECK(sha256_file(path) == sent);

    Sha256 got_sha;
    start = now_seconds();
    const uint64_t read = client.read_file(path, [&](std::string_view chunk) { got_sha.update(chunk); });
    const double read_s = now_seconds() - start;
    CHECK(read == size);
    CHECK(got_sha.hex() == sent);
    std::printf("agent: 256 MiB file write %.0f MB/s, read %.0f MB/s (Unix socket, sha256 included)\n",
                size / 1e6 / write_s, size / 1e6 / read_s);
}

TEST_CASE("upload and download copy host files both ways", "[agent][files]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    const std::string src = agent.dir() + "/src.bin";
    write_pattern_file(src, 3'000'008, 9);
    ::chmod(src.c_str(), 0751);
    CHECK(client.upload(src, agent.dir() + "/guest.bin") == 3'000'008);
    CHECK(client.stat(agent.dir() + "/guest.bin").mode == 0751);
    CHECK(client.download(agent.dir() + "/guest.bin", agent.dir() + "/back.bin") == 3'000'008);
    CHECK(sha256_file(agent.dir() + "/back.bin") == sha256_file(src));
    // Empty files too.
    client.write_file(agent.dir() + "/empty", "");
    CHECK(client.read_file(agent.dir() + "/empty").empty());
}

TEST_CASE("a write replaces the file whole with the given mode, through a temp file", "[agent][files]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    const std::string path = agent.dir() + "/f.txt";
    client.write_file(path, "old contents, longer than the new ones\n");
    client.write_file(path, "new\n", WriteOptions{0600, true});
    CHECK(client.read_file(path) == "new\n");
    const proto::FileInfo info = client.stat(path);
    CHECK(info.mode == 0600);
    CHECK(info.size == 4);
    CHECK(info.type == proto::FileType::kRegular);
    // No temp file left behind.
    CHECK(client.list(agent.dir()).size() == 2);  // agent.sock and f.txt
}

TEST_CASE("errors carry errno names", "[agent][files]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    const std::string d = agent.dir();
    client.write_file(d + "/file", "x");
    client.mkdir(d + "/dir");
    client.write_file(d + "/dir/inner", "y");

    CHECK(error_of([&] { client.read_file(d + "/missing"); }) == "ENOENT");
    CHECK(error_of([&] { client.read_file(d + "/dir"); }) == "EISDIR");
    CHECK(error_of([&] { client.read_file("/dev/null"); }) == "EINVAL");  // not a regular file
    CHECK(error_of([&] { client.write_file(d + "/file/sub", "z"); }) == "ENOTDIR");
    CHECK(error_of([&] { client.write_file(d + "/missing/sub", "z"); }) == "ENOENT");
    CHECK(error_of([&] { client.write_file(d + "/dir", "z"); }) == "EISDIR");
    CHECK(error_of([&] { client.stat(d + "/missing"); }) == "ENOENT");
    CHECK(error_of([&] { client.list(d + "/file"); }) == "ENOTDIR");
    CHECK(error_of([&] { client.mkdir(d + "/a/b", 0755, false); }) == "ENOENT");
    CHECK(error_of([&] { client.mkdir(d + "/file", 0755, true); }) == "EEXIST");
    CHECK(error_of([&] { client.mkdir(d + "/file/x", 0755, true); }) == "ENOTDIR");
    CHECK(error_of([&] { client.remove(d + "/dir"); }) == "ENOTEMPTY");
    CHECK(error_of([&] { client.remove(d + "/missing"); }) == "ENOENT");
    CHECK(error_of([&] { client.chmod(d + "/missing", 0644); }) == "ENOENT");
    if (::geteuid() == 0) {
        // Root ignores permission bits, but not the user switch: EACCES as nobody.
        Command c = Command::program({"cat", d + "/file"});
        client.chmod(d + "/file", 0600);
        c.uid = 65534;
        CHECK(client.run(c).status.value != 0);
    }
    // Each error ended its request only: the connection serves on.
    CHECK(client.read_file(d + "/file") == "x");
}

TEST_CASE("a failed write leaves the destination untouched and no temp file", "[agent][files]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    const std::string path = agent.dir() + "/keep.txt";
    client.write_file(path, "original");
    bool thrown = false;
    int calls = 0;
    try {
        client.write_file(path, [&](char* buf, size_t max) -> size_t {
            if (++calls == 3) throw std::runtime_error("source failed");
            std::memset(buf, 'z', max);
            return max;
        });
    } catch (const std::runtime_error&) {
        thrown = true;
    }
    CHECK(thrown);
    CHECK(client.read_file(path) == "original");
    // The CANCEL reached the agent: its temp file is gone (give it the round trip).
    client.ping();
    const auto entries = client.list(agent.dir());
    CHECK(entries.size() == 2);  // agent.sock, keep.txt
}

TEST_CASE("list, stat, mkdir -p, remove -r and chmod", "[agent][files]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    const std::string d = agent.dir() + "/tree";
    client.mkdir(d + "/a/b/c", 0750, true);
    client.mkdir(d + "/a/b/c", 0750, true);  // -p: existing is fine
    CHECK(client.stat(d + "/a/b/c").type == proto::FileType::kDirectory);
    CHECK(client.stat(d + "/a/b/c").mode == 0750);
    client.write_file(d + "/a/f1", "12345");
    REQUIRE(::symlink("f1", (d + "/a/link").c_str()) == 0);

    auto entries = client.list(d + "/a");
    std::sort(entries.begin(), entries.end(), [](auto& x, auto& y) { return x.name < y.name; });
    REQUIRE(entries.size() == 3);
    CHECK(entries[0].name == "b");
    CHECK(entries[0].info.type == proto::FileType::kDirectory);
    CHECK(entries[1].name == "f1");
    CHECK(entries[1].info.size == 5);
    CHECK(entries[2].name == "link");
    CHECK(entries[2].info.type == proto::FileType::kSymlink);
    CHECK(client.stat(d + "/a/link", true).type == proto::FileType::kRegular);
    CHECK(client.stat(d + "/a/link", false).type == proto::FileType::kSymlink);

    client.chmod(d + "/a/f1", 0704);
    CHECK(client.stat(d + "/a/f1").mode == 0704);

    client.remove(d + "/a/link");
    CHECK_FALSE(host_exists(d + "/a/link"));
    CHECK(host_exists(d + "/a/f1"));
    client.remove(d + "/a/b/c");  // an empty directory without -r
    CHECK_FALSE(host_exists(d + "/a/b/c"));
    client.remove(d, true);
    CHECK_FALSE(host_exists(d));
}

TEST_CASE("a large directory is listed in several batches", "[agent][files]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    const std::string d = agent.dir() + "/many";
    client.mkdir(d);
    REQUIRE(client.run(Command::shell_command("cd " + d + " && i=0; while [ $i -lt 3000 ]; do : > "
                                              "file-with-a-long-name-to-fill-batches-$i; i=$((i+1)); done"))
                .status.success());
    CHECK(client.list(d).size() == 3000);  // ~3000 * 80 bytes: four DIR_ENTRIES frames
}
