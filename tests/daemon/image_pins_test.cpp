// Pinned root images (api/daemon/store/image_pins.hpp): the digest is SHA-256 of the
// whole file (sparse files included), two sources with the same bytes share one
// pin, a repointed source gets a new pin while the old one stays, a pin survives
// the removal of its source, and the digest cache survives a restart of the store;
// collect() removes exactly the pins no record names, once recorded() ended their
// hold (or its grace period passed), and leftover .partial files.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "api/daemon/store/image_pins.hpp"
#include "api/daemon/store/store.hpp"
#include "tests/support/temp_dir.hpp"
#include "vmm/fd.hpp"

namespace {

using namespace nanovm;
using namespace nanovm::daemon::store;
using nanovm::test::TempDir;
namespace fs = std::filesystem;

constexpr const char* kAbc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";  // FIPS 180-2 B.1
// hashlib.sha256(b'\0' * (3 << 20) + b'image two' + b'\0' * (1 << 20))
constexpr const char* kSparse = "5adccdb01ed56472cd1ae0f0b5a6c57cd5fb5bda7bc1a4cb986aae4108cc4539";

void write_file(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<std::string> names(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

TEST_CASE("image pins: SHA-256 of whole files, holes included") {
    TempDir tmp("pins");
    write_file(tmp.file("abc"), "abc");
    CHECK(sha256_file(tmp.file("abc")) == kAbc);
    {
        Fd fd(::open(tmp.file("sparse").c_str(), O_RDWR | O_CREAT, 0600));
        REQUIRE(::pwrite(fd.get(), "image two", 9, 3 << 20) == 9);
        REQUIRE(::ftruncate(fd.get(), (3 << 20) + 9 + (1 << 20)) == 0);
    }
    CHECK(sha256_file(tmp.file("sparse")) == kSparse);
    CHECK(is_digest(kAbc));
    CHECK_FALSE(is_digest("ABC"));
    CHECK_FALSE(is_digest(std::string(64, 'g')));
}

TEST_CASE("image pins: two images with the same bytes share one pin; a repointed source gets its own") {
    TempDir tmp("pins");
    const std::string images = tmp.file("state/images");
    fs::create_directories(tmp.file("cache/default-1"));
    fs::create_directories(tmp.file("cache/other"));
    fs::create_directories(tmp.file("state"));
    write_file(tmp.file("cache/default-1/disk.ext4"), "abc");
    write_file(tmp.file("cache/other/disk.ext4"), "abc");
    fs::create_directory_symlink("default-1", tmp.file("cache/default"));
    std::string first_path;
    {
        Store store(tmp.file("state/store.db"));
        ImagePins pins(store, images);
        const ImagePin a = pins.pin(tmp.file("cache/default/disk.ext4"));
        const ImagePin b = pins.pin(tmp.file("cache/other/disk.ext4"));
        CHECK(a.digest == kAbc);
        CHECK(b.digest == kAbc);
        CHECK(a.path == images + "/" + kAbc);
        CHECK(b.path == a.path);
        CHECK(names(images) == std::vector<std::string>{kAbc});  // one file, no partial left
        // The digest cache beside the image: digest, size, mtime.
        CHECK(read_file(tmp.file("cache/default-1/disk.ext4.sha256")).rfind(std::string(kAbc) + " 3 ", 0) == 0);
        CHECK(pins.path_of(kAbc) == a.path);
        CHECK(pins.path_of(std::string(64, '0')).empty());
        CHECK(pins.path_of("../store.db").empty());
        first_path = a.path;

        // tools/rootfs/build repoints the name at a new image: a new pin; the old stays as it was.
        fs::create_directories(tmp.file("cache/default-2"));
        write_file(tmp.file("cache/default-2/disk.ext4"), "another image");
        fs::remove(tmp.file("cache/default"));
        fs::create_directory_symlink("default-2", tmp.file("cache/default"));
        const ImagePin c = pins.pin(tmp.file("cache/default/disk.ext4"));
        CHECK(c.digest != kAbc);
        CHECK(read_file(c.path) == "another image");
        CHECK(read_file(first_path) == "abc");
        CHECK(names(images).size() == 2);
    }
    // The old image's directory goes (the cache keeps 3): the pin keeps its bytes.
    fs::remove_all(tmp.file("cache/default-1"));
    CHECK(read_file(first_path) == "abc");
    // A new store on the same state: the cached digest is used, the pin found.
    Store store(tmp.file("state/store.db"));
    ImagePins pins(store, images);
    CHECK(store.image_source_digest(ImageSource{fs::canonical(tmp.file("cache/other/disk.ext4")).string(), 0, 0, 0, 0}) ==
          std::nullopt);  // identity must match, not just the path
    const ImagePin again = pins.pin(tmp.file("cache/other/disk.ext4"));
    CHECK(again.digest == kAbc);
    CHECK(names(images).size() == 2);
    CHECK_THROWS_WITH(pins.pin(tmp.file("cache/missing")), Catch::Contains("root image"));
    CHECK_THROWS_WITH(pins.pin(tmp.file("cache")), Catch::Contains("not a regular file"));
}

TEST_CASE("image pins: collect removes a pin once no sandbox, snapshot, template or archive names it") {
    TempDir tmp("pins");
    const std::string images = tmp.file("state/images");
    fs::create_directories(tmp.file("cache"));
    fs::create_directories(tmp.file("state"));
    Store store(tmp.file("state/store.db"));
    ImagePins pins(store, images);
    std::map<std::string, std::string> digest;  // by what names it
    for (const std::string name : {"sandbox", "snapshot", "template", "archive", "nobody"}) {
        write_file(tmp.file("cache/" + name + ".ext4"), "image of the " + name);
        digest[name] = pins.pin(tmp.file("cache/" + name + ".ext4")).digest;
    }
    SandboxRecord sb;
    sb.id = "5a1e0000-0000-4000-8000-000000000001";
    sb.state = "running";
    sb.cpus = 1;
    sb.memory_mb = 256;
    sb.image_digest = digest["sandbox"];
    store.put_sandbox(sb);
    SnapshotRecord snap;
    snap.id = "5a1e0000-0000-4000-8000-000000000002";
    snap.sandbox_id = "5a1e0000-0000-4000-8000-00000000dead";  // its sandbox deleted: snapshots stay
    snap.dir = tmp.file("state/snapshots/x");
    snap.state = "ready";
    snap.image_digest = digest["snapshot"];
    store.put_snapshot(snap);
    TemplateRecord t;
    t.name = "auto:default:1x256";
    t.implicit = true;
    t.state = "ready";
    t.image_digest = digest["template"];
    store.put_template(t);
    ArchiveRecord a;
    a.sandbox_id = "5a1e0000-0000-4000-8000-000000000003";
    a.blob = "x.nva";
    a.state = "ready";
    a.image_digest = digest["archive"];
    store.put_archive(a);
    // Left by a daemon killed while pinning; and a file that is not a pin.
    write_file(images + "/.0123456789abcdef.partial", "half an image");
    write_file(images + "/notes.txt", "not a digest");

    // Pinned and not yet recorded (a create between its pin and its record): held.
    CHECK(pins.collect() == std::vector<std::string>{".0123456789abcdef.partial"});  // it goes at once
    CHECK(names(images).size() == 6);  // 5 pins + notes.txt
    for (const std::string name : {"sandbox", "snapshot", "template", "archive"}) pins.recorded(digest[name]);
    CHECK(pins.collect().empty());  // "nobody" is still held: its caller has not recorded it yet
    // Its caller failed before a record (no recorded()): once the grace period is over,
    // the pin no record names goes, the others stay.
    CHECK(pins.collect(std::chrono::milliseconds(0)) == std::vector<std::string>{digest["nobody"]});
    CHECK(pins.path_of(digest["nobody"]).empty());
    CHECK(!pins.path_of(digest["sandbox"]).empty());
    CHECK(read_file(pins.path_of(digest["template"])) == "image of the template");
    CHECK(fs::exists(images + "/notes.txt"));
    CHECK(store.image_digests_in_use().size() == 4);

    // Each record's deletion frees its pin, and only its own.
    store.delete_sandbox(sb.id);
    CHECK(pins.collect() == std::vector<std::string>{digest["sandbox"]});
    store.delete_snapshot(snap.id);
    CHECK(pins.collect() == std::vector<std::string>{digest["snapshot"]});
    store.delete_template(t.name);
    CHECK(pins.collect() == std::vector<std::string>{digest["template"]});
    CHECK(!pins.path_of(digest["archive"]).empty());
    store.delete_archive(a.sandbox_id);
    CHECK(pins.collect() == std::vector<std::string>{digest["archive"]});
    CHECK(names(images) == std::vector<std::string>{"notes.txt"});

    // Pinned again (its digest known to the store's cache): a new pin with the same bytes,
    // held by this ImagePins; a new daemon (a new ImagePins on the same state directory)
    // holds nothing, so it collects it at once.
    const ImagePin again = pins.pin(tmp.file("cache/sandbox.ext4"));
    CHECK(again.digest == digest["sandbox"]);
    CHECK(read_file(again.path) == "image of the sandbox");
    CHECK(pins.collect().empty());
    ImagePins restarted(store, images);
    CHECK(restarted.collect() == std::vector<std::string>{digest["sandbox"]});
    CHECK(names(images) == std::vector<std::string>{"notes.txt"});
}

TEST_CASE("image pins: the pin of an image name's current file stays without a record until the name moves on") {
    // The cache's image name is a symlink (<cache>/rootfs/default/disk.ext4) that
    // tools/rootfs/build repoints; its pin is the next create's, so collect() keeps it
    // while the name resolves to the same unchanged file.
    TempDir tmp("pins-current");
    const std::string images = tmp.file("state/images");
    fs::create_directories(tmp.file("cache/default-a"));
    fs::create_directories(tmp.file("cache/default-b"));
    fs::create_directories(tmp.file("state"));
    write_file(tmp.file("cache/default-a/disk.ext4"), "image a");
    write_file(tmp.file("cache/default-b/disk.ext4"), "image b");
    const std::string name = tmp.file("cache/default.ext4");
    fs::create_symlink(tmp.file("cache/default-a/disk.ext4"), name);
    Store store(tmp.file("state/store.db"));
    ImagePins pins(store, images, [&] { return std::vector<std::string>{name, tmp.file("cache/missing.ext4")}; });

    const std::string a = pins.pin(name).digest;
    pins.recorded(a);  // a sandbox's record named it, and the sandbox was deleted
    CHECK(pins.collect().empty());
    CHECK(!pins.path_of(a).empty());
    // A new daemon on the same state directory keeps it too (the store knows the source).
    ImagePins restarted(store, images, [&] { return std::vector<std::string>{name}; });
    CHECK(restarted.collect().empty());

    // The name is repointed to another image: the old pin goes, the new one stays.
    fs::remove(name);
    fs::create_symlink(tmp.file("cache/default-b/disk.ext4"), name);
    const std::string b = pins.pin(name).digest;
    pins.recorded(b);
    CHECK(b != a);
    CHECK(pins.collect() == std::vector<std::string>{a});
    CHECK(!pins.path_of(b).empty());

    // The file it names changes in place (size and mtime): its pin is no longer current.
    write_file(tmp.file("cache/default-b/disk.ext4"), "image b, rebuilt in place");
    CHECK(pins.collect() == std::vector<std::string>{b});
    CHECK(names(images).empty());
}
