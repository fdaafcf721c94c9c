// Sema: values, scopes and names (lookup, binding, params, what `dnnc shapes` records).
#include "frontend/sema/SemaInternal.h"
#include "base/WeightNames.h"

namespace dnnc::sema {

std::string describe(const SVal &v) {
  switch (v.kind) {
  case SVal::Kind::None: return "nothing";
  case SVal::Kind::Tensor: return "a tensor " + v.tensor->type.str();
  case SVal::Kind::Int: return "the integer " + v.dim->str();
  case SVal::Kind::Float: return fmt::format("the float {}", v.f);
  case SVal::Kind::Bool: return v.b ? "true" : "false";
  case SVal::Kind::String: return "a string";
  case SVal::Kind::DType: return std::string("the dtype ") + ir::dtypeName(v.dtype);
  case SVal::Kind::List: return "a list";
  case SVal::Kind::Tuple: return "a tuple";
  case SVal::Kind::Function: return "the function '" + v.fn->name + "'";
  case SVal::Kind::Module: return "a module";
  }
  return "?";
}

SVal makeList(std::vector<SVal> items, SVal::Kind k) {
  SVal s;
  s.kind = k;
  s.items = std::move(items);
  return s;
}

void Sema::unknownName(const std::string &name, ScopePtr scope, SourceRange loc, const std::string &what) {
  // Suggest the closest visible name (edit distance <= 2).
  std::vector<std::string> candidates;
  for (Scope *s = scope.get(); s; s = s->parent.get())
    for (auto &[n, b] : s->names)
      candidates.push_back(n);
  if (scope->module)
    for (auto &[n, g] : scope->module->globals)
      candidates.push_back(n);
  for (const ir::OpInfo &op : ir::allOps())
    if (op.callable())
      candidates.push_back(op.spelling);
  std::string best;
  size_t bestD = 3;
  for (const std::string &c : candidates)
    if (size_t dist = editDistance(name, c); dist < bestD && dist < name.size())
      best = c, bestD = dist;
  std::vector<Note> notes;
  if (!best.empty())
    notes.push_back({{}, fmt::format("did you mean '{}'?", best)});
  fail(DiagKind::UnknownName, loc, fmt::format("unknown {} '{}'", what, name), notes);
}

std::optional<SVal> Sema::lookupGlobal(ModuleCtx &m, const std::string &name, SourceRange loc) {
  auto it = m.globals.find(name);
  if (it == m.globals.end())
    return std::nullopt;
  Global &g = it->second;
  switch (g.kind) {
  case Global::Kind::Const:
  case Global::Kind::Dim: return g.value;
  case Global::Kind::Param:
    if (!st_)
      fail(DiagKind::NotConstant, loc, fmt::format("param '{}' has no value at compile time", name));
    return SVal::ofTensor(materializeParam(m, *g.decl));
  case Global::Kind::Fn: {
    SVal f;
    f.kind = SVal::Kind::Function;
    f.fn = g.decl;
    f.module = &m;
    return f;
  }
  case Global::Kind::Import: {
    SVal mod;
    mod.kind = SVal::Kind::Module;
    mod.module = g.import;
    return mod;
  }
  case Global::Kind::Model:
    fail(DiagKind::Type, loc, fmt::format("'{}' is a model; models are entry points and cannot be used as values", name));
  }
  return std::nullopt;
}

SVal Sema::lookup(const std::string &name, ScopePtr scope, SourceRange loc) {
  if (Binding *b = scope->find(name))
    return b->val;
  if (scope->module)
    if (auto g = lookupGlobal(*scope->module, name, loc))
      return *g;
  unknownName(name, scope, loc);
}

ir::Value *Sema::materializeParam(ModuleCtx &m, const ast::Decl &d) {
  if (auto it = st_->params.find(&d); it != st_->params.end())
    return it->second;
  std::string name = m.ast->file == st_->info->loc.begin.file ? d.name : m.name + "." + d.name;
  ir::Op *op = st_->graph->newOp(OpKind::Param, d.range);
  op->attrs["name"] = name;
  if (d.value)
    op->attrs["init"] = ast::printExpr(*d.value);
  if (d.fromRange.begin.line) // the tensor name in the weights file (interop.md §15)
    op->attrs["from"] = d.from;
  if (d.frozen) // printed in IR dumps and kept by the JSON form like any attr
    op->attrs["frozen"] = true;
  ir::Value *v = st_->graph->newValue(m.globals.at(d.name).paramType, name, d.nameRange);
  v->def = op;
  op->results.push_back(v);
  // Params are hoisted to the top of the model so every region can see them.
  auto &ops = st_->graph->body.ops;
  ops.insert(ops.begin() + static_cast<long>(st_->paramCount++), op);
  st_->params[&d] = v;
  return v;
}

void Sema::nameTensor(SVal &v, const std::string &name, SourceRange loc) {
  if (v.kind == SVal::Kind::Tensor && v.tensor->name.empty()) {
    v.tensor->name = name;
    v.tensor->loc = loc;
  }
}

void Sema::bind(ScopePtr scope, const std::string &name, SVal v, bool isMutable, SourceRange loc) {
  if (auto it = scope->names.find(name); it != scope->names.end())
    fail(DiagKind::Redefinition, loc, fmt::format("'{}' is already defined in this scope", name),
         {{it->second.declLoc, "previous definition is here"}});
  // A local named as a module's dim would change what the declared types that name it
  // mean (`-> f32[T]` after `let T = 5` gave f32[5]).
  if (scope->module)
    if (auto g = scope->module->globals.find(name); g != scope->module->globals.end() && g->second.kind == Global::Kind::Dim)
      fail(DiagKind::Redefinition, loc, fmt::format("'{}' is already defined as a dim", name),
           {{g->second.decl ? g->second.decl->nameRange : SourceRange{}, "the dim is declared here"}});
  nameTensor(v, name, loc);
  scope->names[name] = Binding{std::move(v), isMutable, loc};
}

void Sema::record(const std::string &name, const std::string &role, const SVal &v, SourceRange loc) {
  if (!st_ || st_->depth > 0)
    return;
  if (v.kind == SVal::Kind::Tensor) {
    const ir::Op *def = v.tensor->def;
    st_->info->values.push_back({name, role, loc, v.tensor->type, def ? def->shapeClass : ir::ShapeClass::ISDO,
                                 def ? ir::opInfo(def->kind).spelling
                                     : (v.tensor->owner == &st_->graph->body ? "input" : "loop")});
  } else if (v.kind == SVal::Kind::Int) {
    st_->info->values.push_back({name, role, loc, TensorType{DType::I64, {}}, ir::ShapeClass::ISDO, "dim " + v.dim->str()});
  } else if (v.kind == SVal::Kind::Tuple || v.kind == SVal::Kind::List) {
    for (size_t i = 0; i < v.items.size(); ++i)
      record(fmt::format("{}[{}]", name, i), role, v.items[i], loc);
  }
}

} // namespace dnnc::sema
