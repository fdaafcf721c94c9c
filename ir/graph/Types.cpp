// Names, sizes and printing of element types, tensor types and shape classes.
#include "ir/graph/Types.h"

#include <stdexcept>

namespace dnnc::ir {

std::optional<DType> parseDType(const std::string &s) {
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::Bool})
    if (s == dtypeName(d))
      return d;
  return std::nullopt;
}

std::string dimText(sym::ExprRef d, const std::map<std::string, int64_t> *binding) {
  if (binding && !binding->empty()) {
    std::map<std::string, sym::ExprRef> subst;
    for (auto &[k, v] : *binding)
      subst[k] = sym::constant(v);
    try {
      sym::ExprRef e = sym::substitute(d, subst);
      if (!e->asConst() && sym::freeVars(e).empty()) // 3/0, 7/-2: dims divide by positive numbers only
        return d->str() + " (undefined: it divides by zero or by a negative number)";
      return e->str();
    } catch (const std::overflow_error &) { // a size no run makes, but still one to show
      return d->str() + " (past 2^63)";
    }
  }
  return d->str();
}

sym::ExprRef TensorType::bytes() const {
  sym::ExprRef n = sym::constant(static_cast<int64_t>(dtypeBytes(dtype)));
  for (sym::ExprRef d : dims)
    n = sym::mul(n, d);
  return n;
}

std::string TensorType::str(const std::map<std::string, int64_t> *binding) const {
  std::string out = std::string(dtypeName(dtype)) + "[";
  for (size_t i = 0; i < dims.size(); ++i)
    out += (i ? ", " : "") + dimText(dims[i], binding);
  return out + "]";
}

const char *shapeClassName(ShapeClass c) {
  switch (c) {
  case ShapeClass::ISDO: return "ISDO";
  case ShapeClass::ISDOS: return "ISDOS";
  case ShapeClass::ISVDOS: return "ISVDOS";
  case ShapeClass::EDO: return "EDO";
  }
  return "?";
}

const char *shapeClassMeaning(ShapeClass c) {
  switch (c) {
  case ShapeClass::ISDO: return "shape and value are known from input shapes alone";
  case ShapeClass::ISDOS: return "the output shape is known from the input shapes";
  case ShapeClass::ISVDOS: return "the output shape depends on input values as well as shapes";
  case ShapeClass::EDO: return "the output shape is known only by executing the op";
  }
  return "";
}

} // namespace dnnc::ir
