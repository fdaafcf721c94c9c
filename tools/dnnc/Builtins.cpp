// `dnnc builtins [--markdown]`: the builtin functions, read from the op registry
// (ir/graph/Ops.def through ir::allOps()) and nothing else: each callable op's signature,
// shape class, result dtype, semantics and NumPy/PyTorch equivalents. With --markdown it
// prints docs/builtins.md exactly (the test docs/builtins_fresh regenerates it and fails
// on any difference), so the document cannot drift from the ops the compiler has.
#include "tools/dnnc/Driver.h"

#include "ir/graph/OpRegistry.h"

#include <fmt/format.h>

#include <iostream>
#include <string>

namespace dnnc::tool {
namespace {

using Kind = ir::ParamSpec::Kind;

std::string kindText(Kind k) {
  switch (k) {
  case Kind::Tensor: return "";
  case Kind::TensorList: return "[tensor, ...]";
  case Kind::Int: return "int";
  case Kind::IntList: return "int or [int, ...]";
  case Kind::ValueList: return "[int or i64[], ...]";
  case Kind::Value: return "int or i64[]";
  case Kind::Float: return "float";
  case Kind::Bool: return "bool";
  case Kind::DType: return "dtype";
  }
  return "?";
}

// `sum(x, axis: int or [ints] = none, keepdims: bool = false)`: tensors by name alone.
std::string signature(const ir::OpInfo &op) {
  std::string out = std::string(op.spelling) + "(";
  for (size_t i = 0; i < op.signature.size(); ++i) {
    const ir::ParamSpec &p = op.signature[i];
    std::string kind = kindText(p.kind);
    out += (i ? ", " : "") + p.name + (kind.empty() ? "" : ": " + kind) + (p.defaultText ? " = " + *p.defaultText : "");
  }
  return out + ")";
}

bool takesValues(const ir::OpInfo &op) {
  for (const ir::ParamSpec &p : op.signature)
    if (p.kind == Kind::Value || p.kind == Kind::ValueList)
      return true;
  return false;
}

// The registry's class; an op that takes sizes is ISVDOS where an i64[] value (not a dim)
// gives them (language.md §7: folded back to its class where the value comes from shapes).
std::string shapeClass(const ir::OpInfo &op) {
  std::string c = ir::shapeClassName(op.shapeClass);
  bool refined = op.shapeClass == ir::ShapeClass::ISDO || op.shapeClass == ir::ShapeClass::ISDOS;
  return takesValues(op) && refined ? c + "; ISVDOS with i64[] values" : c;
}

std::string resultDType(const ir::OpInfo &op) {
  size_t tensors = 0;
  for (const ir::ParamSpec &p : op.signature)
    tensors += p.kind == Kind::Tensor || p.kind == Kind::TensorList;
  bool one = tensors == 1 && op.signature[0].kind == Kind::Tensor;
  switch (op.dtypeRule) {
  case ir::DTypeRule::Same: return one ? "the operand's" : "the operands' (which must agree)";
  case ir::DTypeRule::Numeric: return one ? "the operand's, not bool" : "the operands' (which must agree), not bool";
  case ir::DTypeRule::Float: return one ? "the operand's, a float type" : "the operands', a float type";
  case ir::DTypeRule::Compare: return "bool (the operands' types must agree)";
  case ir::DTypeRule::Logical: return "bool (of bool operands)";
  case ir::DTypeRule::Where: return "x's and y's (which must agree; cond is bool)";
  case ir::DTypeRule::I64: return "i64";
  case ir::DTypeRule::First: return fmt::format("{}'s", op.signature[0].name);
  case ir::DTypeRule::Attr: return "the `dtype` argument";
  case ir::DTypeRule::None: return "-";
  }
  return "?";
}

// A table cell: `|` would end it.
std::string cell(const std::string &text) {
  std::string out;
  for (char ch : text) {
    if (ch == '|')
      out += '\\';
    out += ch;
  }
  return out;
}

// An equivalent as code, unless it is a remark in parentheses ("(none)").
std::string code(const std::string &text) {
  return text.rfind('(', 0) == 0 ? cell(text) : fmt::format("`{}`", cell(text));
}

void printMarkdown(std::ostream &os) {
  os << "# Builtins\n\n"
        "<!-- Generated from the op registry (ir/graph/Ops.def) by `dnnc builtins --markdown`: edit the\n"
        "     registry, then run `build/dnnc builtins --markdown > docs/builtins.md`. The test\n"
        "     docs/builtins_fresh fails while this file differs from what dnnc prints. -->\n\n"
        "Every builtin function of the `.dnn` language, in the registry's order: its signature, its\n"
        "shape class (what the compiler knows of its result's shape, `language.md` §7), its result's\n"
        "dtype, exactly what it computes, and the NumPy and PyTorch expressions that compute the same.\n"
        "Where NumPy and PyTorch differ, NumPy wins; where both leave a value undefined (casts of\n"
        "NaN, integer division by zero, ...) dnnc defines it, per dtype, in `docs/semantics.md`.\n\n"
        "Signatures: a bare name is a tensor; an int may be a dim expression; `a = d` is a default\n"
        "(`none`: absent unless given). An `i64[]` tensor where a size may go makes the op ISVDOS.\n"
        "Arguments are positional or by keyword (`softmax(x, axis = 0)`). Floats are computed in f32\n"
        "on the compiled devices (f16/bf16 results rounded after each op) and in double, rounded once,\n"
        "by the reference interpreter.\n\n"
        "Not in this table, because they are forms of the language rather than ops: the operators\n"
        "`+ - * / % ** @ == != < <= > >= and or not` (each listed under its op: `+` is `add`),\n"
        "slicing `x[a:b]`, `shape(x, axis)` and `numel(x)` (dims, `language.md`), `min`/`max` of two\n"
        "dims, and `grad(y, [x, ...])` (`docs/training.md`). The stdlib's functions (`nn.layer_norm`,\n"
        "`nn.multihead_attention`, ...) are in `docs/stdlib.md`.\n\n"
        "| builtin | shape class | result dtype | semantics | NumPy | PyTorch |\n"
        "|---|---|---|---|---|---|\n";
  for (const ir::OpInfo &op : ir::allOps())
    if (op.callable())
      os << fmt::format("| `{}` | {} | {} | {} | {} | {} |\n", cell(signature(op)), shapeClass(op), resultDType(op),
                        cell(op.semantics), code(op.numpy), code(op.torch));
}

void printText(std::ostream &os) {
  for (const ir::OpInfo &op : ir::allOps())
    if (op.callable())
      os << fmt::format("{}  [{}]\n    {}\n", signature(op), shapeClass(op), op.semantics);
}

} // namespace

int printBuiltins(bool markdown, std::ostream &os) {
  if (markdown)
    printMarkdown(os);
  else
    printText(os);
  return kOk;
}

} // namespace dnnc::tool
