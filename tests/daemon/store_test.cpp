// The daemon's store (api/daemon/store/): records, migrations, and the reference
// counts that keep a snapshot's chain alive over real layer files, for every order
// of deleting sandboxes and snapshots.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "api/daemon/store/file_refs.hpp"
#include "api/daemon/store/store.hpp"
#include "devices/virtio/blk/disk_layer.hpp"
#include "snapshot/manifest.hpp"
#include "tests/support/temp_dir.hpp"
#include "vmm/fd.hpp"

namespace {

using namespace nanovm;
using namespace nanovm::daemon::store;
using nanovm::test::TempDir;
namespace fs = std::filesystem;

constexpr uint64_t kDiskBytes = 1 << 20;

// A layer file at `path` over `parent` (a plain name: a file beside it; absolute:
// elsewhere; "" : a raw base of its own).
void make_layer(const std::string& path, const std::string& parent) {
    virtio::blk::ParentRef ref;
    if (parent.empty()) {
        ref.kind = virtio::blk::ParentKind::none;
    } else {
        ref.kind = virtio::blk::ParentKind::raw;
        ref.path = parent;
        ref.raw_bytes = kDiskBytes;
    }
    virtio::blk::LayerHeader header;
    virtio::blk::create_layer_file(path, kDiskBytes, ref, header);
}

void make_raw(const std::string& path) {
    std::ofstream(path) << "raw disk";
    fs::resize_file(path, kDiskBytes);
}

// The daemon's bookkeeping of sandboxes and snapshots over real files, as the
// manager does it: a sandbox is a VM directory whose top layer sits over its own raw
// disk, or over a file of a snapshot or fork base; a snapshot hard-links the
// sandbox's frozen files into its own directory.
struct World {
    TempDir tmp;
    std::string state = tmp.path();
    Store store{state + "/store.db"};
    std::map<std::string, std::string> dirs;       // resource name -> directory
    std::map<std::string, std::string> tops;       // sandbox -> its frozen file (what a snapshot links)
    std::map<std::string, std::string> kinds;      // resource name -> vm, snapshot, fork

    // A sandbox booted from an image: a raw disk.
    void boot(const std::string& name) {
        const std::string dir = state + "/vms/" + name;
        fs::create_directories(dir);
        make_raw(dir + "/disk.ext4");
        dirs[name] = dir;
        tops[name] = dir + "/disk.ext4";
        kinds[name] = "vm";
        track_dir(store, dir, "vm", name);
    }
    // A sandbox whose disk is a layer over `source`'s file (a snapshot or fork base).
    void restore(const std::string& name, const std::string& source) {
        const std::string dir = state + "/vms/" + name;
        fs::create_directories(dir);
        make_layer(dir + "/top.layer", tops.at(source));
        dirs[name] = dir;
        tops[name] = dir + "/top.layer";
        kinds[name] = "vm";
        track_dir(store, dir, "vm", name);
    }
    // A snapshot (or, with kind "fork", a fork base) of sandbox `of`: its frozen file
    // hard-linked in; the sandbox goes on over a new top layer above it.
    void snapshot(const std::string& name, const std::string& of, const std::string& kind = "snapshot") {
        const std::string dir = state + (kind == "fork" ? "/forks/" : "/snapshots/") + name;
        fs::create_directories(dir);
        const std::string frozen = tops.at(of);
        const std::string linked = dir + "/" + fs::path(frozen).filename().string();
        REQUIRE(::link(frozen.c_str(), linked.c_str()) == 0);
        dirs[name] = dir;
        tops[name] = linked;
        kinds[name] = kind;
        track_dir(store, dir, kind, kind == "fork" ? "" : name);
        // The sandbox's new top, over the frozen file (by its plain name).
        const std::string top = dirs.at(of) + "/top-" + name + ".layer";
        make_layer(top, fs::path(frozen).filename().string());
        tops[of] = top;
    }
    void remove(const std::string& name) {
        release_and_collect(store, dirs.at(name));
        dirs.erase(name);
    }
    // Every kept resource's whole chain is on disk.
    bool chains_intact(std::string& why) const {
        for (const auto& [name, dir] : dirs) {
            std::string path = tops.at(name);
            for (int depth = 0; depth < 64 && !path.empty(); ++depth) {
                if (!fs::exists(path)) {
                    why = name + ": " + path + " is gone";
                    return false;
                }
                Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
                if (!virtio::blk::is_layer_file(fd.get())) break;
                const std::string parent = virtio::blk::read_layer_header(fd.get(), path).parent.path;
                if (parent.empty()) break;
                path = parent.find('/') == std::string::npos ? fs::path(path).parent_path().string() + "/" + parent : parent;
            }
        }
        return true;
    }
    // Directories on disk under vms/, snapshots/ and forks/.
    std::set<std::string> on_disk() const {
        std::set<std::string> out;
        for (const char* sub : {"/vms", "/snapshots", "/forks"}) {
            std::error_code ec;
            for (fs::directory_iterator it(state + sub, ec), end; !ec && it != end; it.increment(ec))
                out.insert(it->path().string());
        }
        return out;
    }
};

TEST_CASE("store: a new store is at the latest schema version, and opening it again migrates nothing", "[daemon][store]") {
    TempDir tmp;
    {
        Store store(tmp.path() + "/store.db");
        CHECK(store.schema_version() == latest_schema_version());
    }
    Store again(tmp.path() + "/store.db");
    CHECK(again.schema_version() == latest_schema_version());
}

TEST_CASE("store: migration 6 gives the sandboxes made before it their template from template_sandboxes",
          "[daemon][store]") {
    TempDir tmp;
    const std::string path = tmp.path() + "/store.db";
    const std::string from_template = "11111111-0000-4000-8000-000000000000";
    const std::string booted = "22222222-0000-4000-8000-000000000000";
    {
        Store store(path);
        SandboxRecord r;
        r.state = "running";
        r.id = from_template;
        store.put_sandbox(r);
        r.id = booted;
        store.put_sandbox(r);
        store.add_template_sandbox("py", from_template);
    }
    {
        // Back to a version-5 store: no template column, as a daemon before it left it.
        Database db(path);
        db.exec("ALTER TABLE sandboxes DROP COLUMN template; UPDATE schema_version SET version = 5");
    }
    Store store(path);
    CHECK(store.schema_version() == latest_schema_version());
    CHECK(store.sandbox(from_template)->template_name == "py");
    CHECK(store.sandbox(booted)->template_name.empty());
}

TEST_CASE("store: a store newer than this build is refused with the versions", "[daemon][store]") {
    TempDir tmp;
    {
        Database db(tmp.path() + "/store.db");
        db.exec("CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (99)");
    }
    CHECK_THROWS_WITH(Store(tmp.path() + "/store.db"), Catch::Contains("schema version 99, newer than"));
}

TEST_CASE("sqlite: a statement goes back to the cache reset, with its bindings cleared; two at once each work",
          "[daemon][store]") {
    TempDir tmp;
    Database db(tmp.path() + "/cache.db");
    db.exec("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'one'), (2, 'two')");
    const std::string sql = "SELECT v FROM t WHERE k = ?";
    {
        Statement q = db.prepare(sql);
        q.bind(1, int64_t{1});
        REQUIRE(q.step());
        CHECK(q.text(0) == "one");
        // The same SQL while the first is in use (a read inside a read): its own statement.
        Statement r = db.prepare(sql);
        r.bind(1, int64_t{2});
        REQUIRE(r.step());
        CHECK(r.text(0) == "two");
        CHECK(q.text(0) == "one");
    }  // both back, one left mid-rows: reset, so its read ends and a write goes through
    db.exec("INSERT INTO t VALUES (3, 'three')");
    Statement again = db.prepare(sql);
    CHECK_FALSE(again.step());  // k = NULL: the old binding was cleared
    Statement three = db.prepare(sql);
    three.bind(1, int64_t{3});
    REQUIRE(three.step());
    CHECK(three.text(0) == "three");
    // A bad statement is refused with its message, and nothing is cached for it.
    CHECK_THROWS_WITH(db.prepare("SELECT v FROM nowhere"), Catch::Contains("no such table"));
}

TEST_CASE("store: a relaxed write is read back like a full one, and the next write is full again",
          "[daemon][store]") {
    TempDir tmp;
    const std::string path = tmp.path() + "/store.db";
    {
        Store store(path);
        SandboxRecord r;
        r.id = "00000000-0000-4000-8000-00000000f11b";
        r.vm_id = "abcdef012345";
        r.state = "running";
        r.cpus = 1;
        r.memory_mb = 256;
        store.put_sandbox(r);
        r.state = "paused";
        store.put_sandbox(r, Sync::relaxed);
        CHECK(store.sandbox(r.id)->state == "paused");
        r.state = "running";
        store.put_sandbox(r, Sync::relaxed);
        r.labels = {{"k", "v"}};
        store.put_sandbox(r);
    }
    // Another connection (a restarted daemon) sees every write: WAL commits are atomic
    // and kept when the process goes, whatever their sync.
    Store again(path);
    const auto r = again.sandbox("00000000-0000-4000-8000-00000000f11b");
    REQUIRE(r);
    CHECK(r->state == "running");
    CHECK(r->labels == std::map<std::string, std::string>{{"k", "v"}});
}

TEST_CASE("store: a state flip writes state, error and updated_ms alone, and never brings a deleted record back",
          "[daemon][store]") {
    TempDir tmp;
    Store store(tmp.path() + "/store.db");
    SandboxRecord r;
    r.id = "00000000-0000-4000-8000-0000000f11b5";
    r.vm_id = "abcdef012345";
    r.state = "running";
    r.error = "an old error";
    r.cpus = 2;
    r.memory_mb = 512;
    r.labels = {{"team", "ml"}};
    r.end_at_ms = 5000;
    r.created_ms = 100;
    r.updated_ms = 200;
    store.put_sandbox(r);
    CHECK(store.set_sandbox_state(r.id, "sleeping", "", 300, Sync::relaxed));
    SandboxRecord want = r;
    want.state = "sleeping";
    want.error = "";
    want.updated_ms = 300;
    CHECK(store.sandbox(r.id) == want);
    CHECK(store.set_sandbox_state(r.id, "running", "", 400, Sync::full));
    CHECK(store.sandbox(r.id)->state == "running");
    CHECK(store.sandbox(r.id)->labels == r.labels);
    store.delete_sandbox(r.id);
    CHECK_FALSE(store.set_sandbox_state(r.id, "paused", "", 500, Sync::relaxed));
    CHECK_FALSE(store.sandbox(r.id).has_value());
}

TEST_CASE("store: sandbox records round-trip, filter by state and label, page by id", "[daemon][store]") {
    TempDir tmp;
    Store store(tmp.path() + "/store.db");
    std::vector<SandboxRecord> made;
    for (int i = 0; i < 5; ++i) {
        SandboxRecord r;
        r.id = "0000000" + std::to_string(i) + "-0000-4000-8000-000000000000";
        r.vm_id = "abcdef01234" + std::to_string(i);
        r.state = i % 2 ? "paused" : "running";
        r.cpus = 1 + i % 4;
        r.memory_mb = 256;
        r.disable_internet = i == 3;
        r.image = "default";
        r.labels = {{"team", i < 3 ? "ml" : "web"}, {"n", std::to_string(i)}};
        r.timeout_s = i == 0 ? std::optional<int64_t>() : std::optional<int64_t>(60 * i);
        r.end_at_ms = r.timeout_s ? std::optional<int64_t>(1000 + i) : std::nullopt;
        r.created_ms = 100 + i;
        r.updated_ms = 200 + i;
        if (i == 3) r.template_name = "py";
        store.put_sandbox(r);
        made.push_back(r);
    }
    CHECK(store.sandbox(made[3].id) == made[3]);
    CHECK(store.sandbox(made[3].id)->template_name == "py");
    CHECK(store.sandbox(made[2].id)->template_name.empty());
    CHECK_FALSE(store.sandbox("nope").has_value());
    CHECK(store.sandboxes({.state = "paused"}).size() == 2);
    CHECK(store.sandboxes({.labels = {{"team", "ml"}}}).size() == 3);
    CHECK(store.sandboxes({.state = "running", .labels = {{"team", "ml"}}}).size() == 2);
    CHECK(store.sandboxes({.labels = {{"team", "ml"}, {"n", "1"}}}).size() == 1);
    const auto page1 = store.sandboxes({.limit = 2});
    REQUIRE(page1.size() == 2);
    const auto page2 = store.sandboxes({.after = page1.back().id, .limit = 2});
    REQUIRE(page2.size() == 2);
    CHECK(page2.front().id == made[2].id);
    CHECK(store.count_by_state() == std::map<std::string, int64_t>{{"paused", 2}, {"running", 3}});
    store.delete_sandbox(made[0].id);
    CHECK(store.all_sandboxes().size() == 4);
}

TEST_CASE("store: snapshot records round-trip and list per sandbox", "[daemon][store]") {
    TempDir tmp;
    Store store(tmp.path() + "/store.db");
    SnapshotRecord a{"a0000000-0000-4000-8000-000000000000", "s1", "/x/a", "ready", true, "", 1, 256, false, "default", 5};
    SnapshotRecord b{"b0000000-0000-4000-8000-000000000000", "s2", "/x/b", "saving", false, "", 2, 512, true, "tiny", 6};
    store.put_snapshot(a);
    store.put_snapshot(b);
    CHECK(store.snapshot(a.id) == a);
    CHECK(store.snapshots("s2", "", 10) == std::vector<SnapshotRecord>{b});
    CHECK(store.snapshots("", a.id, 10) == std::vector<SnapshotRecord>{b});
    b.durable = true;
    b.state = "ready";
    store.put_snapshot(b);
    CHECK(store.snapshot(b.id)->durable);
    store.delete_snapshot(a.id);
    CHECK_FALSE(store.snapshot(a.id).has_value());
}

TEST_CASE("store: the layer chain's external files are found over real layer files", "[daemon][store]") {
    World w;
    w.boot("x");
    w.snapshot("A", "x");
    w.restore("r", "A");
    w.snapshot("B", "r");
    // B holds r's old top (a layer over A's disk.ext4): its one external file.
    CHECK(external_files(w.dirs["B"]) == std::vector<std::string>{w.dirs["A"] + "/disk.ext4"});
    CHECK(external_files(w.dirs["A"]).empty());
    CHECK(external_files(w.dirs["r"]) == std::vector<std::string>{w.dirs["A"] + "/disk.ext4"});
    CHECK(w.store.refs(w.dirs["B"]) == external_files(w.dirs["B"]));
    CHECK(external_files(w.state + "/nowhere").empty());
}

// Every order of deleting the four resources of one chain: sandbox x, its snapshot
// A, sandbox r restored from A, r's snapshot B (whose layer names A's file).
TEST_CASE("store: deleting sandboxes and snapshots in any order keeps every kept chain whole and frees the rest",
          "[daemon][store]") {
    std::vector<std::string> order{"A", "B", "r", "x"};
    int orders = 0;
    do {
        World w;
        w.boot("x");
        w.snapshot("A", "x");
        w.restore("r", "A");
        w.snapshot("B", "r");
        const std::string a_dir = w.dirs["A"];
        std::string sequence;
        for (const std::string& name : order) {
            sequence += name + " ";
            w.remove(name);
            std::string why;
            INFO("deleted: " << sequence);
            REQUIRE(w.chains_intact(why));
            // A's directory stays exactly while B or r (whose files name it) stays.
            const bool a_needed = w.dirs.count("A") || w.dirs.count("B") || w.dirs.count("r");
            CHECK(fs::exists(a_dir) == a_needed);
        }
        INFO("deleted: " << sequence);
        CHECK(w.on_disk().empty());
        CHECK(w.store.dirs().empty());
        ++orders;
    } while (std::next_permutation(order.begin(), order.end()));
    CHECK(orders == 24);
}

// A snapshot of a fork child, then the parent and the child deleted, then a restore
// of that snapshot: the fork base's file stays for it.
TEST_CASE("store: a snapshot of a fork child keeps the fork base after parent and child are deleted",
          "[daemon][store]") {
    std::vector<std::string> order{"S", "c", "p", "restored"};
    int orders = 0;
    do {
        World w;
        w.boot("p");
        w.snapshot("F", "p", "fork");  // the fork base (released: only its users keep it)
        w.restore("c", "F");           // the fork child
        w.store.release_dir(w.dirs["F"]);  // nobody owns a fork base: its users keep it
        w.snapshot("S", "c");
        w.restore("restored", "S");
        const std::string base = w.dirs["F"];
        w.dirs.erase("F");  // not a resource of its own
        std::string sequence;
        for (const std::string& name : order) {
            sequence += name + " ";
            w.remove(name);
            INFO("deleted: " << sequence);
            std::string why;
            REQUIRE(w.chains_intact(why));
            const bool base_needed = w.dirs.count("c") || w.dirs.count("S") || w.dirs.count("restored");
            CHECK(fs::exists(base) == base_needed);
        }
        CHECK(w.on_disk().empty());
        CHECK(w.store.dirs().empty());
        ++orders;
    } while (std::next_permutation(order.begin(), order.end()));
    CHECK(orders == 24);
}

TEST_CASE("store: a snapshot's memory chain (manifest chain lines) counts as references", "[daemon][store]") {
    World w;
    w.boot("x");
    w.snapshot("A", "x");
    w.snapshot("B", "x");
    std::ofstream(w.dirs["A"] + "/memory.layer") << "A's memory";
    std::ofstream(w.dirs["B"] + "/memory.layer") << "B's memory, a diff over A's";
    nanovm::snapshot::write_manifest(w.dirs["B"], {"memory.layer"}, /*sync=*/false,
                                     {{"../A/memory.layer", 0x12345678}});
    CHECK(external_files(w.dirs["B"]) == std::vector<std::string>{w.dirs["A"] + "/memory.layer"});
    w.store.add_refs(w.dirs["B"], external_files(w.dirs["B"]));
    w.remove("A");
    CHECK(fs::exists(w.state + "/snapshots/A/memory.layer"));  // B's memory needs it
    w.remove("B");
    CHECK_FALSE(fs::exists(w.state + "/snapshots/A"));
}

TEST_CASE("store: a removal cut short is finished at the next start", "[daemon][store]") {
    World w;
    w.boot("x");
    w.snapshot("A", "x");
    // As if the daemon died between marking A's directory and removing it.
    w.store.release_dir(w.dirs["A"]);
    REQUIRE(w.store.collect() == std::vector<std::string>{w.dirs["A"]});
    CHECK(fs::exists(w.dirs["A"]));
    Store reopened(w.state + "/store.db");
    CHECK(finish_removals(reopened) == std::vector<std::string>{w.dirs["A"]});
    CHECK_FALSE(fs::exists(w.dirs["A"]));
    CHECK(fs::exists(w.dirs["x"]));
}

}  // namespace

TEST_CASE("store: template records round-trip; the sandboxes made from one are those that still exist",
          "[daemon][store][template]") {
    TempDir tmp;
    Store store(tmp.path() + "/store.db");
    TemplateRecord t;
    t.name = "py";
    t.state = "building";
    t.image = "default";
    t.cpus = 1;
    t.memory_mb = 256;
    t.setup = {"pip install x", "echo 'quoted \"line\"'"};
    t.dir = "/s/templates/0a";
    t.restore_dir = "/s/templates/0a/snapshot";
    t.created_ms = 5;
    TemplateRecord auto_t = t;
    auto_t.name = "auto:default:1x256";
    auto_t.implicit = true;
    auto_t.setup.clear();
    store.put_template(t);
    store.put_template(auto_t);
    CHECK(store.template_record("py") == t);
    CHECK(store.templates() == std::vector<TemplateRecord>{auto_t, t});  // by name
    t.state = "failed";
    t.error = "setup line 1 exited 1";
    store.put_template(t);
    CHECK(store.template_record("py")->error == t.error);

    SandboxRecord s{};
    s.id = "11111111-0000-4000-8000-000000000000";
    s.state = "running";
    store.put_sandbox(s);
    store.add_template_sandbox("py", s.id);
    store.add_template_sandbox("py", "22222222-0000-4000-8000-000000000000");  // its sandbox is gone
    CHECK(store.template_sandboxes("py") == std::vector<std::string>{s.id});
    CHECK(store.template_sandboxes("auto:default:1x256").empty());
    store.delete_sandbox(s.id);
    CHECK(store.template_sandboxes("py").empty());
    store.delete_template("py");
    CHECK_FALSE(store.template_record("py").has_value());
}

// A template made from snapshot A references A's files: deleting A keeps them; a
// sandbox restored from the template keeps them after the template is deleted too.
TEST_CASE("store: a template from a snapshot keeps its files through the snapshot's and its own deletion",
          "[daemon][store][template]") {
    World w;
    w.boot("x");
    w.snapshot("A", "x");
    const std::string a_dir = w.dirs["A"];
    const std::string t_dir = w.state + "/templates/t";
    fs::create_directories(t_dir);
    w.store.add_dir(t_dir, "template", "t");
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(a_dir)) files.push_back(e.path().string());
    w.store.add_refs(t_dir, files);
    w.restore("r", "A");  // a sandbox made from the template
    w.remove("A");
    CHECK(fs::exists(a_dir));
    release_and_collect(w.store, t_dir);
    CHECK_FALSE(fs::exists(t_dir));
    CHECK(fs::exists(a_dir));  // r's disk is a layer over it
    std::string why;
    CHECK(w.chains_intact(why));
    w.remove("r");
    CHECK_FALSE(fs::exists(a_dir));
    w.remove("x");
    CHECK(w.store.dirs().empty());
}
