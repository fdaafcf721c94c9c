// Element types and tensor types whose dims are symbolic expressions.
#pragma once

#include "ir/sym/Sym.h"
#include "base/DType.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dnnc::ir {

using dnnc::DType;
using dnnc::dtypeBytes;
using dnnc::dtypeName;
using dnnc::isFloat;
using dnnc::isInteger;
std::optional<DType> parseDType(const std::string &s);

struct TensorType {
  DType dtype = DType::F32;
  std::vector<sym::ExprRef> dims;
  size_t rank() const { return dims.size(); }
  bool operator==(const TensorType &o) const { return dtype == o.dtype && dims == o.dims; }
  // Its size in bytes, a dim expression.
  sym::ExprRef bytes() const;
  // `f32[B, T + 1, 256]`; with a binding, bound dims print as numbers.
  std::string str(const std::map<std::string, int64_t> *binding = nullptr) const;
};

std::string dimText(sym::ExprRef d, const std::map<std::string, int64_t> *binding = nullptr);

// Shape classes of SoD² (spec §7): what is needed to know an op's output shape.
enum class ShapeClass { ISDO, ISDOS, ISVDOS, EDO };
const char *shapeClassName(ShapeClass c);
const char *shapeClassMeaning(ShapeClass c);

} // namespace dnnc::ir
