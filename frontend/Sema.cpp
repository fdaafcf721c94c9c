// Semantic analysis: from the AST to one typed graph IR per model.
//
// Every call to a user `fn` is instantiated (inlined) at its call site with the dims of
// its signature unified against the arguments, so each instantiation is checked with the
// caller's symbolic shapes. Compile-time values (consts, dims, shape(x, i)) stay symbolic
// dim expressions; only tensors become graph values. Each op is typed by RDP as it is
// built (ir/transforms/RankDimPropagation.h).
#include "frontend/Sema.h"

#include "frontend/Parser.h"
#include "frontend/Stack.h"
#include "ir/graph/OpRegistry.h"
#include "ir/transforms/RankDimPropagation.h"
#include "base/Limits.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace dnnc {

namespace fs = std::filesystem;
using ir::DType;
using ir::OpKind;
using ir::TensorType;
using sym::ExprRef;
using sym::Rel;

std::string stdlibDir() {
  if (const char *env = std::getenv("DNNC_STDLIB"))
    return env;
  return DNNC_STDLIB_DIR;
}

namespace {


struct ModuleCtx;

// A value during analysis: a graph tensor or a compile-time value.
struct SVal {
  enum class Kind { None, Tensor, Int, Float, Bool, String, DType, List, Tuple, Function, Module };
  Kind kind = Kind::None;
  ir::Value *tensor = nullptr;
  ExprRef dim = nullptr; // Int
  double f = 0;
  bool b = false;
  std::string s;
  DType dtype = DType::F32;
  std::vector<SVal> items;
  const ast::Decl *fn = nullptr;
  ModuleCtx *module = nullptr; // Function: its module; Module: the module itself
  SourceRange loc;

  static SVal ofTensor(ir::Value *v) {
    SVal s;
    s.kind = Kind::Tensor;
    s.tensor = v;
    return s;
  }
  static SVal ofInt(ExprRef d) {
    SVal s;
    s.kind = Kind::Int;
    s.dim = d;
    return s;
  }
  bool isNumber() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
};

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

// A call's arguments, each with its source, evaluated.
using CallArgs = std::vector<std::pair<ast::Arg *, SVal>>;

struct Binding {
  SVal val;
  bool isMutable = false;
  SourceRange declLoc;
};

struct Scope {
  std::shared_ptr<Scope> parent;
  ModuleCtx *module = nullptr;
  std::map<std::string, Binding> names;

  Binding *find(const std::string &n) {
    for (Scope *s = this; s; s = s->parent.get())
      if (auto it = s->names.find(n); it != s->names.end())
        return &it->second;
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

struct Global {
  enum class Kind { Const, Dim, Param, Fn, Model, Import } kind;
  SVal value;                 // Const, Dim
  const ast::Decl *decl = nullptr;
  TensorType paramType;       // Param
  ModuleCtx *import = nullptr;
};

struct ModuleCtx {
  std::string name, path;
  std::unique_ptr<ast::Module> ast;
  std::map<std::string, Global> globals;
  bool ready = false; // globals declared (false while loading: an import cycle)
};

// Why an annotation-or-signature check failed, for the caller to phrase.
struct TypeCheck {
  const char *what; // "annotation", "argument 'x' of 'linear'", ...
  DiagKind mismatchKind;
};

SVal makeList(std::vector<SVal> items, SVal::Kind k = SVal::Kind::List) {
  SVal s;
  s.kind = k;
  s.items = std::move(items);
  return s;
}

std::optional<Rel> relOf(const std::string &op) {
  static const std::map<std::string, Rel> rels = {{"==", Rel::EQ}, {"!=", Rel::NE}, {"<", Rel::LT},
                                                  {"<=", Rel::LE}, {">", Rel::GT},  {">=", Rel::GE}};
  auto it = rels.find(op);
  return it == rels.end() ? std::nullopt : std::optional<Rel>(it->second);
}

Rel negate(Rel r) {
  switch (r) {
  case Rel::EQ: return Rel::NE;
  case Rel::NE: return Rel::EQ;
  case Rel::LT: return Rel::GE;
  case Rel::LE: return Rel::GT;
  case Rel::GT: return Rel::LE;
  case Rel::GE: return Rel::LT;
  }
  return r;
}

// Names assigned (not declared) anywhere in a block, in first-assignment order.
void assignedNames(const ast::Block &b, std::vector<std::string> &out) {
  for (const auto &s : b) {
    if (s->kind == ast::Stmt::Kind::Assign && std::find(out.begin(), out.end(), s->names[0]) == out.end())
      out.push_back(s->names[0]);
    assignedNames(s->body, out);
    assignedNames(s->orelse, out);
  }
}

} // namespace

class Program::Sema {
public:
  Sema(Program &prog, DiagnosticEngine &diags) : prog_(prog), diags_(&diags) {}
  void setDiagnostics(DiagnosticEngine &d) { diags_ = &d; }

  // Loads a module file (and its imports) and declares its globals. Null when the file
  // has syntax errors (already reported).
  ModuleCtx *loadFile(const std::string &path, const std::string *text, SourceRange from);
  void checkModels(ModuleCtx &m, std::vector<ModelInfo> &out);
  ExprType typeExpression(ModelInfo &info, const ast::Expr &e);

private:
  struct ModelState {
    ir::Graph *graph;
    ModelInfo *info;
    ir::Region *cur;
    int depth = 0; // fn instantiation depth; names are recorded at depth 0 only
    size_t paramCount = 0;
    std::map<const ast::Decl *, ir::Value *> params;
    std::set<std::string> generated; // fresh dims not yet named by an annotation
  };

  sym::Analyzer &an() { return st_ ? st_->info->analyzer : globalAn_; }

  // ---- modules and globals ----
  void declareGlobals(ModuleCtx &m);
  std::string resolveImport(const ModuleCtx &from, const std::string &name) const;
  ScopePtr moduleScope(ModuleCtx &m) {
    auto s = std::make_shared<Scope>();
    s->module = &m;
    return s;
  }
  void buildModel(ModuleCtx &m, const ast::Decl &d, ModelInfo &info);
  TensorType declaredType(const ast::Type &t, ScopePtr scope, bool declareImplicit, const std::string &modelName);

  // ---- names ----
  SVal lookup(const std::string &name, ScopePtr scope, SourceRange loc);
  std::optional<SVal> lookupGlobal(ModuleCtx &m, const std::string &name, SourceRange loc);
  [[noreturn]] void unknownName(const std::string &name, ScopePtr scope, SourceRange loc, const std::string &what = "name");
  ir::Value *materializeParam(ModuleCtx &m, const ast::Decl &d);
  void bind(ScopePtr scope, const std::string &name, SVal v, bool isMutable, SourceRange loc);
  void nameTensor(SVal &v, const std::string &name, SourceRange loc);
  void record(const std::string &name, const std::string &role, const SVal &v, SourceRange loc);

  // ---- expressions ----
  SVal eval(const ast::Expr &e, ScopePtr scope);
  ExprRef evalDim(const ast::Expr &e, ScopePtr scope, const char *what = "a dim");
  SVal unary(const ast::Expr &e, ScopePtr scope);
  SVal binary(const ast::Expr &e, ScopePtr scope);
  SVal binaryOp(const ast::Expr &e, const SVal &a, const SVal &b);
  SVal compileTimeBinary(const std::string &op, const SVal &a, const SVal &b, const ast::Expr &e);
  SVal call(const ast::Expr &e, ScopePtr scope);
  SVal callBuiltin(const ir::OpInfo &info, CallArgs &args, const ast::Expr &e);
  std::optional<SVal> callSemaBuiltin(const std::string &name, CallArgs &args,
                                      const ast::Expr &e);
  SVal callFn(const ast::Decl &fn, ModuleCtx &m, CallArgs &args, const ast::Expr &e);
  SVal index(const ast::Expr &e, ScopePtr scope);
  ir::Value *materialize(const SVal &v, std::optional<DType> adopt, SourceRange loc);
  ir::Value *tensorOf(const SVal &v, SourceRange loc, const std::string &what);

  // ---- ops ----
  ir::Op *emit(OpKind kind, std::vector<ir::Value *> operands, std::map<std::string, ir::Attr> attrs, size_t results,
               SourceRange loc, std::optional<ir::ShapeClass> cls = std::nullopt, bool typeByRule = true);
  ExprRef freshDim(const std::string &hint, SourceRange loc, const std::string &origin);
  [[noreturn]] void ruleFailure(const ir::RuleError &err, const ir::Op &op, SourceRange loc);
  void checkResultSize(const ir::Op &op, const ir::TensorType &t, SourceRange loc);

  // ---- types ----
  void checkAgainst(const SVal &v, const ast::Type &t, ScopePtr scope, const std::string &what, DiagKind kind,
                    SourceRange at, bool bindNew);
  void checkDim(ExprRef actual, const ast::DimItem &item, ScopePtr scope, const std::string &what, DiagKind kind,
                SourceRange at, bool bindNew, const TensorType &full, size_t axis);

  // ---- statements ----
  bool execBlock(const ast::Block &b, ScopePtr scope, SVal *returned);
  bool execStmt(const ast::Stmt &s, ScopePtr scope, SVal *returned);
  void execIf(const ast::Stmt &s, ScopePtr scope, SVal *returned, bool &didReturn);
  void execLoop(const ast::Stmt &s, ScopePtr scope);
  void execAssert(const ast::Stmt &s, ScopePtr scope);

  Program &prog_;
  DiagnosticEngine *diags_;
  std::map<std::string, std::unique_ptr<ModuleCtx>> modules_;
  sym::Analyzer globalAn_;
  std::vector<DimInfo> globalDims_;
  ModelState *st_ = nullptr;
};

// ---------------------------------------------------------------------------------
// Modules and globals

ModuleCtx *Program::Sema::loadFile(const std::string &path, const std::string *text, SourceRange from) {
  std::error_code ec;
  std::string key = fs::weakly_canonical(path, ec).string();
  if (ec)
    key = path;
  if (auto it = modules_.find(key); it != modules_.end()) {
    if (!it->second->ready)
      fail(DiagKind::Import, from, fmt::format("import cycle: module '{}' imports itself", it->second->name));
    return it->second.get();
  }
  std::string content;
  if (text) {
    content = *text;
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in || fs::is_directory(path, ec))
      fail(DiagKind::Import, from, fmt::format("cannot read '{}'", path));
    std::ostringstream ss;
    ss << in.rdbuf();
    content = ss.str();
  }
  int file = prog_.sources_.add(path, content);
  auto mod = std::make_unique<ModuleCtx>();
  mod->name = fs::path(path).stem().string();
  mod->path = path;
  ModuleCtx *m = mod.get();
  modules_[key] = std::move(mod);
  m->ast = parseModule(prog_.sources_, file, *diags_);
  if (!m->ast)
    return nullptr;
  m->ast->name = m->name;
  declareGlobals(*m);
  m->ready = true;
  return m;
}

std::string Program::Sema::resolveImport(const ModuleCtx &from, const std::string &name) const {
  std::vector<std::string> dirs{fs::path(from.path).parent_path().string()};
  dirs.insert(dirs.end(), prog_.includePaths_.begin(), prog_.includePaths_.end());
  dirs.push_back(stdlibDir());
  for (const std::string &d : dirs) {
    fs::path p = fs::path(d.empty() ? "." : d) / (name + ".dnn");
    std::error_code ec;
    if (fs::is_regular_file(p, ec))
      return p.string();
  }
  return "";
}

void Program::Sema::declareGlobals(ModuleCtx &m) {
  ScopePtr scope = moduleScope(m);
  for (const auto &dp : m.ast->decls) {
    const ast::Decl &d = *dp;
    if (auto it = m.globals.find(d.name); it != m.globals.end())
      fail(DiagKind::Redefinition, d.nameRange, fmt::format("'{}' is already defined", d.name),
           {{it->second.decl->nameRange, "previous definition is here"}});
    Global g;
    g.decl = &d;
    switch (d.kind) {
    case ast::Decl::Kind::Import: {
      std::string path = resolveImport(m, d.name);
      if (path.empty())
        fail(DiagKind::Import, d.nameRange, fmt::format("cannot find module '{}'", d.name),
             {{{}, fmt::format("looked in the model's folder, the -I paths and the stdlib ({})", stdlibDir())}});
      g.kind = Global::Kind::Import;
      g.import = loadFile(path, nullptr, d.nameRange);
      if (!g.import)
        throw CompileError(diags_->diagnostics().back()); // the imported file's syntax error
      break;
    }
    case ast::Decl::Kind::Const: {
      g.kind = Global::Kind::Const;
      g.value = eval(*d.value, scope);
      if (!g.value.isNumber() || (g.value.kind == SVal::Kind::Int && !g.value.dim->isConst()))
        fail(DiagKind::NotConstant, d.value->range,
             fmt::format("a const must be a compile-time number, not {}", describe(g.value)));
      break;
    }
    case ast::Decl::Kind::Dim: {
      g.kind = Global::Kind::Dim;
      g.value = SVal::ofInt(sym::var(d.name));
      if (d.value) {
        auto lo = evalDim(*d.value, scope, "a dim range bound")->asConst();
        auto hi = evalDim(*d.hi, scope, "a dim range bound")->asConst();
        if (!lo || !hi)
          fail(DiagKind::NotConstant, d.range, "dim range bounds must be constants");
        if (*lo < 0 || *lo > *hi)
          fail(DiagKind::Range, d.value->range,
               fmt::format("the range {}..{} of dim '{}' is empty or negative", *lo, *hi, d.name));
        globalAn_.declare(d.name, *lo, *hi); // its own range, 0 allowed (not the default 1..inf narrowed)
      }
      globalDims_.push_back({d.name, d.nameRange, "declared", false});
      break;
    }
    case ast::Decl::Kind::Param: {
      g.kind = Global::Kind::Param;
      g.paramType = declaredType(*d.type, scope, false, "");
      if (d.value) {
        static const std::map<std::string, size_t> initArity = {
            {"normal", 2}, {"uniform", 2}, {"zeros", 0}, {"ones", 0}, {"full", 1}};
        const ast::Expr &init = *d.value;
        if (init.kind != ast::Expr::Kind::Call || init.callee->kind != ast::Expr::Kind::Name)
          fail(DiagKind::Type, init.range, "a param initializer is a call such as normal(0.0, 0.02), zeros() or ones()");
        auto it = initArity.find(init.callee->text);
        if (it == initArity.end())
          fail(DiagKind::UnknownName, init.callee->range, fmt::format("unknown initializer '{}'", init.callee->text),
               {{{}, "initializers: normal(mean, std), uniform(low, high), zeros(), ones(), full(value)"}});
        if (init.args.size() != it->second)
          fail(DiagKind::Arity, init.range, fmt::format("'{}' takes {} arguments, not {}", it->first, it->second, init.args.size()));
        for (const ast::Arg &a : init.args) {
          SVal v = eval(*a.value, scope);
          if (v.kind != SVal::Kind::Float && !(v.kind == SVal::Kind::Int && v.dim->isConst()))
            fail(DiagKind::NotConstant, a.range, "initializer arguments must be constant numbers");
        }
      }
      break;
    }
    case ast::Decl::Kind::Fn: g.kind = Global::Kind::Fn; break;
    case ast::Decl::Kind::Model: g.kind = Global::Kind::Model; break;
    }
    m.globals.emplace(d.name, std::move(g));
  }
}

TensorType Program::Sema::declaredType(const ast::Type &t, ScopePtr scope, bool declareImplicit, const std::string &modelName) {
  if (t.kind == ast::Type::Kind::Tuple)
    fail(DiagKind::Type, t.range, "a tuple type is allowed only as a result type");
  TensorType out;
  out.dtype = *ir::parseDType(t.dtype);
  if (static_cast<int64_t>(t.dims.size()) > limit(Limit::TensorRank))
    fail(DiagKind::Limit, t.range, fmt::format("a tensor type of rank {}: dnnc allows rank up to {} (limit tensor-rank)",
                                               t.dims.size(), limit(Limit::TensorRank)));
  for (const ast::DimItem &item : t.dims) {
    if (item.ellipsis)
      fail(DiagKind::Type, item.range, "'...' may open only the parameter types of a fn");
    if (declareImplicit && item.expr->kind == ast::Expr::Kind::Name && !scope->find(item.expr->text) &&
        !scope->module->globals.count(item.expr->text)) {
      // A dim first named in a model's signature is declared by it.
      const std::string &n = item.expr->text;
      bind(scope, n, SVal::ofInt(sym::var(n)), false, item.range);
      if (st_)
        st_->info->dims.push_back({n, item.range, "implicit in the signature of model " + modelName, false});
    }
    ExprRef d = evalDim(*item.expr, scope);
    if (an().canProve(d, Rel::LT, sym::constant(0)))
      fail(DiagKind::Range, item.range, fmt::format("dim {} is negative", d->str()));
    out.dims.push_back(d);
  }
  return out;
}

// ---------------------------------------------------------------------------------
// Names

void Program::Sema::unknownName(const std::string &name, ScopePtr scope, SourceRange loc, const std::string &what) {
  // Suggest the closest visible name (edit distance <= 2).
  auto distance = [](const std::string &a, const std::string &b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j)
      row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t prev = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        size_t cur = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] != b[j - 1])});
        prev = cur;
      }
    }
    return row[b.size()];
  };
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
    if (size_t dist = distance(name, c); dist < bestD && dist < name.size())
      best = c, bestD = dist;
  std::vector<Note> notes;
  if (!best.empty())
    notes.push_back({{}, fmt::format("did you mean '{}'?", best)});
  fail(DiagKind::UnknownName, loc, fmt::format("unknown {} '{}'", what, name), notes);
}

std::optional<SVal> Program::Sema::lookupGlobal(ModuleCtx &m, const std::string &name, SourceRange loc) {
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

SVal Program::Sema::lookup(const std::string &name, ScopePtr scope, SourceRange loc) {
  if (Binding *b = scope->find(name))
    return b->val;
  if (scope->module)
    if (auto g = lookupGlobal(*scope->module, name, loc))
      return *g;
  unknownName(name, scope, loc);
}

ir::Value *Program::Sema::materializeParam(ModuleCtx &m, const ast::Decl &d) {
  if (auto it = st_->params.find(&d); it != st_->params.end())
    return it->second;
  std::string name = m.ast->file == st_->info->loc.begin.file ? d.name : m.name + "." + d.name;
  ir::Op *op = st_->graph->newOp(OpKind::Param, d.range);
  op->attrs["name"] = name;
  if (d.value)
    op->attrs["init"] = ast::printExpr(*d.value);
  ir::Value *v = st_->graph->newValue(m.globals.at(d.name).paramType, name, d.nameRange);
  v->def = op;
  op->results.push_back(v);
  // Params are hoisted to the top of the model so every region can see them.
  auto &ops = st_->graph->body.ops;
  ops.insert(ops.begin() + static_cast<long>(st_->paramCount++), op);
  st_->params[&d] = v;
  return v;
}

void Program::Sema::nameTensor(SVal &v, const std::string &name, SourceRange loc) {
  if (v.kind == SVal::Kind::Tensor && v.tensor->name.empty()) {
    v.tensor->name = name;
    v.tensor->loc = loc;
  }
}

void Program::Sema::bind(ScopePtr scope, const std::string &name, SVal v, bool isMutable, SourceRange loc) {
  if (auto it = scope->names.find(name); it != scope->names.end())
    fail(DiagKind::Redefinition, loc, fmt::format("'{}' is already defined in this scope", name),
         {{it->second.declLoc, "previous definition is here"}});
  nameTensor(v, name, loc);
  scope->names[name] = Binding{std::move(v), isMutable, loc};
}

void Program::Sema::record(const std::string &name, const std::string &role, const SVal &v, SourceRange loc) {
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

// ---------------------------------------------------------------------------------
// Ops

ExprRef Program::Sema::freshDim(const std::string &hint, SourceRange loc, const std::string &origin) {
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

void Program::Sema::ruleFailure(const ir::RuleError &err, const ir::Op &op, SourceRange loc) {
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
    notes.push_back({{}, err.suggestion});
  fail(err.kind, loc, err.message, notes);
}

ir::Op *Program::Sema::emit(OpKind kind, std::vector<ir::Value *> operands, std::map<std::string, ir::Attr> attrs,
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
void Program::Sema::checkResultSize(const ir::Op &op, const ir::TensorType &t, SourceRange loc) {
  if (static_cast<int64_t>(t.rank()) > limit(Limit::TensorRank))
    fail(DiagKind::Limit, loc, fmt::format("this makes a tensor of rank {}: dnnc allows rank up to {} (limit tensor-rank)",
                                           t.rank(), limit(Limit::TensorRank)));
  std::string spelling = ir::opInfo(op.kind).spelling;
  for (size_t k = 0; k < t.dims.size(); ++k)
    if (!t.dims[k]->asVar() && !(t.dims[k]->isConst() && *t.dims[k]->asConst() >= 0) &&
        an().canProve(t.dims[k], Rel::LT, sym::constant(0)))
      fail(DiagKind::Range, loc, fmt::format("the result of '{}' would be {}: dim {} ({}) is negative", spelling, t.str(), k,
                                             t.dims[k]->str()));
  try {
    auto bytes = an().simplify(t.bytes())->asConst();
    if (bytes && *bytes > limit(Limit::TensorBytes))
      fail(DiagKind::Limit, loc, fmt::format("the result of '{}' would be {}: {} bytes, over the limit of {} bytes (limit tensor-bytes)",
                                             spelling, t.str(), *bytes, limit(Limit::TensorBytes)));
  } catch (const std::overflow_error &) {
    fail(DiagKind::Range, loc, fmt::format("the result of '{}' would be {}: its size overflows 64 bits", spelling, t.str()));
  }
}

ir::Value *Program::Sema::materialize(const SVal &v, std::optional<DType> adopt, SourceRange loc) {
  switch (v.kind) {
  case SVal::Kind::Tensor: return v.tensor;
  case SVal::Kind::Int: {
    DType dt = adopt.value_or(DType::I64);
    if (dt == DType::Bool)
      fail(DiagKind::DType, loc, fmt::format("the integer {} cannot be used as a bool", v.dim->str()));
    auto c = v.dim->asConst();
    ir::Op *op = c ? emit(OpKind::Constant, {}, {{"value", static_cast<double>(*c)}, {"dtype", dt}}, 1, loc, {}, false)
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

ir::Value *Program::Sema::tensorOf(const SVal &v, SourceRange loc, const std::string &what) {
  if (v.kind == SVal::Kind::Tensor || v.isNumber())
    return materialize(v, std::nullopt, loc);
  fail(DiagKind::Type, loc, fmt::format("{} must be a tensor, not {}", what, describe(v)));
}

// ---------------------------------------------------------------------------------
// Expressions

ExprRef Program::Sema::evalDim(const ast::Expr &e, ScopePtr scope, const char *what) {
  SVal v = eval(e, scope);
  if (v.kind != SVal::Kind::Int)
    fail(DiagKind::InvalidDim, e.range, fmt::format("{} must be an integer dim expression, not {}", what, describe(v)));
  return an().simplify(v.dim);
}

SVal Program::Sema::eval(const ast::Expr &e, ScopePtr scope) {
  checkStack(e.range);
  SVal out;
  switch (e.kind) {
  case ast::Expr::Kind::Int: out = SVal::ofInt(sym::constant(e.intValue)); break;
  case ast::Expr::Kind::Float:
    out.kind = SVal::Kind::Float;
    out.f = e.floatValue;
    break;
  case ast::Expr::Kind::Bool:
    out.kind = SVal::Kind::Bool;
    out.b = e.intValue != 0;
    break;
  case ast::Expr::Kind::String:
    out.kind = SVal::Kind::String;
    out.s = e.text;
    break;
  case ast::Expr::Kind::DType:
    out.kind = SVal::Kind::DType;
    out.dtype = *ir::parseDType(e.text);
    break;
  case ast::Expr::Kind::Name: out = lookup(e.text, scope, e.range); break;
  case ast::Expr::Kind::Tuple:
  case ast::Expr::Kind::List: {
    std::vector<SVal> items;
    for (const auto &i : e.items)
      items.push_back(eval(*i, scope));
    out = makeList(std::move(items), e.kind == ast::Expr::Kind::Tuple ? SVal::Kind::Tuple : SVal::Kind::List);
    break;
  }
  case ast::Expr::Kind::Unary: out = unary(e, scope); break;
  case ast::Expr::Kind::Binary: out = binary(e, scope); break;
  case ast::Expr::Kind::Call: out = call(e, scope); break;
  case ast::Expr::Kind::Index: out = index(e, scope); break;
  case ast::Expr::Kind::Member: {
    SVal base = eval(*e.items[0], scope);
    if (base.kind != SVal::Kind::Module)
      fail(DiagKind::Type, e.range, fmt::format("{} has no member '{}'", describe(base), e.text));
    auto g = lookupGlobal(*base.module, e.text, e.range);
    if (!g)
      fail(DiagKind::UnknownName, e.range, fmt::format("module '{}' has no member '{}'", base.module->name, e.text));
    out = *g;
    break;
  }
  }
  out.loc = e.range;
  return out;
}

SVal Program::Sema::unary(const ast::Expr &e, ScopePtr scope) {
  SVal v = eval(*e.items[0], scope);
  if (e.text == "+" && (v.kind == SVal::Kind::Int || v.kind == SVal::Kind::Float || v.kind == SVal::Kind::Tensor))
    return v;
  if (e.text == "-") {
    if (v.kind == SVal::Kind::Int)
      return SVal::ofInt(sym::neg(v.dim));
    if (v.kind == SVal::Kind::Float) {
      v.f = -v.f;
      return v;
    }
    if (v.kind == SVal::Kind::Tensor)
      return SVal::ofTensor(emit(OpKind::Neg, {v.tensor}, {}, 1, e.range)->results[0]);
  }
  if (e.text == "not") {
    if (v.kind == SVal::Kind::Bool) {
      v.b = !v.b;
      return v;
    }
    if (v.kind == SVal::Kind::Tensor)
      return SVal::ofTensor(emit(OpKind::Not, {v.tensor}, {}, 1, e.range)->results[0]);
  }
  fail(DiagKind::Type, e.range, fmt::format("cannot apply '{}' to {}", e.text, describe(v)));
}

SVal Program::Sema::compileTimeBinary(const std::string &op, const SVal &a, const SVal &b, const ast::Expr &e) {
  using K = SVal::Kind;
  if (op == "and" || op == "or") {
    if (a.kind != K::Bool || b.kind != K::Bool)
      fail(DiagKind::Type, e.range, fmt::format("'{}' needs bool operands, not {} and {}", op, describe(a), describe(b)));
    SVal r = a;
    r.b = op == "and" ? (a.b && b.b) : (a.b || b.b);
    return r;
  }
  if (a.kind == K::Int && b.kind == K::Int) {
    if (auto rel = relOf(op)) {
      if (an().canProve(a.dim, *rel, b.dim) || an().canProve(a.dim, negate(*rel), b.dim)) {
        SVal r;
        r.kind = K::Bool;
        r.b = an().canProve(a.dim, *rel, b.dim);
        return r;
      }
      return {}; // undecided: compared at run time
    }
    if ((op == "/" || op == "%") && b.dim->asConst() && *b.dim->asConst() <= 0)
      fail(DiagKind::Range, e.range, fmt::format("'{}' by {} in a dim expression (dims divide by positive numbers)", op, b.dim->str()));
    if (op == "+") return SVal::ofInt(sym::add(a.dim, b.dim));
    if (op == "-") return SVal::ofInt(sym::sub(a.dim, b.dim));
    if (op == "*") return SVal::ofInt(sym::mul(a.dim, b.dim));
    if (op == "/") return SVal::ofInt(sym::floorDiv(a.dim, b.dim));
    if (op == "%") return SVal::ofInt(sym::mod(a.dim, b.dim));
    if (op == "**") {
      auto n = b.dim->asConst();
      if (!n || *n < 0 || *n > 64)
        fail(DiagKind::InvalidDim, e.range, "a dim power needs a constant exponent between 0 and 64");
      ExprRef r = sym::constant(1);
      for (int64_t i = 0; i < *n; ++i)
        r = sym::mul(r, a.dim);
      return SVal::ofInt(r);
    }
  }
  auto num = [](const SVal &v) -> std::optional<double> {
    if (v.kind == K::Float)
      return v.f;
    if (v.kind == K::Int && v.dim->isConst())
      return static_cast<double>(*v.dim->asConst());
    return std::nullopt;
  };
  auto x = num(a), y = num(b);
  if (x && y && (a.kind == K::Float || b.kind == K::Float)) {
    SVal r;
    if (auto rel = relOf(op)) {
      r.kind = K::Bool;
      switch (*rel) {
      case Rel::EQ: r.b = *x == *y; break;
      case Rel::NE: r.b = *x != *y; break;
      case Rel::LT: r.b = *x < *y; break;
      case Rel::LE: r.b = *x <= *y; break;
      case Rel::GT: r.b = *x > *y; break;
      case Rel::GE: r.b = *x >= *y; break;
      }
      return r;
    }
    r.kind = K::Float;
    if (op == "+") r.f = *x + *y;
    else if (op == "-") r.f = *x - *y;
    else if (op == "*") r.f = *x * *y;
    else if (op == "/") r.f = *x / *y;
    else if (op == "%") r.f = std::fmod(*x, *y);
    else if (op == "**") r.f = std::pow(*x, *y);
    else return {};
    return r;
  }
  return {};
}

SVal Program::Sema::binary(const ast::Expr &e, ScopePtr scope) {
  // A left-deep chain (a + b + c + ..., ten thousand terms if need be) is evaluated along
  // its left spine without recursion.
  std::vector<const ast::Expr *> spine{&e};
  while (spine.back()->items[0]->kind == ast::Expr::Kind::Binary)
    spine.push_back(spine.back()->items[0].get());
  SVal acc = eval(*spine.back()->items[0], scope);
  for (auto it = spine.rbegin(); it != spine.rend(); ++it) {
    SVal b = eval(*(*it)->items[1], scope);
    acc = binaryOp(**it, acc, b);
    acc.loc = (*it)->range;
  }
  return acc;
}

SVal Program::Sema::binaryOp(const ast::Expr &e, const SVal &a, const SVal &b) {
  const std::string &op = e.text;
  if (a.kind != SVal::Kind::Tensor && b.kind != SVal::Kind::Tensor) {
    if (!a.isNumber() || !b.isNumber())
      fail(DiagKind::Type, e.range, fmt::format("cannot apply '{}' to {} and {}", op, describe(a), describe(b)));
    SVal folded = compileTimeBinary(op, a, b, e);
    if (folded.kind != SVal::Kind::None)
      return folded;
  }
  static const std::map<std::string, OpKind> kinds = {
      {"+", OpKind::Add}, {"-", OpKind::Sub}, {"*", OpKind::Mul},   {"/", OpKind::Div},  {"%", OpKind::Mod},
      {"**", OpKind::Pow}, {"@", OpKind::Matmul}, {"==", OpKind::Eq}, {"!=", OpKind::Ne}, {"<", OpKind::Lt},
      {"<=", OpKind::Le}, {">", OpKind::Gt},  {">=", OpKind::Ge},   {"and", OpKind::And}, {"or", OpKind::Or}};
  for (const SVal *v : {&a, &b})
    if (v->kind != SVal::Kind::Tensor && !v->isNumber())
      fail(DiagKind::Type, v->loc, fmt::format("cannot apply '{}' to {}", op, describe(*v)));
  // Scalar literals adopt the tensor operand's dtype.
  std::optional<DType> adopt;
  if (a.kind == SVal::Kind::Tensor)
    adopt = a.tensor->type.dtype;
  else if (b.kind == SVal::Kind::Tensor)
    adopt = b.tensor->type.dtype;
  ir::Value *x = materialize(a, adopt, a.loc), *y = materialize(b, adopt, b.loc);
  return SVal::ofTensor(emit(kinds.at(op), {x, y}, {}, 1, e.range)->results[0]);
}

// ---------------------------------------------------------------------------------
// Calls

namespace {
std::string signatureText(const std::string &name, const std::vector<ir::ParamSpec> &sig) {
  std::string out = name + "(";
  for (size_t i = 0; i < sig.size(); ++i)
    out += (i ? ", " : "") + sig[i].name + (sig[i].defaultText ? " = " + *sig[i].defaultText : "");
  return out + ")";
}

using BoundArgs = std::vector<std::optional<std::pair<ast::Arg *, SVal>>>;

// Assigns positional and keyword arguments to the callee's parameters, in order.
BoundArgs bindArguments(const std::string &callee, const std::vector<std::string> &params, CallArgs &args,
                        const std::vector<Note> &notes) {
  BoundArgs bound(params.size());
  size_t pos = 0;
  for (auto &[arg, val] : args) {
    size_t slot = 0;
    if (arg->keyword.empty()) {
      if (pos >= params.size())
        fail(DiagKind::Arity, arg->range,
             fmt::format("'{}' takes at most {} argument{}", callee, params.size(), params.size() == 1 ? "" : "s"), notes);
      slot = pos++;
    } else {
      auto it = std::find(params.begin(), params.end(), arg->keyword);
      if (it == params.end())
        fail(DiagKind::Keyword, arg->range, fmt::format("'{}' has no parameter '{}'", callee, arg->keyword), notes);
      slot = static_cast<size_t>(it - params.begin());
    }
    if (bound[slot])
      fail(DiagKind::Keyword, arg->range, fmt::format("argument '{}' of '{}' is given twice", params[slot], callee));
    bound[slot] = std::make_pair(arg, val);
  }
  return bound;
}
} // namespace

SVal Program::Sema::call(const ast::Expr &e, ScopePtr scope) {
  CallArgs args;
  for (const ast::Arg &a : e.args)
    args.emplace_back(const_cast<ast::Arg *>(&a), eval(*a.value, scope));
  const ast::Expr &callee = *e.callee;
  if (callee.kind == ast::Expr::Kind::Name && !scope->find(callee.text) &&
      !(scope->module && scope->module->globals.count(callee.text))) {
    if (auto v = callSemaBuiltin(callee.text, args, e))
      return *v;
    if (const ir::OpInfo *info = ir::findBuiltin(callee.text))
      return callBuiltin(*info, args, e);
    unknownName(callee.text, scope, callee.range, "function");
  }
  SVal f = eval(callee, scope);
  if (f.kind != SVal::Kind::Function)
    fail(DiagKind::Type, callee.range, fmt::format("{} is not a function", describe(f)));
  return callFn(*f.fn, *f.module, args, e);
}

std::optional<SVal> Program::Sema::callSemaBuiltin(const std::string &name, CallArgs &args,
                                                   const ast::Expr &e) {
  auto positional = [&](size_t min, size_t max) {
    for (auto &[a, v] : args)
      if (!a->keyword.empty())
        fail(DiagKind::Keyword, a->range, fmt::format("'{}' takes no keyword arguments", name));
    if (args.size() < min || args.size() > max)
      fail(DiagKind::Arity, e.range, fmt::format("'{}' takes {} to {} arguments, not {}", name, min, max, args.size()));
  };
  auto constAxis = [&](const SVal &v, size_t rank) {
    auto c = v.kind == SVal::Kind::Int ? v.dim->asConst() : std::nullopt;
    if (!c)
      fail(DiagKind::NotConstant, v.loc, fmt::format("the axis must be a constant integer, not {}", describe(v)));
    int64_t r = static_cast<int64_t>(rank);
    if (*c < -r || *c >= r)
      fail(DiagKind::Range, v.loc, fmt::format("axis {} is out of range for a tensor of rank {}", *c, rank));
    return static_cast<size_t>(*c < 0 ? *c + r : *c);
  };
  if (name == "shape" || name == "numel") {
    positional(1, name == "shape" ? 2 : 1);
    ir::Value *x = tensorOf(args[0].second, args[0].first->range, fmt::format("the argument of '{}'", name));
    const auto &dims = x->type.dims;
    if (name == "numel") {
      ExprRef n = sym::constant(1);
      for (ExprRef d : dims)
        n = sym::mul(n, d);
      return SVal::ofInt(n);
    }
    if (args.size() == 2)
      return SVal::ofInt(dims[constAxis(args[1].second, dims.size())]);
    std::vector<SVal> items;
    for (ExprRef d : dims)
      items.push_back(SVal::ofInt(d));
    return makeList(items);
  }
  if ((name == "min" || name == "max") && args.size() == 2 && args[0].first->keyword.empty() &&
      args[1].first->keyword.empty() && args[0].second.isNumber() && args[1].second.isNumber()) {
    const SVal &a = args[0].second, &b = args[1].second;
    if (a.kind == SVal::Kind::Int && b.kind == SVal::Kind::Int)
      return SVal::ofInt(an().simplify(name == "min" ? sym::min(a.dim, b.dim) : sym::max(a.dim, b.dim)));
    fail(DiagKind::Type, e.range, fmt::format("'{}' of two numbers needs integers (dims); for tensors use {}imum", name, name));
  }
  if (name == "arange") {
    positional(1, 3);
    std::vector<SVal> v;
    for (auto &[a, val] : args)
      v.push_back(val);
    SVal start = v.size() == 1 ? SVal::ofInt(sym::constant(0)) : v[0];
    SVal stop = v.size() == 1 ? v[0] : v[1];
    SVal step = v.size() == 3 ? v[2] : SVal::ofInt(sym::constant(1));
    bool symbolic = start.kind == SVal::Kind::Int && stop.kind == SVal::Kind::Int && step.kind == SVal::Kind::Int;
    if (symbolic) {
      auto s = step.dim->asConst();
      if (!s || *s <= 0)
        fail(DiagKind::Range, e.range, "the step of arange must be a positive constant");
      ExprRef count = an().simplify(
          sym::max(sym::floorDiv(sym::add(sym::sub(stop.dim, start.dim), sym::constant(*s - 1)), step.dim), sym::constant(0)));
      std::map<std::string, ir::Attr> attrs{{"count", count}, {"dtype", DType::I64}, {"start", start.dim}, {"step", step.dim}};
      return SVal::ofTensor(emit(OpKind::Arange, {}, attrs, 1, e.range)->results[0]);
    }
    std::vector<ir::Value *> ops;
    for (const SVal *x : {&start, &stop, &step}) {
      ir::Value *t = materialize(*x, DType::I64, x->loc.valid() ? x->loc : e.range);
      if (t->type.rank() != 0)
        fail(DiagKind::Rank, x->loc, fmt::format("arange bounds must be scalars, not {}", t->type.str()));
      ops.push_back(t);
    }
    return SVal::ofTensor(emit(OpKind::Arange, ops, {{"dtype", DType::I64}}, 1, e.range, ir::ShapeClass::ISVDOS)->results[0]);
  }
  return std::nullopt;
}

SVal Program::Sema::callBuiltin(const ir::OpInfo &info, CallArgs &args, const ast::Expr &e) {
  using PK = ir::ParamSpec::Kind;
  const auto &sig = info.signature;
  std::vector<Note> sigNote{{{}, "the signature is " + signatureText(info.spelling, sig)}};
  std::vector<std::string> names;
  for (const ir::ParamSpec &p : sig)
    names.push_back(p.name);
  BoundArgs bound = bindArguments(info.spelling, names, args, sigNote);
  // Scalar literals adopt the dtype of the first tensor operand (preferring non-bool).
  std::optional<DType> adopt;
  for (size_t i = 0; i < sig.size(); ++i)
    if (sig[i].kind == PK::Tensor && bound[i] && bound[i]->second.kind == SVal::Kind::Tensor) {
      DType d = bound[i]->second.tensor->type.dtype;
      if (!adopt || (*adopt == DType::Bool && d != DType::Bool))
        adopt = d;
    }
  std::vector<ir::Value *> operands;
  std::map<std::string, ir::Attr> attrs;
  ir::ShapeClass cls = info.shapeClass;
  std::vector<size_t> valueDims; // positions in a Vs list given by runtime values
  std::string valueListName;
  for (size_t i = 0; i < sig.size(); ++i) {
    const ir::ParamSpec &p = sig[i];
    SVal v;
    SourceRange at = e.range;
    if (bound[i]) {
      v = bound[i]->second;
      at = bound[i]->first->range;
    } else if (!p.defaultText) {
      fail(DiagKind::Arity, e.range, fmt::format("missing argument '{}' of '{}'", p.name, info.spelling), sigNote);
    } else if (*p.defaultText == "none") {
      continue;
    } else if (p.kind == PK::Float) {
      v.kind = SVal::Kind::Float;
      v.f = std::stod(*p.defaultText);
    } else if (p.kind == PK::Bool) {
      v.kind = SVal::Kind::Bool;
      v.b = *p.defaultText == "true";
    } else if (p.kind == PK::DType) {
      v.kind = SVal::Kind::DType;
      v.dtype = *ir::parseDType(*p.defaultText);
    } else {
      v = SVal::ofInt(sym::constant(std::stoll(*p.defaultText)));
    }
    std::string what = fmt::format("argument '{}' of '{}'", p.name, info.spelling);
    auto needInt = [&](const SVal &x, SourceRange loc) -> ExprRef {
      if (x.kind == SVal::Kind::Int)
        return x.dim;
      if (x.kind == SVal::Kind::Tensor)
        fail(DiagKind::NotConstant, loc, fmt::format("{} must be known at compile time (a dim or constant), not a tensor", what));
      fail(DiagKind::Type, loc, fmt::format("{} must be an integer, not {}", what, describe(x)));
    };
    auto runtimeInt = [&](const SVal &x, SourceRange loc) {
      ir::Value *t = materialize(x, std::nullopt, loc);
      if (t->type.rank() != 0 || !ir::isInteger(t->type.dtype))
        fail(DiagKind::Type, loc, fmt::format("{} must be an integer scalar, not {}", what, t->type.str()));
      operands.push_back(t);
      cls = ir::ShapeClass::ISVDOS;
      attrs["dynamic"] = true;
    };
    switch (p.kind) {
    case PK::Tensor:
      if (v.kind != SVal::Kind::Tensor && !v.isNumber())
        fail(DiagKind::Type, at, fmt::format("{} must be a tensor, not {}", what, describe(v)));
      operands.push_back(materialize(v, adopt, at));
      break;
    case PK::TensorList:
      if (v.kind != SVal::Kind::List && v.kind != SVal::Kind::Tuple)
        fail(DiagKind::Type, at, fmt::format("{} must be a list of tensors, not {}", what, describe(v)));
      if (v.items.empty())
        fail(DiagKind::Arity, at, fmt::format("{} needs at least one tensor", what));
      for (const SVal &x : v.items)
        operands.push_back(tensorOf(x, at, what));
      break;
    case PK::Int: attrs[p.name] = needInt(v, at); break;
    case PK::IntList:
    case PK::ValueList: {
      std::vector<SVal> items = (v.kind == SVal::Kind::List || v.kind == SVal::Kind::Tuple) ? v.items : std::vector<SVal>{v};
      ir::DimList dims;
      for (const SVal &x : items) {
        if (p.kind == PK::ValueList && x.kind == SVal::Kind::Tensor) {
          runtimeInt(x, at);
          valueDims.push_back(dims.size());
          valueListName = p.name;
          dims.push_back(nullptr);
        } else {
          dims.push_back(needInt(x, at));
        }
      }
      attrs[p.name] = dims;
      break;
    }
    case PK::Value:
      if (v.kind == SVal::Kind::Tensor)
        runtimeInt(v, at);
      else
        attrs[p.name] = needInt(v, at);
      break;
    case PK::Float:
      if (v.kind == SVal::Kind::Float)
        attrs[p.name] = v.f;
      else if (v.kind == SVal::Kind::Int && v.dim->isConst())
        attrs[p.name] = static_cast<double>(*v.dim->asConst());
      else
        fail(DiagKind::Type, at, fmt::format("{} must be a constant number, not {}", what, describe(v)));
      break;
    case PK::Bool:
      if (v.kind != SVal::Kind::Bool)
        fail(DiagKind::Type, at, fmt::format("{} must be true or false, not {}", what, describe(v)));
      attrs[p.name] = v.b;
      break;
    case PK::DType:
      if (v.kind == SVal::Kind::String && ir::parseDType(v.s))
        v.dtype = *ir::parseDType(v.s), v.kind = SVal::Kind::DType;
      if (v.kind != SVal::Kind::DType)
        fail(DiagKind::Type, at, fmt::format("{} must be a dtype such as f32, not {}", what, describe(v)));
      attrs[p.name] = v.dtype;
      break;
    }
  }
  // Dims given by runtime values are fresh: the op is ISVDOS.
  if (!valueDims.empty()) {
    auto &dims = std::get<ir::DimList>(attrs[valueListName]);
    ir::DimList positions;
    for (size_t i : valueDims)
      positions.push_back(sym::constant(static_cast<int64_t>(i)));
    attrs["value_dims"] = positions; // list positions given, in order, by the trailing operands
    for (size_t i : valueDims)
      dims[i] = freshDim("S", e.range, fmt::format("fresh: a value-given dim of {} at line {}", info.spelling, e.range.begin.line));
  }
  size_t results = 1;
  if (info.kind == OpKind::Topk)
    results = 2;
  if (info.kind == OpKind::Split) {
    const auto &parts = std::get<ir::DimList>(attrs.at("parts"));
    if (parts.size() == 1) {
      auto n = parts[0]->asConst();
      if (!n || *n < 1 || *n > 4096)
        fail(DiagKind::Range, e.range, "split(x, n) needs a constant number of parts between 1 and 4096");
      results = static_cast<size_t>(*n);
    } else {
      results = parts.size();
    }
  }
  if (cls == ir::ShapeClass::ISVDOS && !attrs.count("dynamic"))
    cls = ir::ShapeClass::ISDOS; // value-taking, but fed shapes only: folded at compile time
  // A concat of many operands becomes a tree of concats of at most kConcatFanIn
  // operands each: each operand is a loop nest of its own in the concat's kernel, and
  // LLVM's time on one kernel grows faster than linearly past a few dozen of them (a
  // 64-operand kernel took 4.6 s, a 32-operand one 1.5 s).
  constexpr size_t kConcatFanIn = 32;
  if (info.kind == OpKind::Concat) {
    while (operands.size() > kConcatFanIn) {
      std::vector<ir::Value *> next;
      for (size_t i = 0; i < operands.size(); i += kConcatFanIn) {
        std::vector<ir::Value *> part(operands.begin() + static_cast<std::ptrdiff_t>(i),
                                      operands.begin() + static_cast<std::ptrdiff_t>(std::min(i + kConcatFanIn, operands.size())));
        next.push_back(part.size() == 1 ? part[0] : emit(info.kind, part, attrs, 1, e.range, cls)->results[0]);
      }
      operands = std::move(next);
    }
  }
  ir::Op *op = emit(info.kind, operands, attrs, results, e.range, cls);
  if (results == 1)
    return SVal::ofTensor(op->results[0]);
  std::vector<SVal> items;
  for (ir::Value *r : op->results)
    items.push_back(SVal::ofTensor(r));
  return makeList(items, SVal::Kind::Tuple);
}

SVal Program::Sema::callFn(const ast::Decl &fn, ModuleCtx &m, CallArgs &args,
                           const ast::Expr &e) {
  if (st_ && st_->depth >= limit(Limit::CallDepth))
    fail(DiagKind::ControlFlow, e.range, fmt::format("calls of '{}' nest deeper than {} (recursion is not supported)", fn.name,
                                                     limit(Limit::CallDepth)));
  std::vector<Note> declNote{{fn.nameRange, fmt::format("'{}' is declared here", fn.name)}};
  std::vector<std::string> names;
  for (const ast::Param &p : fn.params)
    names.push_back(p.name);
  BoundArgs bound = bindArguments(fn.name, names, args, declNote);
  ScopePtr scope = moduleScope(m);
  for (size_t i = 0; i < fn.params.size(); ++i) {
    const ast::Param &p = fn.params[i];
    SVal v;
    SourceRange at = e.range;
    if (bound[i]) {
      v = bound[i]->second;
      at = bound[i]->first->range;
    } else if (p.defaultValue) {
      v = eval(*p.defaultValue, scope);
    } else {
      fail(DiagKind::Arity, e.range, fmt::format("missing argument '{}' of '{}'", p.name, fn.name), declNote);
    }
    checkAgainst(v, *p.type, scope, fmt::format("argument '{}' of '{}'", p.name, fn.name), DiagKind::Shape, at, true);
    if (v.isNumber() && p.type->hasDims)
      v = SVal::ofTensor(materialize(v, *ir::parseDType(p.type->dtype), at));
    scope->names[p.name] = Binding{v, false, p.range};
  }
  if (st_)
    ++st_->depth;
  SVal result;
  bool returned = false;
  try {
    returned = execBlock(fn.body, scope, &result);
  } catch (...) {
    if (st_)
      --st_->depth;
    throw;
  }
  if (st_)
    --st_->depth;
  if (!returned)
    fail(DiagKind::ControlFlow, fn.nameRange, fmt::format("fn '{}' ends without returning a value", fn.name));
  checkAgainst(result, *fn.type, scope, fmt::format("the result of '{}'", fn.name), DiagKind::Annotation, e.range, true);
  return result;
}

SVal Program::Sema::index(const ast::Expr &e, ScopePtr scope) {
  SVal base = eval(*e.callee, scope);
  if (base.kind == SVal::Kind::List || base.kind == SVal::Kind::Tuple) {
    if (e.subs.size() != 1 || e.subs[0].kind != ast::Subscript::Kind::Point)
      fail(DiagKind::Type, e.range, "a list or tuple takes one constant index");
    SVal i = eval(*e.subs[0].start, scope);
    auto c = i.kind == SVal::Kind::Int ? i.dim->asConst() : std::nullopt;
    if (!c)
      fail(DiagKind::NotConstant, e.subs[0].range, "a list or tuple index must be a constant integer");
    int64_t n = static_cast<int64_t>(base.items.size());
    if (*c < -n || *c >= n)
      fail(DiagKind::Range, e.subs[0].range, fmt::format("index {} is out of range for {} items", *c, n));
    return base.items[static_cast<size_t>(*c < 0 ? *c + n : *c)];
  }
  if (base.kind != SVal::Kind::Tensor)
    fail(DiagKind::Type, e.range, fmt::format("cannot index {}", describe(base)));
  ir::Value *x = base.tensor;
  const auto &dims = x->type.dims;
  size_t ellipses = 0;
  for (const auto &s : e.subs)
    ellipses += s.kind == ast::Subscript::Kind::Ellipsis;
  if (ellipses > 1)
    fail(DiagKind::Type, e.range, "an index may contain '...' only once");
  size_t given = e.subs.size() - ellipses;
  if (given > dims.size())
    fail(DiagKind::Rank, e.range, fmt::format("too many indices for {}: {} given", x->type.str(), given));
  std::vector<const ast::Subscript *> perAxis;
  for (const auto &s : e.subs) {
    if (s.kind == ast::Subscript::Kind::Ellipsis)
      perAxis.insert(perAxis.end(), dims.size() - given, nullptr);
    else
      perAxis.push_back(&s);
  }
  perAxis.resize(dims.size(), nullptr);
  ir::DimList starts, stops, steps, points;
  std::vector<ir::Value *> operands{x};
  ir::ShapeClass cls = ir::ShapeClass::ISDOS;
  // A bound: a dim expression (negative constants count from the end) or a runtime value.
  auto bound = [&](const ast::Expr &be, ExprRef dim) -> ExprRef {
    SVal v = eval(be, scope);
    if (v.kind == SVal::Kind::Int) {
      auto c = v.dim->asConst();
      return (c && *c < 0) ? an().simplify(sym::add(dim, v.dim)) : v.dim;
    }
    ir::Value *t = tensorOf(v, be.range, "an index");
    if (t->type.rank() != 0 || !ir::isInteger(t->type.dtype))
      fail(DiagKind::Type, be.range, fmt::format("an index must be an integer scalar, not {}", t->type.str()));
    operands.push_back(t);
    return nullptr;
  };
  for (size_t a = 0; a < dims.size(); ++a) {
    const ast::Subscript *s = perAxis[a];
    ExprRef one = sym::constant(1);
    if (!s) {
      starts.push_back(sym::constant(0)), stops.push_back(dims[a]), steps.push_back(one), points.push_back(sym::constant(0));
    } else if (s->kind == ast::Subscript::Kind::Point) {
      ExprRef p = bound(*s->start, dims[a]);
      starts.push_back(p), stops.push_back(p ? sym::add(p, one) : nullptr), steps.push_back(one), points.push_back(one);
    } else {
      ExprRef b = s->start ? bound(*s->start, dims[a]) : sym::constant(0);
      ExprRef en = s->stop ? bound(*s->stop, dims[a]) : dims[a];
      ExprRef st = one;
      if (s->step) {
        SVal v = eval(*s->step, scope);
        auto c = v.kind == SVal::Kind::Int ? v.dim->asConst() : std::nullopt;
        if (!c || *c <= 0)
          fail(DiagKind::Range, s->step->range, "a slice step must be a positive constant");
        st = v.dim;
      }
      if (!b || !en)
        cls = ir::ShapeClass::ISVDOS;
      starts.push_back(b), stops.push_back(en), steps.push_back(st), points.push_back(sym::constant(0));
    }
  }
  auto attrs = ir::IndexAttrs::make(std::move(starts), std::move(stops), std::move(steps), std::move(points));
  return SVal::ofTensor(emit(OpKind::Index, operands, attrs, 1, e.range, cls)->results[0]);
}

// ---------------------------------------------------------------------------------
// Types: annotations, fn signatures, declared results

void Program::Sema::checkAgainst(const SVal &v, const ast::Type &t, ScopePtr scope, const std::string &what, DiagKind kind,
                                 SourceRange at, bool bindNew) {
  std::string want = ast::printType(t);
  if (t.kind == ast::Type::Kind::Tuple) {
    if ((v.kind != SVal::Kind::Tuple && v.kind != SVal::Kind::List) || v.items.size() != t.elements.size())
      fail(DiagKind::Type, at, fmt::format("{} should be a tuple {}, not {}", what, want, describe(v)));
    for (size_t i = 0; i < v.items.size(); ++i)
      checkAgainst(v.items[i], *t.elements[i], scope, fmt::format("{} (item {})", what, i), kind, at, bindNew);
    return;
  }
  DType dt = *ir::parseDType(t.dtype);
  if (v.isNumber() && t.dims.empty()) {
    bool ok = v.kind == SVal::Kind::Bool ? dt == DType::Bool
                                         : (v.kind == SVal::Kind::Float ? ir::isFloat(dt) : dt != DType::Bool);
    if (!ok)
      fail(DiagKind::DType, at, fmt::format("{} should be {}, not {}", what, want, describe(v)));
    return;
  }
  if (v.kind != SVal::Kind::Tensor)
    fail(DiagKind::Type, at, fmt::format("{} should be a tensor {}, not {}", what, want, describe(v)));
  const TensorType &got = v.tensor->type;
  if (got.dtype != dt)
    fail(DiagKind::DType, at, fmt::format("{} should be {} but is {}: element types {} and {} differ", what, want,
                                          got.str(), t.dtype, ir::dtypeName(got.dtype)));
  size_t ellipses = 0;
  for (size_t i = 0; i < t.dims.size(); ++i)
    if (t.dims[i].ellipsis) {
      ++ellipses;
      if (i != 0)
        fail(DiagKind::Type, t.dims[i].range, "'...' may only open a type");
    }
  size_t fixed = t.dims.size() - ellipses;
  if (got.rank() < fixed || (!ellipses && got.rank() != fixed))
    fail(DiagKind::Rank, at, fmt::format("{} should have rank {}{} ({}) but is {}", what, ellipses ? "at least " : "", fixed,
                                         want, got.str()));
  size_t lead = got.rank() - fixed;
  if (ellipses) {
    std::vector<SVal> leading;
    for (size_t i = 0; i < lead; ++i)
      leading.push_back(SVal::ofInt(got.dims[i]));
    if (Binding *b = scope->find("...")) {
      bool same = b->val.items.size() == lead;
      for (size_t i = 0; same && i < lead; ++i)
        same = an().canProve(b->val.items[i].dim, Rel::EQ, got.dims[i]);
      if (!same)
        fail(DiagKind::Shape, at, fmt::format("{} is {}, whose leading dims differ from those '...' matched before", what, got.str()));
    } else {
      scope->names["..."] = Binding{makeList(leading), false, t.range};
    }
  }
  for (size_t j = ellipses; j < t.dims.size(); ++j) {
    size_t axis = lead + j - ellipses;
    checkDim(got.dims[axis], t.dims[j], scope, what + " should be " + want + " but is " + got.str(), kind, at, bindNew, got, axis);
  }
}

void Program::Sema::checkDim(ExprRef actual, const ast::DimItem &item, ScopePtr scope, const std::string &what, DiagKind kind,
                             SourceRange at, bool bindNew, const TensorType &full, size_t axis) {
  const ast::Expr &ex = *item.expr;
  const sym::Atom *fresh = actual->asVar();
  bool isFresh = st_ && fresh && st_->generated.count(fresh->name);
  auto retype = [&](const std::string &name, ExprRef value) {
    // Backward propagation: every type that mentions the fresh dim now says `value`.
    std::vector<TensorType *> recorded;
    for (NamedValue &nv : st_->info->values)
      recorded.push_back(&nv.type);
    ir::unifyDim(*st_->graph, name, value, recorded);
    st_->generated.erase(name);
  };
  if (ex.kind == ast::Expr::Kind::Name && bindNew && !scope->find(ex.text) &&
      !(scope->module && scope->module->globals.count(ex.text))) {
    ExprRef bound = actual;
    bool nameFree = std::none_of(st_ ? st_->info->dims.begin() : globalDims_.end(), st_ ? st_->info->dims.end() : globalDims_.end(),
                                 [&](const DimInfo &d) { return d.name == ex.text; });
    if (isFresh && nameFree) {
      // An annotation names a fresh dim: rename it everywhere.
      bound = sym::var(ex.text);
      sym::Interval r = an().range(fresh->name);
      an().declare(ex.text, r.lo, r.hi);
      for (DimInfo &d : st_->info->dims)
        if (d.name == fresh->name)
          d.name = ex.text, d.origin = "named by an annotation; " + d.origin, d.loc = item.range;
      retype(fresh->name, bound);
    }
    scope->names[ex.text] = Binding{SVal::ofInt(bound), false, item.range};
    return;
  }
  ExprRef want = evalDim(ex, scope);
  if (actual == want || an().canProve(actual, Rel::EQ, want))
    return;
  auto fv = sym::freeVars(want);
  if (isFresh && !std::binary_search(fv.begin(), fv.end(), fresh->name)) {
    std::string name = fresh->name;
    for (DimInfo &d : st_->info->dims)
      if (d.name == name)
        d.origin = fmt::format("pinned to {} by a declared type; {}", want->str(), d.origin);
    retype(name, want);
    // The runtime checks what the compiler assumed.
    emit(OpKind::AssertDims, {}, {{"lhs", std::string(name)}, {"rel", std::string("==")}, {"rhs", want}}, 0, at, {}, false);
    return;
  }
  std::string msg = fmt::format("{}: dim {} is {}, not {}", what, axis, actual->str(), want->str());
  if (an().canProve(actual, Rel::NE, want))
    fail(kind, at, msg);
  fail(DiagKind::Unprovable, at, msg + ", and they can be proved neither equal nor different",
       {{{}, fmt::format("add `assert {} == {};` if they are always equal", actual->str(), want->str())}});
}

// ---------------------------------------------------------------------------------
// Statements

bool Program::Sema::execBlock(const ast::Block &b, ScopePtr scope, SVal *returned) {
  for (const auto &s : b)
    if (execStmt(*s, scope, returned))
      return true;
  return false;
}

bool Program::Sema::execStmt(const ast::Stmt &s, ScopePtr scope, SVal *returned) {
  checkStack(s.range);
  switch (s.kind) {
  case ast::Stmt::Kind::Let:
  case ast::Stmt::Kind::Var: {
    SVal v = eval(*s.value, scope);
    bool isVar = s.kind == ast::Stmt::Kind::Var;
    const char *role = isVar ? "var" : "let";
    if (s.names.size() > 1) {
      if ((v.kind != SVal::Kind::Tuple && v.kind != SVal::Kind::List) || v.items.size() != s.names.size())
        fail(DiagKind::Type, s.range, fmt::format("cannot destructure {} into {} names", describe(v), s.names.size()));
      for (size_t i = 0; i < s.names.size(); ++i) {
        bind(scope, s.names[i], v.items[i], isVar, s.nameRanges[i]);
        record(s.names[i], role, scope->names[s.names[i]].val, s.nameRanges[i]);
      }
      return false;
    }
    if (s.annotation)
      checkAgainst(v, *s.annotation, scope, fmt::format("'{}'", s.names[0]), DiagKind::Annotation, s.value->range, true);
    if (isVar && v.isNumber() && st_)
      v = SVal::ofTensor(materialize(v, std::nullopt, s.value->range)); // a var may change at run time
    bind(scope, s.names[0], v, isVar, s.nameRanges[0]);
    record(s.names[0], role, scope->names[s.names[0]].val, s.nameRanges[0]);
    return false;
  }
  case ast::Stmt::Kind::Assign: {
    Binding *b = scope->find(s.names[0]);
    if (!b) {
      if (scope->module && scope->module->globals.count(s.names[0]))
        fail(DiagKind::Assign, s.nameRanges[0], fmt::format("cannot assign to the global '{}'", s.names[0]));
      unknownName(s.names[0], scope, s.nameRanges[0]);
    }
    if (!b->isMutable)
      fail(DiagKind::Assign, s.nameRanges[0], fmt::format("cannot assign to '{}': it is declared with let", s.names[0]),
           {{b->declLoc, fmt::format("'{}' is declared here; use var to make it assignable", s.names[0])}});
    SVal v = eval(*s.value, scope);
    if (v.isNumber() && b->val.kind == SVal::Kind::Tensor)
      v = SVal::ofTensor(materialize(v, b->val.tensor->type.dtype, s.value->range));
    if (b->val.kind == SVal::Kind::Tensor) {
      if (v.kind != SVal::Kind::Tensor)
        fail(DiagKind::Assign, s.value->range, fmt::format("cannot assign {} to the tensor var '{}'", describe(v), s.names[0]));
      const TensorType &old = b->val.tensor->type, &now = v.tensor->type;
      if (old.dtype != now.dtype || old.rank() != now.rank())
        fail(DiagKind::Assign, s.value->range,
             fmt::format("cannot assign {} to '{}', which is {}: a var keeps its dtype and rank", now.str(), s.names[0], old.str()),
             {{b->declLoc, fmt::format("'{}' is declared here", s.names[0])}});
    }
    if (v.kind == SVal::Kind::Tensor && v.tensor->name.empty()) {
      v.tensor->name = s.names[0];
      v.tensor->loc = s.nameRanges[0];
    }
    b->val = v;
    record(s.names[0], "var", v, s.nameRanges[0]);
    return false;
  }
  case ast::Stmt::Kind::Return:
    *returned = eval(*s.value, scope);
    return true;
  case ast::Stmt::Kind::If: {
    bool didReturn = false;
    execIf(s, scope, returned, didReturn);
    return didReturn;
  }
  case ast::Stmt::Kind::For:
  case ast::Stmt::Kind::While: execLoop(s, scope); return false;
  case ast::Stmt::Kind::Assert: execAssert(s, scope); return false;
  case ast::Stmt::Kind::Expr: eval(*s.value, scope); return false;
  }
  return false;
}

namespace {
ScopePtr child(ScopePtr parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  s->module = parent->module;
  return s;
}

// Outer vars a block assigns: they flow through an if or a loop as values.
std::vector<std::string> carriedVars(const std::vector<const ast::Block *> &blocks, ScopePtr scope) {
  std::vector<std::string> names, out;
  for (const ast::Block *b : blocks)
    assignedNames(*b, names);
  for (const std::string &n : names)
    if (Binding *b = scope->find(n); b && b->isMutable)
      out.push_back(n);
  return out;
}
} // namespace

void Program::Sema::execIf(const ast::Stmt &s, ScopePtr scope, SVal *returned, bool &didReturn) {
  SVal cond = eval(*s.value, scope);
  if (cond.kind == SVal::Kind::Bool) {
    // A compile-time condition: only the taken branch exists.
    didReturn = execBlock(cond.b ? s.body : s.orelse, child(scope), returned);
    return;
  }
  if (cond.kind != SVal::Kind::Tensor || cond.tensor->type.dtype != DType::Bool || cond.tensor->type.rank() != 0)
    fail(DiagKind::Type, s.value->range,
         fmt::format("the condition of an if must be bool[] (a scalar) or a compile-time bool, not {}", describe(cond)),
         {{{}, "reduce a bool tensor to a scalar first, e.g. max(p) > 0.5"}});
  if (!st_)
    fail(DiagKind::NotConstant, s.range, "a data-dependent if needs a model to run in");
  std::vector<std::string> carried = carriedVars({&s.body, &s.orelse}, scope);
  std::vector<SVal> entry;
  for (const std::string &n : carried) {
    Binding *b = scope->find(n);
    b->val = SVal::ofTensor(materialize(b->val, std::nullopt, s.range));
    entry.push_back(b->val);
  }
  ir::Op *op = st_->graph->newOp(OpKind::If, s.range);
  op->operands.push_back(cond.tensor);
  std::vector<std::vector<ir::Value *>> branchOut;
  ir::Region *outer = st_->cur;
  for (const ast::Block *block : {&s.body, &s.orelse}) {
    auto region = std::make_unique<ir::Region>();
    st_->cur = region.get();
    SVal ignored;
    bool ret;
    try {
      ret = execBlock(*block, child(scope), &ignored);
    } catch (...) {
      st_->cur = outer;
      throw;
    }
    st_->cur = outer;
    if (ret)
      fail(DiagKind::ControlFlow, s.range, "a return inside an if on a run-time condition is not supported",
           {{{}, "assign the result to a var in each branch and return it after the if"}});
    std::vector<ir::Value *> outs;
    for (size_t i = 0; i < carried.size(); ++i) {
      Binding *b = scope->find(carried[i]);
      outs.push_back(materialize(b->val, entry[i].tensor->type.dtype, s.range));
      b->val = entry[i];
    }
    region->yields = outs;
    branchOut.push_back(outs);
    op->regions.push_back(std::move(region));
  }
  bool fresh = false;
  std::string origin = fmt::format("fresh: the branches of the if at line {} disagree", s.range.begin.line);
  ir::PropagationContext ctx{an(), [&](const std::string &hint) { return freshDim(hint, s.range, origin); }};
  for (size_t i = 0; i < carried.size(); ++i) {
    const TensorType &a = branchOut[0][i]->type, &b = branchOut[1][i]->type;
    auto joined = ir::joinTypes(a, b, ctx, fresh);
    if (!joined)
      fail(DiagKind::ControlFlow, s.range,
           fmt::format("'{}' is {} after one branch and {} after the other; branches must agree on dtype and rank", carried[i],
                       a.str(), b.str()));
    ir::Value *r = st_->graph->newValue(*joined, carried[i], scope->find(carried[i])->declLoc);
    r->def = op;
    op->results.push_back(r);
    scope->find(carried[i])->val = SVal::ofTensor(r);
  }
  op->shapeClass = fresh ? ir::ShapeClass::EDO : ir::ShapeClass::ISDOS;
  st_->cur->ops.push_back(op);
}

void Program::Sema::execLoop(const ast::Stmt &s, ScopePtr scope) {
  if (!st_)
    fail(DiagKind::NotConstant, s.range, "a loop needs a model to run in");
  bool isFor = s.kind == ast::Stmt::Kind::For;
  ir::Op *op = st_->graph->newOp(isFor ? OpKind::For : OpKind::While, s.range);
  ExprRef trips = nullptr;
  if (isFor) {
    SVal lo = eval(*s.value, scope), hi = eval(*s.hi, scope);
    if (lo.kind == SVal::Kind::Int && hi.kind == SVal::Kind::Int) {
      op->attrs["lo"] = lo.dim;
      op->attrs["hi"] = hi.dim;
      trips = an().simplify(sym::max(sym::sub(hi.dim, lo.dim), sym::constant(0)));
    } else {
      for (const SVal *b : {&lo, &hi}) {
        ir::Value *t = materialize(*b, DType::I64, b->loc);
        if (t->type.rank() != 0 || !ir::isInteger(t->type.dtype))
          fail(DiagKind::Type, b->loc, fmt::format("loop bounds must be integer scalars, not {}", t->type.str()));
        op->operands.push_back(t);
      }
    }
  }
  std::vector<std::string> carried = carriedVars({&s.body}, scope);
  std::vector<SVal> entry;
  for (const std::string &n : carried) {
    Binding *b = scope->find(n);
    b->val = SVal::ofTensor(materialize(b->val, std::nullopt, s.range));
    entry.push_back(b->val);
    op->operands.push_back(b->val.tensor);
  }
  std::string carriedText;
  for (const std::string &n : carried)
    carriedText += (carriedText.empty() ? "" : ",") + n;
  op->attrs["carried"] = carriedText;

  // Runs the body with the carried vars typed `types`; returns their types after it.
  std::vector<TensorType> types;
  for (const SVal &v : entry)
    types.push_back(v.tensor->type);
  ir::Region *outer = st_->cur;
  std::unique_ptr<ir::Region> body, cond;
  auto runRegion = [&](const ast::Block *block, const ast::Expr *condExpr) {
    auto region = std::make_unique<ir::Region>();
    ScopePtr inner = child(scope);
    if (isFor && block) {
      ir::Value *i = st_->graph->newValue({DType::I64, {}}, s.names[0], s.nameRanges[0]);
      i->owner = region.get();
      region->args.push_back(i);
      inner->names[s.names[0]] = Binding{SVal::ofTensor(i), false, s.nameRanges[0]};
    }
    for (size_t k = 0; k < carried.size(); ++k) {
      ir::Value *a = st_->graph->newValue(types[k], carried[k], scope->find(carried[k])->declLoc);
      a->owner = region.get();
      region->args.push_back(a);
      scope->find(carried[k])->val = SVal::ofTensor(a);
    }
    st_->cur = region.get();
    try {
      if (condExpr) {
        SVal c = eval(*condExpr, inner);
        ir::Value *t = materialize(c, DType::Bool, condExpr->range);
        if (t->type.dtype != DType::Bool || t->type.rank() != 0)
          fail(DiagKind::Type, condExpr->range, fmt::format("the condition of a while must be bool[], not {}", t->type.str()));
        region->yields.push_back(t);
      } else {
        SVal ignored;
        if (execBlock(*block, inner, &ignored))
          fail(DiagKind::ControlFlow, s.range, "a return inside a loop is not supported",
               {{{}, "assign the result to a var and return it after the loop"}});
        for (size_t k = 0; k < carried.size(); ++k) {
          Binding *b = scope->find(carried[k]);
          region->yields.push_back(materialize(b->val, types[k].dtype, s.range));
        }
      }
    } catch (...) {
      st_->cur = outer;
      throw;
    }
    st_->cur = outer;
    for (size_t k = 0; k < carried.size(); ++k)
      scope->find(carried[k])->val = entry[k];
    return region;
  };

  // Fixpoint: run the body; axes whose dims change become generic loop dims; run again.
  // Axes that enter equal and grow by the same constant share one generic dim (a KV
  // cache and the token list of a decoder), which the final pass confirms.
  std::string origin = fmt::format("fresh: loop-variant in the loop at line {}", s.range.begin.line);
  std::vector<TensorType> entryTypes = types;
  for (bool share : {true, false}) {
    std::set<std::pair<size_t, size_t>> generic;
    std::map<std::string, ExprRef> groups; // "entry dim|growth" -> generic dim
    std::map<std::string, std::vector<std::pair<size_t, size_t>>> members;
    types = entryTypes;
    size_t dimsMark = st_->info->dims.size();
    for (int pass = 0;; ++pass) {
      size_t namedMark = st_->info->values.size();
      body = runRegion(&s.body, nullptr);
      bool stable = true;
      for (size_t k = 0; k < carried.size(); ++k) {
        const TensorType &after = body->yields[k]->type;
        if (after.dtype != types[k].dtype || after.rank() != types[k].rank())
          fail(DiagKind::Assign, s.range,
               fmt::format("'{}' enters the loop as {} and leaves an iteration as {}; a var keeps its dtype and rank",
                           carried[k], types[k].str(), after.str()));
        for (size_t axis : ir::loopVariantAxes(types[k], after, an())) {
          if (generic.count({k, axis}))
            continue; // already generic: its growth is read off below
          stable = false;
          if (pass >= 3)
            continue;
          generic.insert({k, axis});
          ExprRef growth = an().simplify(sym::sub(after.dims[axis], types[k].dims[axis]));
          std::string key = share && growth->isConst() ? types[k].dims[axis]->str() + "|" + growth->str()
                                                       : fmt::format("{}|{}", k, axis);
          auto [it, isNew] = groups.try_emplace(key, nullptr);
          if (isNew) {
            it->second = freshDim("L", s.range, origin);
            // The entry size bounds it from below only while the loop cannot shrink it: a
            // loop that drops an element per iteration may reach 0.
            sym::Interval entryRange = an().bounds(types[k].dims[axis]);
            bool grows = an().canProve(growth, Rel::GE, sym::constant(0));
            an().declare(it->second->asVar()->name, grows ? std::max<int64_t>(0, entryRange.lo) : 0);
          }
          members[key].push_back({k, axis});
          types[k].dims[axis] = it->second;
        }
      }
      if (stable || pass >= 3)
        break;
      st_->info->values.resize(namedMark); // the names recorded by the discarded pass
    }
    bool confirmed = true;
    for (auto &[key, axes] : members) {
      std::set<std::string> growths;
      for (auto [k, axis] : axes)
        growths.insert(an().simplify(sym::sub(body->yields[k]->type.dims[axis], types[k].dims[axis]))->str());
      confirmed = confirmed && growths.size() == 1;
    }
    if (confirmed || !share)
      break;
    st_->info->dims.resize(dimsMark); // retry with one generic dim per axis
  }
  if (!isFor)
    cond = runRegion(nullptr, s.value.get());
  bool fresh = false;
  std::string exitOrigin = fmt::format("fresh: the size after the loop at line {}", s.range.begin.line);
  ir::PropagationContext ctx{an(), [&](const std::string &hint) { return freshDim(hint, s.range, exitOrigin); }};
  bool tripsKnown = trips != nullptr;
  if (!tripsKnown) // a while loop: one trip-count dim, made only if some size grows
    for (size_t k = 0; k < carried.size() && !trips; ++k)
      if (types[k].dims != entry[k].tensor->type.dims)
        trips = freshDim("iters", s.range, fmt::format("fresh: the trip count of the loop at line {}", s.range.begin.line));
  for (size_t k = 0; k < carried.size(); ++k) {
    TensorType exit = ir::loopExitType(entry[k].tensor->type, types[k], body->yields[k]->type, trips, tripsKnown, ctx, fresh);
    ir::Value *r = st_->graph->newValue(exit, carried[k], scope->find(carried[k])->declLoc);
    r->def = op;
    op->results.push_back(r);
    scope->find(carried[k])->val = SVal::ofTensor(r);
  }
  if (cond)
    op->regions.push_back(std::move(cond));
  op->regions.push_back(std::move(body));
  op->shapeClass = fresh ? ir::ShapeClass::EDO : ir::ShapeClass::ISDOS;
  st_->cur->ops.push_back(op);
}

void Program::Sema::execAssert(const ast::Stmt &s, ScopePtr scope) {
  const ast::Expr &e = *s.value;
  auto rel = e.kind == ast::Expr::Kind::Binary ? relOf(e.text) : std::nullopt;
  if (!rel)
    fail(DiagKind::Type, e.range, "assert takes a relation between dims, such as `assert S == T;`");
  SVal a = eval(*e.items[0], scope), b = eval(*e.items[1], scope);
  if (a.kind != SVal::Kind::Int || b.kind != SVal::Kind::Int)
    fail(DiagKind::Type, e.range, fmt::format("assert relates dims, not {} and {}", describe(a), describe(b)),
         {{{}, "to act on tensor values, use if"}});
  if (an().canProve(a.dim, negate(*rel), b.dim))
    fail(DiagKind::AssertFalse, e.range,
         fmt::format("this assert can never hold: {} {} {} is false for every allowed binding", a.dim->str(), relSpelling(*rel), b.dim->str()));
  an().addFact(a.dim, *rel, b.dim);
  if (st_)
    emit(OpKind::AssertDims, {}, {{"lhs", a.dim}, {"rel", std::string(relSpelling(*rel))}, {"rhs", b.dim}}, 0, e.range, {}, false);
}

// ---------------------------------------------------------------------------------
// Models

void Program::Sema::buildModel(ModuleCtx &m, const ast::Decl &d, ModelInfo &info) {
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
  checkAgainst(result, *d.type, scope, fmt::format("the result of model '{}'", d.name), DiagKind::Annotation, d.type->range, true);
  std::vector<SVal> outs = (result.kind == SVal::Kind::Tuple || result.kind == SVal::Kind::List) ? result.items
                                                                                                  : std::vector<SVal>{result};
  for (size_t i = 0; i < outs.size(); ++i) {
    ir::Value *v = materialize(outs[i], std::nullopt, d.type->range);
    info.graph->body.yields.push_back(v);
    record(fmt::format("out{}", i), "output", SVal::ofTensor(v), d.type->range);
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

void Program::Sema::checkModels(ModuleCtx &m, std::vector<ModelInfo> &out) {
  for (const auto &d : m.ast->decls)
    if (d->kind == ast::Decl::Kind::Model) {
      ModelInfo info;
      buildModel(m, *d, info);
      out.push_back(std::move(info));
    }
}

ExprType Program::Sema::typeExpression(ModelInfo &info, const ast::Expr &e) {
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
  default:
    t.kind = "value";
    t.text = describe(v);
  }
  return t;
}

// ---------------------------------------------------------------------------------
// Program

Program::Program() = default;
Program::~Program() = default;

bool Program::loadText(const std::string &path, std::string text, DiagnosticEngine &diags) {
  sema_ = std::make_unique<Sema>(*this, diags);
  models_.clear();
  try {
    ModuleCtx *m = sema_->loadFile(path, &text, {});
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
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  if (!in || fs::is_directory(path, ec)) {
    diags.report({DiagKind::Import, {}, fmt::format("cannot read '{}'", path), {}});
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return loadText(path, ss.str(), diags);
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
