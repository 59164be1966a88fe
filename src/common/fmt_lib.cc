// SPDX-License-Identifier: Apache-2.0
// fmt_lib.cc - fmt's compiled part, once for the whole tree. fmt is used as headers (no libfmt at run
// time, so the installed library needs nothing new), but not in its header-only mode: that mode puts
// format-inl.h, the formatting code itself, into every file that includes fmt, a third of the build time
// of a typical file here. The headers declare that code; this file defines it, as libfmt's own build
// does: that part of the headers, then the templates they declare extern (those of fmt 9, the Debian
// libfmt-dev that scripts/setup installs).
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {

template FMT_API auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template FMT_API auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;

#ifndef FMT_STATIC_THOUSANDS_SEPARATOR
template FMT_API locale_ref::locale_ref(const std::locale& loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;
#endif

template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API void buffer<char>::append(const char*, const char*);

template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;
template FMT_API void buffer<wchar_t>::append(const wchar_t*, const wchar_t*);

}  // namespace detail
FMT_END_NAMESPACE
