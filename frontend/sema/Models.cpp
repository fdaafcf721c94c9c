// Sema: one graph per model, REPL typing in a model's scope, and Program's entry points.
#include "frontend/sema/SemaInternal.h"
#include "base/TensorIO.h"
#include "frontend/Parser.h"

#include <filesystem>

namespace dnnc::sema {

namespace fs = std::filesystem;

void Sema::buildModel(ModuleCtx &m, const ast::Decl &d, ModelInfo &info) {
  info.name = d.name;
  info.loc = d.nameRange;
  info.graph = std::make_unique<ir::Graph>();
  info.graph->name = d.name;
  info.analyzer = globalAn_;
  info.dims = globalDims_;
  ModelState state{info.graph.get(), &info, &info.graph->body, 0, 0, {}, {}};
  st_ = &state;
  struct Reset {
    ModelState *&st;
    ~Reset() { st = nullptr; }
  } reset{st_};
  ScopePtr scope = moduleScope(m);
  for (const ast::Param &p : d.params) {
    if (p.defaultValue)
      fail(DiagKind::Type, p.defaultValue->range, "model inputs cannot have default values");
    TensorType t = declaredType(*p.type, scope, true, d.name);
    ir::Value *v = info.graph->newValue(t, p.name, p.range);
    v->owner = &info.graph->body;
    info.graph->body.args.push_back(v);
    bind(scope, p.name, SVal::ofTensor(v), false, p.range);
    record(p.name, "input", SVal::ofTensor(v), p.range);
  }
  SVal result;
  if (!execBlock(d.body, scope, &result))
    fail(DiagKind::ControlFlow, d.nameRange, fmt::format("model '{}' ends without returning a value", d.name));
  checkAgainst(result, *d.type, scope, fmt::format("the result of model '{}'", d.name), DiagKind::Annotation, d.type->range, FreshDims::Rename);
  std::vector<SVal> outs = (result.kind == SVal::Kind::Tuple || result.kind == SVal::Kind::List) ? result.items
                                                                                                  : std::vector<SVal>{result};
  if (d.kind == ast::Decl::Kind::Model && !d.outputNames.empty()) {
    // Named outputs become files (`emb.npy`): every output's name, given or out{k}, is distinct.
    std::map<std::string, size_t> seen;
    for (size_t i = 0; i < d.outputNames.size(); ++i) {
      std::string name = d.outputNames[i].empty() ? fmt::format("out{}", i) : d.outputNames[i];
      if (auto [it, fresh] = seen.emplace(name, i); !fresh)
        fail(DiagKind::Redefinition, d.outputNameRanges[i],
             fmt::format("output {} of model '{}' is named '{}', as output {} is", i, d.name, name, it->second),
             {{d.outputNameRanges[it->second], "that output is here"}});
    }
    info.graph->outputNames = d.outputNames;
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    ir::Value *v = materialize(outs[i], std::nullopt, d.type->range);
    info.graph->body.yields.push_back(v);
    record(ir::outputName(*info.graph, i), "output", SVal::ofTensor(v), d.type->range);
  }
  // Params the model uses come first, in declaration order.
  std::vector<NamedValue> params;
  for (const ir::Op *op : info.graph->body.ops)
    if (op->kind == OpKind::Param)
      params.push_back({op->results[0]->name, "param", op->loc, op->results[0]->type, ir::ShapeClass::ISDO, "param"});
  std::stable_sort(params.begin(), params.end(), [](const NamedValue &a, const NamedValue &b) {
    return std::tie(a.loc.begin.file, a.loc.begin.line, a.loc.begin.col) < std::tie(b.loc.begin.file, b.loc.begin.line, b.loc.begin.col);
  });
  info.values.insert(info.values.begin(), params.begin(), params.end());
  info.scope = scope;
  info.graph->mainFile = m.ast->file;
  for (const DimInfo &dim : info.dims) {
    sym::Interval r = info.analyzer.range(dim.name);
    info.graph->dimRanges[dim.name] = {r.lo, r.hi};
  }
  for (auto &[key, mod] : modules_)
    if (mod->ast)
      info.graph->fileNames[mod->ast->file] = fs::path(mod->path).filename().string();
  ir::verify(*info.graph, info.analyzer);
}

void Sema::checkModels(ModuleCtx &m, std::vector<ModelInfo> &out) {
  for (const auto &d : m.ast->decls)
    if (d->kind == ast::Decl::Kind::Model) {
      ModelInfo info;
      buildModel(m, *d, info);
      out.push_back(std::move(info));
    }
}

ExprType Sema::typeExpression(ModelInfo &info, const ast::Expr &e) {
  // Build into a scratch region that no model holds: nothing of it survives.
  ir::Region scratch;
  ModelState state{info.graph.get(), &info, &scratch, 0, 0, {}, {}};
  state.depth = 1;
  size_t dimsMark = info.dims.size();
  sym::Analyzer saved = info.analyzer;
  st_ = &state;
  struct Reset {
    ModelState *&st;
    ModelInfo &info;
    size_t mark;
    sym::Analyzer &saved;
    ~Reset() {
      st = nullptr;
      info.dims.resize(mark);
      info.analyzer = saved;
    }
  } reset{st_, info, dimsMark, saved};
  auto scope = std::static_pointer_cast<Scope>(info.scope);
  SVal v = eval(e, scope);
  ExprType t;
  switch (v.kind) {
  case SVal::Kind::Tensor:
    t.kind = "tensor";
    t.tensor = v.tensor->type;
    if (v.tensor->def) {
      t.shapeClass = v.tensor->def->shapeClass;
      t.op = ir::opInfo(v.tensor->def->kind).spelling;
    } else {
      t.op = "input";
    }
    break;
  case SVal::Kind::Int:
    t.kind = "int";
    t.dim = an().simplify(v.dim);
    break;
  default: {
    // A tuple or list by its items' types (topk's (values, indices)), else described.
    std::function<std::string(const SVal &)> text = [&](const SVal &x) -> std::string {
      if (x.kind == SVal::Kind::Tensor)
        return x.tensor->type.str();
      if (x.kind == SVal::Kind::Int)
        return an().simplify(x.dim)->str();
      if (x.kind != SVal::Kind::Tuple && x.kind != SVal::Kind::List)
        return describe(x);
      std::vector<std::string> items;
      for (const SVal &i : x.items)
        items.push_back(text(i));
      bool tuple = x.kind == SVal::Kind::Tuple;
      return fmt::format("{}{}{}", tuple ? "(" : "[", fmt::join(items, ", "), tuple ? ")" : "]");
    };
    t.kind = "value";
    t.text = text(v);
  }
  }
  return t;
}

} // namespace dnnc::sema

namespace dnnc {

namespace fs = std::filesystem;

Program::Program() = default;
Program::~Program() = default;

bool Program::loadText(const std::string &path, std::string text, DiagnosticEngine &diags) {
  sema_ = std::make_unique<sema::Sema>(*this, diags);
  models_.clear();
  try {
    sema::ModuleCtx *m = sema_->loadFile(path, &text, {});
    if (!m)
      return false;
    sema_->checkModels(*m, models_);
  } catch (const CompileError &e) {
    diags.report(e.diag);
    return false;
  } catch (const std::overflow_error &e) {
    diags.report({DiagKind::Range, {}, std::string("a dim expression is too large: ") + e.what(), {}});
    return false;
  }
  return !diags.hasErrors();
}

bool Program::load(const std::string &path, DiagnosticEngine &diags) {
  std::string text;
  try {
    text = rt::readFile(path);
  } catch (const DataError &e) {
    diags.report({DiagKind::Import, {}, e.what(), {}});
    return false;
  }
  return loadText(path, text, diags);
}

ModelInfo *Program::model(const std::string &name) {
  for (ModelInfo &m : models_)
    if (m.name == name)
      return &m;
  return nullptr;
}

std::optional<ExprType> Program::typeExpression(ModelInfo &model, const std::string &text, DiagnosticEngine &diags) {
  int file = sources_.add("<repl>", text);
  auto e = parseExpression(sources_, file, diags);
  if (!e)
    return std::nullopt;
  sema_->setDiagnostics(diags);
  try {
    return sema_->typeExpression(model, *e);
  } catch (const CompileError &err) {
    diags.report(err.diag);
    return std::nullopt;
  } catch (const std::overflow_error &err) {
    diags.report({DiagKind::Range, {}, std::string("a dim expression is too large: ") + err.what(), {}});
    return std::nullopt;
  }
}

} // namespace dnnc
