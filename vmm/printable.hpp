// Text from the guest (an agent's error message, an errno name, a console line) made
// safe to print as part of one line on a user's terminal: the guest chose those
// bytes, and an escape sequence or a carriage return in them would act on the
// terminal. Command output streamed as such stays raw (as ssh does); this is for
// the lines nanovm itself prints. Header-only: the agent client library uses it too.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace nanovm {

namespace printable_detail {

/// Length of the well-formed UTF-8 character at text[at] (2-4), or 0 if there is
/// none (a stray or truncated sequence, an overlong form, a surrogate, > U+10FFFF);
/// its code point in `cp`.
inline size_t utf8_char(std::string_view text, size_t at, uint32_t& cp) {
    const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
    const uint8_t lead = byte(at);
    size_t len = 0;
    uint8_t low = 0x80, high = 0xbf;  // the allowed range of the second byte
    if (lead >= 0xc2 && lead <= 0xdf) {
        len = 2;
        cp = lead & 0x1f;
    } else if (lead >= 0xe0 && lead <= 0xef) {
        len = 3;
        cp = lead & 0x0f;
        if (lead == 0xe0) low = 0xa0;   // overlong
        if (lead == 0xed) high = 0x9f;  // surrogates
    } else if (lead >= 0xf0 && lead <= 0xf4) {
        len = 4;
        cp = lead & 0x07;
        if (lead == 0xf0) low = 0x90;   // overlong
        if (lead == 0xf4) high = 0x8f;  // above U+10FFFF
    } else {
        return 0;
    }
    if (at + len > text.size()) return 0;
    for (size_t i = 1; i < len; ++i) {
        const uint8_t b = byte(at + i);
        if (b < (i == 1 ? low : 0x80) || b > (i == 1 ? high : 0xbf)) return 0;
        cp = (cp << 6) | (b & 0x3f);
    }
    return len;
}

/// Code points that are controls or change how the line reads: C1 controls, zero
/// widths and direction marks, line and paragraph separators, bidirectional
/// embeddings, overrides and isolates, the BOM.
inline bool invisible(uint32_t cp) {
    return (cp >= 0x80 && cp <= 0x9f) || (cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202e) ||
           (cp >= 0x2060 && cp <= 0x2069) || cp == 0xfeff;
}

}  // namespace printable_detail

/// The offset of the first byte of `text` that is not well-formed UTF-8 (RFC 3629: no
/// overlong forms, surrogates or code points above U+10FFFF), or npos if all is.
inline size_t first_non_utf8(std::string_view text) {
    for (size_t i = 0; i < text.size();) {
        if (static_cast<uint8_t>(text[i]) < 0x80) {
            ++i;
            continue;
        }
        uint32_t cp = 0;
        const size_t len = printable_detail::utf8_char(text, i, cp);
        if (len == 0) return i;
        i += len;
    }
    return std::string_view::npos;
}

/// `text` with every byte that is not printable ASCII (0x20-0x7e) or part of a
/// well-formed UTF-8 character that prints (not a C1 control, zero-width,
/// line-separator or bidirectional-control character: printable_detail::invisible)
/// written as `\xNN` (two lowercase hex digits). Newlines, tabs and escapes
/// included: the result is one line. A backslash in `text` stays as is.
inline std::string printable(std::string_view text) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        const auto c = static_cast<uint8_t>(text[i]);
        if (c >= 0x20 && c <= 0x7e) {
            out += static_cast<char>(c);
            ++i;
            continue;
        }
        uint32_t cp = 0;
        const size_t len = c >= 0x80 ? printable_detail::utf8_char(text, i, cp) : 0;
        if (len > 0 && !printable_detail::invisible(cp)) {
            out.append(text.substr(i, len));
            i += len;
            continue;
        }
        out += "\\x";
        out += kHex[c >> 4];
        out += kHex[c & 0x0f];
        ++i;
    }
    return out;
}

}  // namespace nanovm
