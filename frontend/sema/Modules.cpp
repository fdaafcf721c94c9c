// Sema: module files, imports and the declaration of globals (consts, dims, params).
#include "frontend/sema/SemaInternal.h"
#include "base/TensorIO.h"
#include "base/WeightNames.h"
#include "frontend/Parser.h"

#include <filesystem>

namespace dnnc {

std::string stdlibDir() {
  if (const char *env = std::getenv("DNNC_STDLIB"))
    return env;
  return DNNC_STDLIB_DIR;
}

} // namespace dnnc

namespace dnnc::sema {

namespace fs = std::filesystem;

ModuleCtx *Sema::loadFile(const std::string &path, const std::string *text, SourceRange from) {
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
    try {
      content = rt::readFile(path);
    } catch (const DataError &e) {
      fail(DiagKind::Import, from, e.what());
    }
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

std::string Sema::resolveImport(const ModuleCtx &from, const std::string &name) const {
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

void Sema::declareGlobals(ModuleCtx &m) {
  ScopePtr scope = moduleScope(m);
  for (const auto &dp : m.ast->decls) {
    const ast::Decl &d = *dp;
    if (auto it = m.globals.find(d.name); it != m.globals.end())
      fail(DiagKind::Redefinition, d.nameRange, fmt::format("'{}' is already defined", d.name),
           {{it->second.decl->nameRange, "previous definition is here"}});
    if (d.kind == ast::Decl::Kind::Fn) // (a model's are bound one by one, which finds the same)
      for (size_t i = 0; i < d.params.size(); ++i)
        for (size_t j = 0; j < i; ++j)
          if (d.params[j].name == d.params[i].name)
            fail(DiagKind::Redefinition, d.params[i].range, fmt::format("'{}' is already a parameter of '{}'", d.params[i].name, d.name),
                 {{d.params[j].range, "previous definition is here"}});
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
      if (!g.import) // its syntax error is reported: say which import read it
        fail(DiagKind::Import, d.nameRange, fmt::format("cannot import module '{}': {} does not parse", d.name, path));
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
      if (!d.from.empty() || d.fromRange.begin.line) {
        FromName name;
        size_t at = 0;
        std::string err = parseFromName(d.from, name, at);
        if (err.empty() && name.placeholders.size() > g.paramType.rank()) {
          at = name.offsets[g.paramType.rank()];
          err = fmt::format("its {} placeholders stack on the param's first {} axes, but param '{}' is {}",
                            name.placeholders.size(), name.placeholders.size(), d.name, g.paramType.str());
        }
        if (!err.empty()) {
          SourceRange r = d.fromRange; // the caret at the trouble, inside the quotes
          r.caret.col = r.begin.col + 1 + static_cast<int>(at);
          fail(DiagKind::FromName, r, fmt::format("bad tensor name \"{}\": {}", d.from, err),
               {{{}, "`from \"encoder.layer.{l}.weight\"` reads a tensor per index l of the param's first axis and stacks them"}});
        }
      }
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
    case ast::Decl::Kind::Fn:
      g.kind = Global::Kind::Fn;
      for (size_t k = 0; k < d.outputNames.size(); ++k)
        if (!d.outputNames[k].empty()) // a fn's results are values, not files
          fail(DiagKind::Type, d.outputNameRanges[k],
               fmt::format("fn '{}' names its result '{}': only a model's outputs have names", d.name, d.outputNames[k]),
               {{{}, "name the model's outputs instead: model m(...) -> (emb: f32[B, D], ...)"}});
      break;
    case ast::Decl::Kind::Model: g.kind = Global::Kind::Model; break;
    }
    m.globals.emplace(d.name, std::move(g));
  }
}

TensorType Sema::declaredType(const ast::Type &t, ScopePtr scope, bool declareImplicit, const std::string &modelName) {
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
  checkBytes(out, t.range, "a tensor of this type");
  return out;
}

} // namespace dnnc::sema
