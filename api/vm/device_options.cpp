#include "api/vm/device_options.hpp"

#include <charconv>
#include <string_view>

#include <fmt/format.h>

#include "vmm/error.hpp"

namespace nanovm {

namespace {

// Splits "value,k=v,flag" into the value and its key/value parts (flag -> {flag, ""}).
struct Spec {
    std::string value;
    std::vector<std::pair<std::string, std::string>> keys;
};

Spec split(const char* option, const std::string& text) {
    Spec spec;
    size_t start = 0;
    bool first = true;
    while (start <= text.size()) {
        const size_t comma = text.find(',', start);
        const std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (first) {
            if (part.empty())
                throw Error(fmt::format("{} {}: the path (or tap name) before the first comma is empty", option, text));
            spec.value = part;
            first = false;
        } else {
            if (part.empty()) throw Error(fmt::format("{} {}: empty part", option, text));
            const size_t eq = part.find('=');
            if (eq == std::string::npos) {
                spec.keys.emplace_back(part, "");
            } else {
                spec.keys.emplace_back(part.substr(0, eq), part.substr(eq + 1));
            }
        }
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return spec;
}

[[noreturn]] void unknown(const char* option, const std::string& text, const std::string& key) {
    throw Error(fmt::format("{} {}: unknown setting '{}'", option, text, key));
}

}  // namespace

std::array<uint8_t, 6> parse_mac(const std::string& text) {
    std::array<uint8_t, 6> mac{};
    const auto bad = [&] { return Error(fmt::format("MAC address '{}': expected six hex bytes like 52:54:00:12:34:56", text)); };
    if (text.size() != 17) throw bad();
    for (size_t i = 0; i < 6; ++i) {
        const char* p = text.data() + 3 * i;
        if (i < 5 && p[2] != ':') throw bad();
        unsigned value = 0;
        const auto [end, ec] = std::from_chars(p, p + 2, value, 16);
        if (ec != std::errc() || end != p + 2) throw bad();
        mac[i] = static_cast<uint8_t>(value);
    }
    if (mac[0] & 1) throw Error(fmt::format("MAC address '{}' is a multicast address", text));
    return mac;
}

DiskOption parse_disk_option(const std::string& text) {
    const Spec spec = split("--disk", text);
    DiskOption disk{spec.value, false, {}};
    for (const auto& [key, value] : spec.keys) {
        if (key == "ro" && value.empty()) {
            disk.read_only = true;
        } else if (key == "serial") {
            if (value.empty() || value.size() > 20)
                throw Error(fmt::format("--disk {}: serial must be 1 to 20 bytes", text));
            disk.serial = value;
        } else {
            unknown("--disk", text, key);
        }
    }
    return disk;
}

NetOption parse_net_option(const std::string& text) {
    const Spec spec = split("--net", text);
    if (spec.value.size() >= 16) throw Error(fmt::format("--net {}: tap name longer than 15 bytes", text));
    NetOption net{spec.value, std::nullopt};
    for (const auto& [key, value] : spec.keys) {
        if (key == "mac") {
            net.mac = parse_mac(value);
        } else {
            unknown("--net", text, key);
        }
    }
    return net;
}

VsockOption parse_vsock_option(const std::string& text) {
    const Spec spec = split("--vsock", text);
    VsockOption vsock{spec.value, 3};
    for (const auto& [key, value] : spec.keys) {
        if (key == "cid") {
            uint64_t cid = 0;
            const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), cid);
            if (ec != std::errc() || end != value.data() + value.size() || cid < 3 || cid > 0xfffffffe)
                throw Error(fmt::format("--vsock {}: cid must be a number from 3 to 4294967294", text));
            vsock.cid = static_cast<uint32_t>(cid);
        } else {
            unknown("--vsock", text, key);
        }
    }
    return vsock;
}

}  // namespace nanovm
