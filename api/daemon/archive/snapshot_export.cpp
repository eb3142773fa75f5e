// Snapshot export files (snapshot_export.hpp).
#include "api/daemon/archive/snapshot_export.hpp"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "api/daemon/archive/archive_format.hpp"
#include "api/daemon/archive/blob_store.hpp"
#include "snapshot/manifest.hpp"
#include "snapshot/snapshot_dir.hpp"
#include "snapshot/snapshot_error.hpp"
#include "snapshot/state_file.hpp"
#include "snapshot/vm_state.hpp"

namespace nanovm::daemon::archive {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

bool is_hex_digest(const std::string& text) {
    return text.size() == 64 &&
           std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// The unpacked vm.state of `dir` names only `root` and its own disk files, with the
// info's shape. Throws ArchiveError.
void check_unpacked_state(const std::string& dir, const std::string& root, const SnapshotExportInfo& info,
                          const std::string& name) {
    auto bad = [&](const std::string& what) { return ArchiveError(fmt::format("{}: vm.state: {}", name, what)); };
    const snapshot::VmState state = snapshot::decode_vm_state(snapshot::read_checked_state(dir), dir + "/vm.state");
    json saved;
    try {
        saved = json::parse(state.devices);
        const json& config = saved.at("config");
        if (config.at("cpus").get<int64_t>() != info.cpus || config.at("memory_mib").get<int64_t>() != info.memory_mb)
            throw bad(fmt::format("its shape ({} cpus, {} MiB) is not the info's ({} cpus, {} MiB)",
                                  config.at("cpus").dump(), config.at("memory_mib").dump(), info.cpus, info.memory_mb));
        if (state.vcpus.size() != static_cast<size_t>(info.cpus))
            throw bad(fmt::format("{} vCPU states for {} cpus", state.vcpus.size(), info.cpus));
        if (config.at("image").get<std::string>() != root) throw bad("its root image is not the pinned one");
        if (!config.at("user_disks").empty()) throw bad("it names host disks of its own (user_disks)");
        const json& disks = config.at("disk_options");
        const json& frozen = saved.at("disks");
        if (!disks.is_array() || !frozen.is_array() || disks.size() != frozen.size())
            throw bad("the disk lists do not match");
        for (size_t i = 0; i < disks.size(); ++i) {
            const json& layer = frozen[i].at("frozen");
            if (!layer.is_null()) {
                // unpack_archive set it: the disk's own raw file in `dir`.
                if (layer.get<std::string>() != fmt::format("disk{}.raw", i) || frozen[i].at("frozen_kind") != "raw")
                    throw bad(fmt::format("disk {} is not its unpacked file", i));
                continue;
            }
            if (!disks[i].at("read_only").get<bool>() || disks[i].at("path").get<std::string>() != root)
                throw bad(fmt::format("disk {} is a host file ({}{}), not the root image nor a disk of the file", i,
                                      disks[i].at("read_only").get<bool>() ? "read-only " : "writable ",
                                      disks[i].at("path").get<std::string>().substr(0, 200)));
        }
    } catch (const json::exception& e) {
        throw bad(fmt::format("devices: {}", e.what()));
    }
}

}  // namespace

json SnapshotExportInfo::to_json() const {
    return json{{"format", kSnapshotFormat},
                {"format_version", kSnapshotFormatVersion},
                {"snapshot_id", snapshot_id},
                {"created_ms", created_ms},
                {"cpus", cpus},
                {"memory_mb", memory_mb},
                {"disable_internet", disable_internet},
                {"image", image},
                {"image_digest", image_digest},
                {"image_bytes", image_bytes}};
}

SnapshotExportInfo parse_export_info(const json& info, const std::string& name) {
    auto bad = [&](const std::string& what) { return ArchiveError(fmt::format("{}: {}", name, what)); };
    if (!info.is_object()) throw bad("its meta info is not an object");
    if (info.value("format", json()) != kSnapshotFormat)
        throw bad(fmt::format("not a snapshot export (format {}, expected \"{}\")", info.value("format", json()).dump(),
                              kSnapshotFormat));
    const json version = info.value("format_version", json());
    if (!version.is_number_integer() || version.get<int64_t>() < 1 || version.get<int64_t>() > kSnapshotFormatVersion)
        throw bad(fmt::format("format_version {}: this nanovm reads 1 to {}", version.dump(), kSnapshotFormatVersion));
    SnapshotExportInfo out;
    auto integer = [&](const char* key, int64_t lo, int64_t hi) {
        const json v = info.value(key, json());
        if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
            throw bad(fmt::format("\"{}\" is {}, not an integer from {} to {}", key, v.dump(), lo, hi));
        return v.get<int64_t>();
    };
    auto text = [&](const char* key) {
        const json v = info.value(key, json());
        if (!v.is_string() || v.get<std::string>().size() > 256)
            throw bad(fmt::format("\"{}\" is {}, not a string", key, v.dump().substr(0, 80)));
        return v.get<std::string>();
    };
    out.snapshot_id = text("snapshot_id");
    out.created_ms = integer("created_ms", 0, int64_t{1} << 50);
    out.cpus = integer("cpus", 1, 4);
    out.memory_mb = integer("memory_mb", 128, 8192);
    const json internet = info.value("disable_internet", json());
    if (!internet.is_boolean()) throw bad(fmt::format("\"disable_internet\" is {}, not a boolean", internet.dump()));
    out.disable_internet = internet.get<bool>();
    out.image = text("image");
    out.image_digest = text("image_digest");
    if (!is_hex_digest(out.image_digest))
        throw bad(fmt::format("\"image_digest\" \"{}\" is not 64 lower-case hex digits", out.image_digest.substr(0, 80)));
    out.image_bytes = static_cast<uint64_t>(integer("image_bytes", 0, static_cast<int64_t>(kMaxImageBytes)));
    return out;
}

PackStats export_snapshot(const std::string& dir, const SnapshotExportInfo& info, BlobWriter& out,
                          const ProgressFn& progress, ZstdOptions zstd) {
    return pack_snapshot(dir, info.to_json(), out, progress, zstd);
}

SnapshotExportInfo import_snapshot(const std::string& file, const std::string& dir, const RootImageFn& root,
                                   const ProgressFn& progress) {
    const std::string name = "the import";
    std::error_code ec;
    if (fs::exists(dir, ec)) throw Error(fmt::format("import: {} exists", dir));
    try {
        SnapshotExportInfo info;
        {
            auto in = open_blob_file(file);
            info = parse_export_info(archive_info(*in, name), name);
        }
        const std::string root_image = root(info);
        auto in = open_blob_file(file);
        try {
            (void)unpack_archive(*in, dir, root_image, progress, name);
        } catch (const snapshot::SnapshotError& e) {
            throw ArchiveError(fmt::format("{}: {}", name, e.what()));
        }
        try {
            check_unpacked_state(dir, root_image, info, name);
        } catch (const snapshot::SnapshotError& e) {
            throw ArchiveError(fmt::format("{}: {}", name, e.what()));
        }
        return info;
    } catch (...) {
        fs::remove_all(dir, ec);
        throw;
    }
}

}  // namespace nanovm::daemon::archive
