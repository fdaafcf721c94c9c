// Limits as data (Limits.def): each limit's name, default and bounds in one table, the
// current values in one place. Tools may lower a compile-time limit (`--limit NAME=N`,
// for tests) or set a run-time one (`--max-iterations N`); nothing raises a limit above
// its highest value, which is what keeps dnnc inside its stack.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace dnnc {

enum class Limit {
#define LIMIT(id, name, def, lo, hi, what) id,
#include "base/Limits.def"
#undef LIMIT
  Count
};

struct LimitInfo {
  Limit id;
  const char *name;
  int64_t defaultValue, lowest, highest;
  const char *what;
};

inline const std::array<LimitInfo, static_cast<size_t>(Limit::Count)> &allLimits() {
  static const std::array<LimitInfo, static_cast<size_t>(Limit::Count)> table = {{
#define LIMIT(id, name, def, lo, hi, what) {Limit::id, name, def, lo, hi, what},
#include "base/Limits.def"
#undef LIMIT
  }};
  return table;
}

inline const LimitInfo &limitInfo(Limit l) { return allLimits()[static_cast<size_t>(l)]; }

namespace detail {
inline std::array<int64_t, static_cast<size_t>(Limit::Count)> &limitValues() {
  static std::array<int64_t, static_cast<size_t>(Limit::Count)> values = [] {
    std::array<int64_t, static_cast<size_t>(Limit::Count)> v{};
    for (const LimitInfo &l : allLimits())
      v[static_cast<size_t>(l.id)] = l.defaultValue;
    return v;
  }();
  return values;
}
} // namespace detail

// The value in force (the default unless set).
inline int64_t limit(Limit l) { return detail::limitValues()[static_cast<size_t>(l)]; }

// Sets a limit; returns an error text (and changes nothing) when `value` is outside
// lowest..highest.
inline std::string setLimit(Limit l, int64_t value) {
  const LimitInfo &info = limitInfo(l);
  if (value < info.lowest || value > info.highest)
    return std::string(info.name) + " takes a value from " + std::to_string(info.lowest) + " to " +
           (info.highest == INT64_MAX ? std::string("2^63 - 1") : std::to_string(info.highest));
  detail::limitValues()[static_cast<size_t>(l)] = value;
  return "";
}

inline std::optional<Limit> findLimit(const std::string &name) {
  for (const LimitInfo &l : allLimits())
    if (name == l.name)
      return l.id;
  return std::nullopt;
}

} // namespace dnnc
