// The local directory blob store (blob_store.hpp).
#include "api/daemon/archive/blob_store.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include <fmt/format.h>

#include "vmm/fd.hpp"

namespace nanovm::daemon::archive {

namespace {

constexpr const char* kPartialSuffix = ".partial";

std::string partial_path(const std::string& dir, const std::string& name) {
    return fmt::format("{}/.{}{}", dir, name, kPartialSuffix);
}

void require_name(const std::string& name) {
    if (!valid_blob_name(name)) throw Error(fmt::format("blob name \"{}\" is not [A-Za-z0-9._-]{{1,128}}", name.substr(0, 64)));
}

class FileWriter : public BlobWriter {
public:
    FileWriter(std::string dir, std::string name) : dir_(std::move(dir)), name_(std::move(name)) {
        tmp_ = partial_path(dir_, name_);
        fd_ = Fd(::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
        if (!fd_) throw_errno("open " + tmp_);
    }
    ~FileWriter() override {
        if (!committed_) ::unlink(tmp_.c_str());
    }
    void write(std::span<const uint8_t> bytes) override {
        while (!bytes.empty()) {
            const ssize_t n = ::write(fd_.get(), bytes.data(), bytes.size());
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) throw_errno("write " + tmp_);
            bytes = bytes.subspan(static_cast<size_t>(n));
            bytes_ += static_cast<uint64_t>(n);
        }
    }
    void commit() override {
        if (::fsync(fd_.get()) != 0) throw_errno("fsync " + tmp_);
        fd_.reset();
        const std::string target = dir_ + "/" + name_;
        if (::rename(tmp_.c_str(), target.c_str()) != 0) throw_errno(fmt::format("rename {} {}", tmp_, target));
        committed_ = true;
        sync_dir(dir_);
    }
    uint64_t bytes() const noexcept override { return bytes_; }

private:
    std::string dir_, name_, tmp_;
    Fd fd_;
    uint64_t bytes_ = 0;
    bool committed_ = false;
};

class FileReader : public BlobReader {
public:
    FileReader(Fd fd, std::string path, uint64_t size) : fd_(std::move(fd)), path_(std::move(path)), size_(size) {}
    size_t read(std::span<uint8_t> out) override {
        for (;;) {
            const ssize_t n = ::read(fd_.get(), out.data(), out.size());
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) throw_errno("read " + path_);
            return static_cast<size_t>(n);
        }
    }
    uint64_t size() const noexcept override { return size_; }

private:
    Fd fd_;
    std::string path_;
    uint64_t size_;
};

}  // namespace

bool valid_blob_name(const std::string& name) noexcept {
    if (name.empty() || name.size() > 128 || name.front() == '.') return false;
    return std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
               c == '-';
    });
}

void sync_dir(const std::string& dir) {
    Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) throw_errno("open " + dir);
    if (::fsync(fd.get()) != 0) throw_errno("fsync " + dir);
}

DirBlobStore::DirBlobStore(std::string dir) : dir_(std::move(dir)) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) throw SysError(fmt::format("mkdir {}", dir_), ec.value());
    ::chmod(dir_.c_str(), 0700);
}

std::unique_ptr<BlobWriter> DirBlobStore::put(const std::string& name) {
    require_name(name);
    return std::make_unique<FileWriter>(dir_, name);
}

std::unique_ptr<BlobReader> DirBlobStore::get(const std::string& name) {
    require_name(name);
    const std::string path = dir_ + "/" + name;
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
        if (errno == ENOENT) throw BlobNotFound(fmt::format("no archive blob {} in {}", name, dir_));
        throw_errno("open " + path);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw_errno("fstat " + path);
    return std::make_unique<FileReader>(std::move(fd), path, static_cast<uint64_t>(st.st_size));
}

std::unique_ptr<BlobReader> open_blob_file(const std::string& path) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) throw_errno("open " + path);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw_errno("fstat " + path);
    if (!S_ISREG(st.st_mode)) throw Error(fmt::format("{}: not a regular file", path));
    return std::make_unique<FileReader>(std::move(fd), path, static_cast<uint64_t>(st.st_size));
}

bool DirBlobStore::exists(const std::string& name) {
    if (!valid_blob_name(name)) return false;
    struct stat st {};
    return ::stat((dir_ + "/" + name).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

void DirBlobStore::remove(const std::string& name) {
    require_name(name);
    const std::string path = dir_ + "/" + name;
    if (::unlink(path.c_str()) != 0) {
        if (errno == ENOENT) return;
        throw_errno("unlink " + path);
    }
    sync_dir(dir_);
}

std::vector<std::string> DirBlobStore::list() {
    std::vector<std::string> out;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (valid_blob_name(name) && it->is_regular_file()) out.push_back(name);
    }
    std::sort(out.begin(), out.end());
    return out;
}

size_t DirBlobStore::remove_partials() {
    size_t n = 0;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.size() > 1 && name.front() == '.' && name.ends_with(kPartialSuffix) &&
            ::unlink(it->path().c_str()) == 0)
            ++n;
    }
    return n;
}

}  // namespace nanovm::daemon::archive
