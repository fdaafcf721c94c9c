// Element types, shared by the runtime and the compiler (the runtime needs no compiler).
#pragma once

#include <cstddef>

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

} // namespace dnnc
