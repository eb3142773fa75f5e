// The archive file format (archive_format.hpp).
#include "api/daemon/archive/archive_format.hpp"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>

#include <fmt/format.h>

#include "snapshot/crc32c.hpp"

namespace nanovm::daemon::archive {

namespace {

constexpr char kMagic[8] = {'N', 'A', 'N', 'O', 'V', 'M', 'A', 'R'};
constexpr size_t kHeaderBytes = 24;
constexpr size_t kRecordBytes = 24;

struct RecordHeader {
    uint32_t image;
    uint32_t zero;
    uint64_t offset;
    uint64_t length;
};
static_assert(sizeof(RecordHeader) == kRecordBytes);

void put_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
uint32_t get_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

nlohmann::json meta_json(const ArchiveMeta& meta) {
    nlohmann::json images = nlohmann::json::array();
    for (const ArchiveImage& i : meta.images) images.push_back({{"name", i.name}, {"bytes", i.bytes}});
    return {{"images", images}, {"info", meta.info}};
}

void check_images(const std::vector<ArchiveImage>& images, const std::function<void(const std::string&)>& fail) {
    if (images.size() > 64) fail(fmt::format("{} images (at most 64)", images.size()));
    for (size_t i = 0; i < images.size(); ++i) {
        const ArchiveImage& a = images[i];
        if (a.name.empty() || a.name.size() > 64) fail(fmt::format("image {}: a name of 1-64 bytes expected", i));
        if (a.bytes > kMaxImageBytes) fail(fmt::format("image {}: {} bytes (at most 1 TiB)", a.name, a.bytes));
        for (size_t j = 0; j < i; ++j)
            if (images[j].name == a.name) fail(fmt::format("image {} listed twice", a.name));
    }
}

int default_workers() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

}  // namespace

uint32_t ArchiveMeta::index_of(const std::string& name) const {
    for (size_t i = 0; i < images.size(); ++i)
        if (images[i].name == name) return static_cast<uint32_t>(i);
    throw ArchiveError(fmt::format("the archive has no image {}", name));
}

ArchiveWriter::ArchiveWriter(BlobWriter& out, const ArchiveMeta& meta, ZstdOptions options) : out_(out), meta_(meta) {
    check_images(meta_.images, [](const std::string& what) { throw Error("archive meta: " + what); });
    const std::string text = meta_json(meta_).dump();
    if (text.size() > kMaxMetaBytes) throw Error(fmt::format("archive meta: {} bytes (at most {})", text.size(), kMaxMetaBytes));
    cctx_ = ZSTD_createCCtx();
    if (!cctx_) throw Error("ZSTD_createCCtx failed (out of memory)");
    workers_ = options.workers > 0 ? options.workers : default_workers();
    auto set = [&](ZSTD_cParameter p, int v, const char* what) {
        const size_t r = ZSTD_CCtx_setParameter(cctx_, p, v);
        if (ZSTD_isError(r)) {
            ZSTD_freeCCtx(cctx_);
            throw Error(fmt::format("zstd {} {}: {}", what, v, ZSTD_getErrorName(r)));
        }
    };
    set(ZSTD_c_compressionLevel, options.level, "level");
    set(ZSTD_c_checksumFlag, 1, "checksum");
    // A single worker compresses in this thread (nbWorkers 0); more are zstd's own threads.
    if (workers_ > 1) set(ZSTD_c_nbWorkers, workers_, "nbWorkers (a libzstd built without ZSTD_MULTITHREAD?)");
    buffer_.resize(ZSTD_CStreamOutSize());
    uint8_t header[kHeaderBytes];
    std::memcpy(header, kMagic, 8);
    put_u32(header + 8, kArchiveVersion);
    put_u32(header + 12, static_cast<uint32_t>(text.size()));
    put_u32(header + 16, snapshot::crc32c({reinterpret_cast<const uint8_t*>(text.data()), text.size()}));
    put_u32(header + 20, snapshot::crc32c({header, 20}));
    out_.write({header, kHeaderBytes});
    out_.write({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

ArchiveWriter::~ArchiveWriter() { ZSTD_freeCCtx(cctx_); }

void ArchiveWriter::compress(std::span<const uint8_t> in, bool end) {
    ZSTD_inBuffer input{in.data(), in.size(), 0};
    for (;;) {
        ZSTD_outBuffer output{buffer_.data(), buffer_.size(), 0};
        const size_t left = ZSTD_compressStream2(cctx_, &output, &input, end ? ZSTD_e_end : ZSTD_e_continue);
        if (ZSTD_isError(left)) throw Error(fmt::format("zstd compression: {}", ZSTD_getErrorName(left)));
        if (output.pos > 0) out_.write({buffer_.data(), output.pos});
        if (end ? left == 0 : input.pos == input.size) return;
    }
}

void ArchiveWriter::add(uint32_t image, uint64_t offset, std::span<const uint8_t> data) {
    if (finished_) throw Error("archive: add after finish");
    if (image >= meta_.images.size()) throw Error(fmt::format("archive: no image {}", image));
    const uint64_t size = meta_.images[image].bytes;
    if (offset > size || data.size() > size - offset)
        throw Error(fmt::format("archive: a run [{}, +{}) outside image {} ({} bytes)", offset, data.size(),
                                meta_.images[image].name, size));
    while (!data.empty()) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(data.size(), kMaxRunBytes));
        const RecordHeader h{image, 0, offset, n};
        compress({reinterpret_cast<const uint8_t*>(&h), kRecordBytes}, false);
        compress(data.first(n), false);
        raw_bytes_ += n;
        ++records_;
        offset += n;
        data = data.subspan(n);
    }
}

void ArchiveWriter::finish() {
    if (finished_) throw Error("archive: finish twice");
    const RecordHeader h{kEndRecord, 0, records_, raw_bytes_};
    compress({reinterpret_cast<const uint8_t*>(&h), kRecordBytes}, false);
    compress({}, true);
    finished_ = true;
}

ArchiveReader::ArchiveReader(BlobReader& in, std::string name) : in_(in), name_(std::move(name)) {
    uint8_t header[kHeaderBytes];
    size_t got = 0;
    while (got < kHeaderBytes) {
        const size_t n = in_.read({header + got, kHeaderBytes - got});
        if (n == 0) fail(got == 0 ? "empty (no header)" : "truncated inside its header");
        got += n;
    }
    if (std::memcmp(header, kMagic, 8) != 0) fail("not a nanovm archive (bad magic)");
    if (get_u32(header + 20) != snapshot::crc32c({header, 20})) fail("header checksum mismatch");
    const uint32_t version = get_u32(header + 8);
    if (version > kArchiveVersion)
        fail(fmt::format("format version {} is newer than this nanovm reads ({})", version, kArchiveVersion));
    if (version == 0) fail("format version 0");
    const uint32_t meta_bytes = get_u32(header + 12);
    if (meta_bytes > kMaxMetaBytes) fail(fmt::format("meta of {} bytes (at most {})", meta_bytes, kMaxMetaBytes));
    std::string text(meta_bytes, '\0');
    got = 0;
    while (got < meta_bytes) {
        const size_t n = in_.read({reinterpret_cast<uint8_t*>(text.data()) + got, meta_bytes - got});
        if (n == 0) fail("truncated inside its meta");
        got += n;
    }
    if (snapshot::crc32c({reinterpret_cast<const uint8_t*>(text.data()), text.size()}) != get_u32(header + 16)) fail("meta checksum mismatch");
    consumed_ = kHeaderBytes + meta_bytes;
    try {
        const nlohmann::json j = nlohmann::json::parse(text);
        for (const auto& i : j.at("images")) meta_.images.push_back({i.at("name").get<std::string>(), i.at("bytes").get<uint64_t>()});
        meta_.info = j.at("info");
        if (!meta_.info.is_object()) fail("meta: info is not an object");
    } catch (const nlohmann::json::exception& e) {
        fail(fmt::format("meta: {}", e.what()));
    }
    check_images(meta_.images, [this](const std::string& what) { fail("meta: " + what); });
    dctx_ = ZSTD_createDCtx();
    if (!dctx_) throw Error("ZSTD_createDCtx failed (out of memory)");
    // Bounds the window a hostile frame may make us allocate (128 MiB; zstd's default limit).
    ZSTD_DCtx_setParameter(dctx_, ZSTD_d_windowLogMax, 27);
    in_buf_.resize(ZSTD_DStreamInSize());
}

ArchiveReader::~ArchiveReader() { ZSTD_freeDCtx(dctx_); }

void ArchiveReader::fail(const std::string& what) const { throw ArchiveError(fmt::format("{}: {}", name_, what)); }

size_t ArchiveReader::read_some(std::span<uint8_t> out) {
    ZSTD_outBuffer output{out.data(), out.size(), 0};
    while (output.pos == 0) {
        if (frame_done_) return 0;
        if (in_pos_ == in_size_ && !in_eof_) {
            in_size_ = in_.read(in_buf_);
            in_pos_ = 0;
            consumed_ += in_size_;
            if (in_size_ == 0) in_eof_ = true;
        }
        ZSTD_inBuffer input{in_buf_.data(), in_size_, in_pos_};
        const size_t ret = ZSTD_decompressStream(dctx_, &output, &input);
        in_pos_ = input.pos;
        if (ZSTD_isError(ret)) fail(fmt::format("corrupt compressed data ({})", ZSTD_getErrorName(ret)));
        if (ret == 0) {
            frame_done_ = true;
        } else if (output.pos == 0 && in_eof_ && in_pos_ == in_size_) {
            fail("truncated (the compressed data ends early)");
        }
    }
    return output.pos;
}

bool ArchiveReader::read_exact(std::span<uint8_t> out) {
    size_t got = 0;
    while (got < out.size()) {
        const size_t n = read_some(out.subspan(got));
        if (n == 0) {
            if (got == 0) return false;
            fail("truncated inside a record");
        }
        got += n;
    }
    return true;
}

bool ArchiveReader::next(ArchiveRun& run) {
    if (ended_) return false;
    RecordHeader h{};
    if (!read_exact({reinterpret_cast<uint8_t*>(&h), kRecordBytes})) fail("truncated (no end record)");
    if (h.zero != 0) fail(fmt::format("record {}: reserved field {}", records_, h.zero));
    if (h.image == kEndRecord) {
        if (h.length != bytes_ || h.offset != records_)
            fail(fmt::format("the end record counts {} records of {} bytes, the archive holds {} of {}", h.offset,
                             h.length, records_, bytes_));
        uint8_t extra = 0;
        if (read_some({&extra, 1}) != 0) fail("data after the end record");
        if (in_pos_ != in_size_ || in_.read(in_buf_) != 0) fail("data after the compressed frame");
        ended_ = true;
        return false;
    }
    if (h.image >= meta_.images.size()) fail(fmt::format("record {}: image {} of {}", records_, h.image, meta_.images.size()));
    const ArchiveImage& image = meta_.images[h.image];
    if (h.length == 0 || h.length > kMaxRunBytes) fail(fmt::format("record {}: a run of {} bytes", records_, h.length));
    if (h.offset > image.bytes || h.length > image.bytes - h.offset)
        fail(fmt::format("record {}: run [{}, +{}) outside image {} ({} bytes)", records_, h.offset, h.length, image.name,
                         image.bytes));
    payload_.resize(static_cast<size_t>(h.length));
    if (!read_exact(payload_)) fail("truncated inside a record");
    ++records_;
    bytes_ += h.length;
    run.image = h.image;
    run.offset = h.offset;
    run.data = payload_;
    return true;
}

}  // namespace nanovm::daemon::archive
