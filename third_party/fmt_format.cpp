// fmt's compiled part (what libfmt.so holds: fmt/format-inl.h's FMT_FUNC functions and
// the template instantiations fmt/format.h declares extern), built into our binaries
// instead of linking libfmt.so, of which Debian ships no static archive.
//
// Why: libfmt.so needs libstdc++.so, so it kept libstdc++ (and libgcc_s, libm) mapped
// and relocated in every VMM process even with libstdc++ linked statically: a VMM's
// RSS overhead was 5.9 MiB in the boot bench, 1.6 of it libstdc++.so's and 0.1
// libfmt.so's pages (test host, 2026-12-02, --save smaps).
// The list follows fmt 9.1.0's own src/format.cc; any other fmt version fails to
// compile or link here, loudly.
#include <fmt/format-inl.h>

static_assert(FMT_VERSION / 100 == 901, "third_party/fmt_format.cpp follows fmt 9.1's src/format.cc");

FMT_BEGIN_NAMESPACE
namespace detail {

template FMT_API auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template FMT_API auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;

template FMT_API locale_ref::locale_ref(const std::locale& loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;

template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API void buffer<char>::append(const char*, const char*);
template FMT_API void vformat_to(buffer<char>&, string_view, basic_format_args<FMT_BUFFER_CONTEXT(char)>,
                                 locale_ref);

template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;
template FMT_API void buffer<wchar_t>::append(const wchar_t*, const wchar_t*);

}  // namespace detail
FMT_END_NAMESPACE
