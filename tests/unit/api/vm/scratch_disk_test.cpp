// The sandbox's writable disk: mkfs.ext4 template and sparse copies
// (api/vm/scratch_disk.hpp). Needs mkfs.ext4 (e2fsprogs, tools/setup installs it).
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <string>

#include "api/vm/scratch_disk.hpp"
#include "tests/support/temp_dir.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"

using namespace nanovm;
using namespace nanovm::vm;

namespace {

struct FileSize {
    uint64_t apparent = 0;
    uint64_t allocated = 0;
};

FileSize file_size(const std::string& path) {
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    return {static_cast<uint64_t>(st.st_size), static_cast<uint64_t>(st.st_blocks) * 512};
}

std::string read_at(const std::string& path, off_t offset, size_t n) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    REQUIRE(fd);
    std::string buf(n, '\0');
    REQUIRE(::pread(fd.get(), buf.data(), n, offset) == static_cast<ssize_t>(n));
    return buf;
}

void write_at(int fd, off_t offset, const std::string& data) {
    REQUIRE(::pwrite(fd, data.data(), data.size(), offset) == static_cast<ssize_t>(data.size()));
}

}  // namespace

TEST_CASE("make_ext4_image formats a sparse ext4 file system", "[api][vm][disk]") {
    test::TempDir dir("scratch");
    const std::string path = dir.file("fs.img");
    make_ext4_image(path, uint64_t{1} << 30);
    const FileSize size = file_size(path);
    CHECK(size.apparent == uint64_t{1} << 30);
    CHECK(size.allocated < (uint64_t{32} << 20));
    // The ext4 superblock at 1024: s_magic 0xEF53 at offset 56.
    const std::string magic = read_at(path, 1024 + 56, 2);
    CHECK(static_cast<uint8_t>(magic[0]) == 0x53);
    CHECK(static_cast<uint8_t>(magic[1]) == 0xEF);
}

TEST_CASE("make_ext4_image reports mkfs.ext4's failure in one line", "[api][vm][disk]") {
    test::TempDir dir("scratch-bad");
    // 16 KiB is too small for an ext4 file system with a journal.
    CHECK_THROWS_WITH(make_ext4_image(dir.file("tiny.img"), 16 * 1024), Catch::Contains("mkfs.ext4"));
    CHECK_THROWS_WITH(make_ext4_image(dir.file("no/such/dir.img"), 1 << 20), Catch::Contains("No such file"));
}

TEST_CASE("copy_sparse copies the data and keeps the holes", "[api][vm][disk]") {
    test::TempDir dir("sparse");
    const std::string from = dir.file("from.img"), to = dir.file("to.img");
    {
        Fd fd(::open(from.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
        REQUIRE(fd);
        REQUIRE(::ftruncate(fd.get(), off_t{4} << 30) == 0);
        write_at(fd.get(), 0, "start of the disk");
        write_at(fd.get(), off_t{1} << 30, std::string(1 << 20, 'm'));
        write_at(fd.get(), (off_t{4} << 30) - 4, "end!");
    }
    copy_sparse(from, to);
    const FileSize size = file_size(to);
    CHECK(size.apparent == uint64_t{4} << 30);
    CHECK(size.allocated < (uint64_t{8} << 20));
    CHECK(read_at(to, 0, 17) == "start of the disk");
    CHECK(read_at(to, off_t{1} << 30, 1 << 20) == std::string(1 << 20, 'm'));
    CHECK(read_at(to, (off_t{4} << 30) - 4, 4) == "end!");
    CHECK(read_at(to, off_t{2} << 30, 4) == std::string(4, '\0'));
    CHECK_THROWS_AS(copy_sparse(dir.file("missing"), to), SysError);
}

TEST_CASE("copy_sparse across file systems (ext4 -> tmpfs: copy_file_range says EXDEV) still copies", "[api][vm][disk]") {
    test::TempDir dir("sparse-xfs");
    const std::string from = dir.file("from.img");
    const std::string to = fmt::format("/dev/shm/nanovm-copy-test-{}.img", ::getpid());
    {
        Fd fd(::open(from.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
        REQUIRE(fd);
        REQUIRE(::ftruncate(fd.get(), off_t{64} << 20) == 0);
        write_at(fd.get(), 4096, std::string(3 << 20, 'x'));  // more than one 1 MiB buffer
        write_at(fd.get(), (off_t{64} << 20) - 4, "end!");
    }
    copy_sparse(from, to);
    CHECK(file_size(to).apparent == uint64_t{64} << 20);
    CHECK(read_at(to, 4096, 3 << 20) == std::string(3 << 20, 'x'));
    CHECK(read_at(to, (off_t{64} << 20) - 4, 4) == "end!");
    CHECK(read_at(to, off_t{32} << 20, 4) == std::string(4, '\0'));
    ::unlink(to.c_str());
}

TEST_CASE("the scratch template is made once, where it can be, then reused", "[api][vm][disk]") {
    test::TempDir dir("template");
    // The first place cannot hold it (a path under a regular file), the second can.
    const std::string blocked = dir.file("file");
    { Fd fd(::open(blocked.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600)); }
    const std::vector<std::string> dirs = {blocked + "/cache", dir.file("run")};
    const std::string made = ensure_scratch_template(dirs);
    CHECK(made == dir.file("run") + "/" + kScratchTemplateName);
    CHECK(file_size(made).apparent == kScratchDiskBytes);
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(ensure_scratch_template(dirs) == made);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(50));
    const std::string disk = dir.file("disk.ext4");
    copy_sparse(made, disk);
    CHECK(file_size(disk).apparent == kScratchDiskBytes);
    CHECK(file_size(disk).allocated < (uint64_t{64} << 20));
    CHECK_THROWS_WITH(ensure_scratch_template({blocked + "/a"}), Catch::Contains("cannot make"));
}
