// Sema's internals, shared by the files of frontend/sema/ (frontend/Sema.h is the public
// interface): the values of analysis, scopes, modules, and the Sema class itself.
#pragma once

#include "frontend/Ast.h"
#include "frontend/Sema.h"
#include "ir/graph/OpRegistry.h"
#include "ir/transforms/RankDimPropagation.h"
#include "base/Limits.h"

#include <fmt/format.h>

#include <map>
#include <set>

namespace dnnc::sema {

using ir::DType;
using ir::OpKind;
using ir::TensorType;
using sym::ExprRef;
using sym::Rel;

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

// How diagnostics name a value ("a tensor f32[N]", "the integer 3", ...).
std::string describe(const SVal &v);

// A call's arguments, each with its source, evaluated.
using CallArgs = std::vector<std::pair<ast::Arg *, SVal>>;

// A name bound in a scope.
struct Binding {
  SVal val;
  bool isMutable = false;
  SourceRange declLoc;
};

// A block's names; a lookup walks out through the enclosing scopes, then to the module's globals.
struct Scope {
  std::shared_ptr<Scope> parent;
  ModuleCtx *module = nullptr;
  std::map<std::string, Binding> names;
  // The fn whose body this scope (with the scopes nested in it) is: a call of its own name
  // there means the builtin of that name, since recursion is not supported (nn.dropout).
  const ast::Decl *fn = nullptr;

  const ast::Decl *enclosingFn() const {
    for (const Scope *s = this; s; s = s->parent.get())
      if (s->fn)
        return s->fn;
    return nullptr;
  }
  Binding *find(const std::string &n) {
    for (Scope *s = this; s; s = s->parent.get())
      if (auto it = s->names.find(n); it != s->names.end())
        return &it->second;
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

// A module-level declaration.
struct Global {
  enum class Kind { Const, Dim, Param, Fn, Model, Import } kind;
  SVal value;                 // Const, Dim
  const ast::Decl *decl = nullptr;
  TensorType paramType;       // Param
  ModuleCtx *import = nullptr;
};

// A loaded module file: its AST and its globals.
struct ModuleCtx {
  std::string name, path;
  std::unique_ptr<ast::Module> ast;
  std::map<std::string, Global> globals;
  bool ready = false; // globals declared (false while loading: an import cycle)
};

// A list (or tuple) of compile-time values.
SVal makeList(std::vector<SVal> items, SVal::Kind k = SVal::Kind::List);
// The relation a comparison operator states; nullopt for other operators.
std::optional<Rel> relOf(ast::BinaryOp op);
// The relation that holds exactly when `r` does not.
Rel negate(Rel r);

// Makes a scope nested in `parent`.
ScopePtr child(ScopePtr parent);
// Outer vars a block assigns: they flow through an if or a loop as values.
std::vector<std::string> carriedVars(const std::vector<const ast::Block *> &blocks, ScopePtr scope);

// Semantic analysis: from the AST to one typed graph IR per model.
//
// Every call to a user `fn` is instantiated (inlined) at its call site with the dims of
// its signature unified against the arguments, so each instantiation is checked with the
// caller's symbolic shapes. Compile-time values (consts, dims, shape(x, i)) stay symbolic
// dim expressions; only tensors become graph values. Each op is typed by RDP as it is
// built (ir/transforms/RankDimPropagation.h).
class Sema {
public:
  Sema(Program &prog, DiagnosticEngine &diags) : prog_(prog), diags_(&diags) {}
  void setDiagnostics(DiagnosticEngine &d) { diags_ = &d; }

  // Loads a module file (and its imports) and declares its globals. Null when the file
  // has syntax errors (already reported).
  // `text` (a rule's suggested fix) with the fresh dims of op's named operands written as
  // shape(name, axis), which the source can say.
  std::string nameableSuggestion(std::string text, const ir::Op &op) const;
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
  SVal evalUnchecked(const ast::Expr &e, ScopePtr scope); // eval without its overflow check
  ExprRef evalDim(const ast::Expr &e, ScopePtr scope, const char *what = "a dim");
  SVal unary(const ast::Expr &e, ScopePtr scope);
  SVal binary(const ast::Expr &e, ScopePtr scope);
  SVal binaryOp(const ast::Expr &e, const SVal &a, const SVal &b);
  SVal compileTimeBinary(const SVal &a, const SVal &b, const ast::Expr &e);
  SVal call(const ast::Expr &e, ScopePtr scope);
  SVal callBuiltin(const ir::OpInfo &info, CallArgs &args, const ast::Expr &e);
  std::optional<SVal> callSemaBuiltin(const std::string &name, CallArgs &args,
                                      const ast::Expr &e);
  SVal gradCall(CallArgs &args, const ast::Expr &e);
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
  // A size known for every binding past the tensor-bytes limit or 64 bits: an error at
  // loc, `what` naming the tensor ("the result of 'zeros'", "a tensor of this type").
  void checkBytes(const ir::TensorType &t, SourceRange loc, const std::string &what);

  // ---- types ----
  // A name the type does not know yet binds to the value's dim in `scope`. Where that dim
  // is fresh (made by an op, or a loop's), Rename also renames it everywhere in the model
  // (an annotation names it); Keep leaves it (a fn's parameter: its dim names are the fn's
  // own, and the caller's dim may be a loop's, whose fixpoint renaming broke).
  enum class FreshDims { Rename, Keep };
  void checkAgainst(const SVal &v, const ast::Type &t, ScopePtr scope, const std::string &what, DiagKind kind,
                    SourceRange at, FreshDims fresh);
  void checkDim(ExprRef actual, const ast::DimItem &item, ScopePtr scope, const std::string &what, DiagKind kind,
                SourceRange at, FreshDims freshDims, const TensorType &full, size_t axis);

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

} // namespace dnnc::sema
