// Well-formed UTF-8 (the Unicode standard's table 3-7): no overlong forms, no surrogates,
// nothing above U+10FFFF. ANTLR's input stream throws on anything else, so sources are
// checked with this first, and diagnostics print only what it accepts.
#pragma once

#include <cstddef>
#include <string>

namespace dnnc {

// The length (1-4) of the well-formed sequence at s[i], or 0 when the bytes there are
// not one. NUL counts as malformed: no source holds it.
inline size_t utf8SequenceLength(const std::string &s, size_t i) {
  auto byte = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0x100u; };
  auto cont = [&](size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) { return byte(k) >= lo && byte(k) <= hi; };
  unsigned c = byte(0);
  if (c == 0 || c == 0x100)
    return 0;
  if (c < 0x80)
    return 1;
  if (c >= 0xC2 && c <= 0xDF)
    return cont(1) ? 2 : 0;
  if (c == 0xE0)
    return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
    return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xED) // no surrogates
    return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (c == 0xF0)
    return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3)
    return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xF4) // at most U+10FFFF
    return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0; // 0x80-0xC1, 0xF5-0xFF
}

} // namespace dnnc
