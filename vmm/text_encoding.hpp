// Bytes as JSON text: base64 (RFC 4648 section 4, with padding) for exact bytes, and
// UTF-8 with every invalid sequence replaced by U+FFFD for text. Used by nanovmd's
// exec output (`output_encoding`, docs/api.md) and the CLI that reads it back.
// Header-only, like printable.hpp; nothing here throws but base64_decode.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nanovm {

/// Base64 of `bytes` (RFC 4648 section 4: A-Z a-z 0-9 + /, '=' padding).
inline std::string base64_encode(std::string_view bytes) {
    static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    size_t i = 0;
    for (; i + 3 <= bytes.size(); i += 3) {
        const uint32_t v = static_cast<uint8_t>(bytes[i]) << 16 | static_cast<uint8_t>(bytes[i + 1]) << 8 |
                           static_cast<uint8_t>(bytes[i + 2]);
        out += kAlphabet[v >> 18];
        out += kAlphabet[(v >> 12) & 63];
        out += kAlphabet[(v >> 6) & 63];
        out += kAlphabet[v & 63];
    }
    if (const size_t rest = bytes.size() - i; rest > 0) {
        uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
        if (rest == 2) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
        out += kAlphabet[v >> 18];
        out += kAlphabet[(v >> 12) & 63];
        out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

/// The bytes of base64 `text` (padded, as base64_encode makes it; no whitespace), or
/// nullopt if it is not that.
inline std::optional<std::string> base64_decode(std::string_view text) {
    if (text.size() % 4 != 0) return std::nullopt;
    const auto value = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        if (c == '+') return 62;
        if (c == '/') return 63;
        return -1;
    };
    std::string out;
    out.reserve(text.size() / 4 * 3);
    for (size_t i = 0; i < text.size(); i += 4) {
        const bool last = i + 4 == text.size();
        const int pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
        uint32_t v = 0;
        for (size_t k = 0; k < 4; ++k) {
            const int d = k >= 4 - static_cast<size_t>(pad) ? 0 : value(text[i + k]);
            if (d < 0) return std::nullopt;
            v = v << 6 | static_cast<uint32_t>(d);
        }
        out += static_cast<char>(v >> 16);
        if (pad < 2) out += static_cast<char>((v >> 8) & 0xff);
        if (pad < 1) out += static_cast<char>(v & 0xff);
    }
    return out;
}

/// Output chunks to valid UTF-8: a sequence cut by a chunk's end is completed from
/// the next chunk (not replaced), and every invalid sequence (a stray continuation
/// byte, an overlong form, a surrogate, above U+10FFFF, a truncated sequence) becomes
/// one U+FFFD per maximal invalid subpart (Unicode 15, section 3.9, "U+FFFD
/// Substitution of Maximal Subparts").
class Utf8Sanitizer {
public:
    /// The valid text of `chunk` (after what an earlier chunk left unfinished); the
    /// last bytes of an unfinished sequence wait for the next chunk or finish().
    std::string feed(std::string_view chunk) {
        std::string in = std::move(held_);
        held_.clear();
        in.append(chunk);
        std::string out;
        out.reserve(in.size());
        size_t i = 0;
        while (i < in.size()) {
            const auto b = static_cast<uint8_t>(in[i]);
            if (b < 0x80) {
                out += static_cast<char>(b);
                ++i;
                continue;
            }
            size_t need = 0;
            uint8_t lo = 0x80, hi = 0xbf;  // the allowed range of the second byte
            if (b >= 0xc2 && b <= 0xdf) {
                need = 1;
            } else if (b >= 0xe0 && b <= 0xef) {
                need = 2;
                if (b == 0xe0) lo = 0xa0;  // no overlong forms
                if (b == 0xed) hi = 0x9f;  // no surrogates
            } else if (b >= 0xf0 && b <= 0xf4) {
                need = 3;
                if (b == 0xf0) lo = 0x90;
                if (b == 0xf4) hi = 0x8f;  // nothing above U+10FFFF
            } else {
                out += kReplacement;
                ++i;
                continue;
            }
            size_t got = 1;
            while (got <= need && i + got < in.size()) {
                const auto c = static_cast<uint8_t>(in[i + got]);
                const bool fits = got == 1 ? c >= lo && c <= hi : c >= 0x80 && c <= 0xbf;
                if (!fits) break;
                ++got;
            }
            if (got == need + 1) {
                out.append(in, i, got);
            } else if (i + got == in.size()) {
                held_ = in.substr(i);  // unfinished at the chunk's end: wait for more
                break;
            } else {
                out += kReplacement;  // the maximal subpart [i, i + got) is invalid
            }
            i += got;
        }
        return out;
    }
    /// What an unfinished sequence left at the end: U+FFFD, or "" if nothing.
    std::string finish() {
        const bool any = !held_.empty();
        held_.clear();
        return any ? std::string(kReplacement) : std::string();
    }

private:
    static constexpr const char* kReplacement = "\xef\xbf\xbd";
    std::string held_;
};

/// `bytes` as valid UTF-8 (Utf8Sanitizer over one chunk).
inline std::string utf8_sanitize(std::string_view bytes) {
    Utf8Sanitizer s;
    std::string out = s.feed(bytes);
    return out + s.finish();
}

}  // namespace nanovm
