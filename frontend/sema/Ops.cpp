// Sema: building graph ops (typed by RDP as they are made), fresh dims, result size checks
// and the materialization of compile-time numbers as tensors.
#include "frontend/sema/SemaInternal.h"

#include "base/Size.h"

namespace dnnc::sema {

ExprRef Sema::freshDim(const std::string &hint, SourceRange loc, const std::string &origin) {
  auto taken = [&](const std::string &n) {
    for (const DimInfo &d : st_->info->dims)
      if (d.name == n)
        return true;
    return false;
  };
  std::string name = hint;
  for (int i = 2; taken(name); ++i)
    name = hint + std::to_string(i);
  st_->info->dims.push_back({name, loc, origin, true});
  st_->generated.insert(name);
  // A size known only by running may be 0 (nonzero may find nothing).
  st_->info->analyzer.declare(name, 0);
  return sym::var(name);
}

void Sema::ruleFailure(const ir::RuleError &err, const ir::Op &op, SourceRange loc) {
  std::vector<Note> notes;
  std::set<const ir::Value *> seen;
  for (auto &[idx, dim] : err.blame) {
    if (idx < 0 || static_cast<size_t>(idx) >= op.operands.size())
      continue;
    const ir::Value *v = op.operands[idx];
    if (v->name.empty() || !v->loc.valid() || !seen.insert(v).second)
      continue;
    notes.push_back({v->loc, fmt::format("'{}' gets dim {} here", v->name, dim->str())});
  }
  if (!err.suggestion.empty())
    notes.push_back({{}, nameableSuggestion(err.suggestion, op)});
  fail(err.kind, loc, err.message, notes);
}

std::string Sema::nameableSuggestion(std::string text, const ir::Op &op) const {
  // A dim made by a run (masked_select's N) has no name in the source: an assert about it
  // is written with shape(value, axis) of a named operand that has it.
  std::map<std::string, std::string> spelled;
  for (const ir::Value *v : op.operands)
    for (size_t k = 0; !v->name.empty() && k < v->type.rank(); ++k)
      if (const sym::Atom *a = v->type.dims[k]->asVar(); a && st_ && st_->generated.count(a->name))
        spelled.emplace(a->name, fmt::format("shape({}, {})", v->name, k));
  auto isWord = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::string out;
  for (size_t i = 0; i < text.size();) {
    size_t j = i;
    while (j < text.size() && isWord(text[j]))
      ++j;
    if (j == i) {
      out += text[i++];
      continue;
    }
    std::string word = text.substr(i, j - i);
    auto it = spelled.find(word);
    out += it != spelled.end() ? it->second : word;
    i = j;
  }
  return out;
}

ir::Op *Sema::emit(OpKind kind, std::vector<ir::Value *> operands, std::map<std::string, ir::Attr> attrs,
                            size_t results, SourceRange loc, std::optional<ir::ShapeClass> cls, bool typeByRule) {
  if (!st_)
    fail(DiagKind::NotConstant, loc, "this expression computes a tensor; a compile-time value is needed here");
  ir::Op *op = st_->graph->newOp(kind, loc);
  op->operands = std::move(operands);
  op->attrs = std::move(attrs);
  if (cls)
    op->shapeClass = *cls;
  for (size_t i = 0; i < results; ++i) {
    ir::Value *v = st_->graph->newValue({}, "", loc);
    v->def = op;
    op->results.push_back(v);
  }
  if (typeByRule) {
    std::string origin = fmt::format("fresh: the result of {} at line {}", ir::opInfo(kind).spelling, loc.begin.line);
    ir::PropagationContext ctx{an(), [&](const std::string &hint) { return freshDim(hint, loc, origin); }};
    try {
      ir::inferOp(*op, ctx);
    } catch (const ir::RuleError &err) {
      ruleFailure(err, *op, loc);
    } catch (const std::overflow_error &) {
      fail(DiagKind::Range, loc, fmt::format("the result of '{}' has a dim past 64 bits", ir::opInfo(kind).spelling));
    }
    for (const ir::Value *r : op->results)
      checkResultSize(*op, r->type, loc);
  }
  st_->cur->ops.push_back(op);
  return op;
}

// A size known to be negative, or past 64 bits or the tensor-bytes limit for every binding,
// is an error where the op is written, not at run time.
void Sema::checkResultSize(const ir::Op &op, const ir::TensorType &t, SourceRange loc) {
  if (static_cast<int64_t>(t.rank()) > limit(Limit::TensorRank))
    fail(DiagKind::Limit, loc, fmt::format("this makes a tensor of rank {}: dnnc allows rank up to {} (limit tensor-rank)",
                                           t.rank(), limit(Limit::TensorRank)));
  std::string spelling = ir::opInfo(op.kind).spelling;
  for (size_t k = 0; k < t.dims.size(); ++k)
    if (!t.dims[k]->asVar() && !(t.dims[k]->isConst() && *t.dims[k]->asConst() >= 0) &&
        an().canProve(t.dims[k], Rel::LT, sym::constant(0)))
      fail(DiagKind::Range, loc, fmt::format("the result of '{}' would be {}: dim {} ({}) is negative", spelling, t.str(), k,
                                             t.dims[k]->str()));
  checkBytes(t, loc, fmt::format("the result of '{}'", spelling));
}

void Sema::checkBytes(const ir::TensorType &t, SourceRange loc, const std::string &what) {
  // As NumPy counts (and the runtime, rt::checkedBytes): a 0 dim empties a tensor, but its
  // other dims must still multiply within 64 bits.
  std::optional<int64_t> nonzero = static_cast<int64_t>(dtypeBytes(t.dtype));
  for (sym::ExprRef d : t.dims)
    if (auto c = d->asConst(); c && *c > 0 && nonzero)
      nonzero = rt::checkedMul(*nonzero, *c);
  if (!nonzero)
    fail(DiagKind::Range, loc, fmt::format("{} would be {}: its size overflows 64 bits", what, t.str()));
  try {
    auto bytes = an().simplify(t.bytes())->asConst();
    if (bytes && *bytes > limit(Limit::TensorBytes))
      fail(DiagKind::Limit, loc, fmt::format("{} would be {}: {} bytes, over the limit of {} bytes (limit tensor-bytes)", what,
                                             t.str(), *bytes, limit(Limit::TensorBytes)));
  } catch (const std::overflow_error &) {
    fail(DiagKind::Range, loc, fmt::format("{} would be {}: its size overflows 64 bits", what, t.str()));
  }
}

ir::Value *Sema::materialize(const SVal &v, std::optional<DType> adopt, SourceRange loc) {
  switch (v.kind) {
  case SVal::Kind::Tensor: return v.tensor;
  case SVal::Kind::Int: {
    DType dt = adopt.value_or(DType::I64);
    if (dt == DType::Bool)
      fail(DiagKind::DType, loc, fmt::format("the integer {} cannot be used as a bool", v.dim->str()));
    auto c = v.dim->asConst();
    if (c && dt == DType::I32 && (*c < INT32_MIN || *c > INT32_MAX)) // it saturated, where a dim's value wraps
      fail(DiagKind::DType, loc, fmt::format("the integer {} does not fit the element type i32", *c),
           {{{}, "cast the tensor to i64 first"}});
    // A constant holds a double: an integer past 2^53 is exact only as a dim's value.
    bool exact = c && (!isInteger(dt) || (*c >= -(int64_t(1) << 53) && *c <= (int64_t(1) << 53)));
    ir::Op *op = exact ? emit(OpKind::Constant, {}, {{"value", static_cast<double>(*c)}, {"dtype", dt}}, 1, loc, {}, false)
                       : emit(OpKind::DimValue, {}, {{"value", v.dim}, {"dtype", dt}}, 1, loc, {}, false);
    op->results[0]->type = TensorType{dt, {}};
    return op->results[0];
  }
  case SVal::Kind::Float:
  case SVal::Kind::Bool: {
    DType dt = adopt.value_or(v.kind == SVal::Kind::Float ? DType::F32 : DType::Bool);
    if (v.kind == SVal::Kind::Float && !ir::isFloat(dt))
      fail(DiagKind::DType, loc, fmt::format("the float {} cannot adopt the element type {}", v.f, ir::dtypeName(dt)),
           {{{}, "write an integer, or cast the tensor to a float type"}});
    if (v.kind == SVal::Kind::Bool && dt != DType::Bool)
      fail(DiagKind::DType, loc, fmt::format("a bool cannot adopt the element type {}", ir::dtypeName(dt)));
    ir::Op *op = emit(OpKind::Constant, {}, {{"value", v.kind == SVal::Kind::Float ? v.f : (v.b ? 1.0 : 0.0)}, {"dtype", dt}},
                      1, loc, {}, false);
    op->results[0]->type = TensorType{dt, {}};
    return op->results[0];
  }
  default: fail(DiagKind::Type, loc, fmt::format("expected a tensor or a number, not {}", describe(v)));
  }
}

ir::Value *Sema::tensorOf(const SVal &v, SourceRange loc, const std::string &what) {
  if (v.kind == SVal::Kind::Tensor || v.isNumber())
    return materialize(v, std::nullopt, loc);
  fail(DiagKind::Type, loc, fmt::format("{} must be a tensor, not {}", what, describe(v)));
}

} // namespace dnnc::sema
