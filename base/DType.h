// Element types, shared by the runtime and the compiler (the runtime needs no compiler).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace dnnc {

enum class DType { F32, F16, BF16, I32, I64, Bool };

inline bool isFloat(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16; }
inline bool isInteger(DType d) { return d == DType::I32 || d == DType::I64; }

inline const char *dtypeName(DType d) {
  switch (d) {
  case DType::F32: return "f32";
  case DType::F16: return "f16";
  case DType::BF16: return "bf16";
  case DType::I32: return "i32";
  case DType::I64: return "i64";
  case DType::Bool: return "bool";
  }
  return "?";
}

inline size_t dtypeBytes(DType d) {
  switch (d) {
  case DType::F16:
  case DType::BF16: return 2;
  case DType::F32:
  case DType::I32: return 4;
  case DType::I64: return 8;
  case DType::Bool: return 1;
  }
  return 0;
}

// A float converted to an integer dtype as every device casts (docs/semantics.md):
// truncated toward zero, saturated at the type's bounds, NaN to 0 (LLVM's fptosi.sat).
// 2^31 and 2^63 themselves are out of range, so the bounds are compared, not converted.
inline int64_t saturatingInt(double v, DType to) {
  if (std::isnan(v))
    return 0;
  bool i32 = to == DType::I32;
  if (v <= (i32 ? -0x1p31 : -0x1p63))
    return i32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
  if (v >= (i32 ? 0x1p31 : 0x1p63))
    return i32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(std::trunc(v));
}

} // namespace dnnc
