// dnnc import's translator: an ONNX graph (OnnxModel.h) to .dnn source, one `let` per
// node in graph order, named after the node's output. It tracks every value's dtype and
// symbolic shape (ir/sym dim expressions over the graph's dim_params) and, for small
// integer tensors computed from shapes (Shape, Gather, Concat, arithmetic, constants),
// their values as dim expressions: such shape subgraphs produce no code, and the Reshape,
// Expand, Range or ConstantOfShape they feed is written with dims (`reshape(x, [batch,
// seq, 4, 16])`). A value whose dims only running can tell (NonZero, an If whose branches
// disagree, a loop that grows a tensor) gets fresh dims named by an annotation
// (`let nz: i64[N1, 2] = nonzero(m);`). Assumes a topologically sorted graph (the ONNX
// rule); guarantees that every op type it cannot translate is reported at once, before
// any translation. The driver type-checks the result before writing it.
#include "import/OnnxImport.h"

#include "base/Error.h"
#include "base/WeightNames.h"
#include "ir/sym/Sym.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

namespace dnnc::onnx {
namespace {

using sym::ExprRef;
using Shape = std::vector<ExprRef>;

// A value of the ONNX graph as the translation knows it.
struct Val {
  std::string ref; // the .dnn name (or expression) that holds it; "" until it is needed
  DType dtype = DType::F32;
  Shape shape;
  std::optional<std::vector<ExprRef>> ints;   // its values, row-major, when known at import (shape data)
  std::shared_ptr<const rt::Tensor> constant; // its value, for initializers and Constant nodes
  // A float value that is one dim known at import, cast (a sequence length as a float, the
  // limit of a positional encoding's float Range); kept apart from `ints`, which integer
  // arithmetic reads.
  ExprRef floatOfDim = nullptr;
  std::string onnxName;
  size_t depth = 0; // the block nesting where `ref` was defined
  const Initializer *source = nullptr; // the initializer it is, if any
};

const std::set<std::string> &reservedNames() {
  // Keywords, dtypes and the builtins' names: a value named like one would shadow it.
  static const std::set<std::string> names = {
      "import", "const", "dim", "param", "fn", "model", "let", "var", "return", "if", "else", "for", "in", "while",
      "assert", "and", "or", "not", "true", "false", "frozen", "from", "none", "f32", "f16", "bf16", "i32", "i64",
      "bool", "nn", "shape", "numel", "min", "max", "arange", "grad", "normal", "uniform", "zeros", "ones", "full",
      "neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "silu", "erf", "sin", "cos",
      "floor", "ceil", "round", "sign", "add", "sub", "mul", "div", "mod", "pow", "maximum", "minimum", "eq", "ne",
      "lt", "le", "gt", "ge", "where", "clip", "cast", "sum", "mean", "prod", "argmax", "argmin", "logsumexp",
      "softmax", "log_softmax", "matmul", "conv2d", "max_pool2d", "avg_pool2d", "reshape", "transpose",
      "broadcast_to", "unsqueeze", "squeeze", "concat", "stack", "split", "flatten", "pad", "take", "embedding",
      "dropout", "one_hot", "topk", "resize", "nonzero", "masked_select", "unique", "index_add", "attention",
      "main"};
  return names;
}

std::string sanitize(const std::string &name) {
  std::string s;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    char d = ok ? c : '_';
    if (d == '_' && (s.empty() || s.back() == '_'))
      continue; // no leading or doubled underscores from separators ("/layer.0/MatMul")
    s += d;
  }
  while (!s.empty() && s.back() == '_')
    s.pop_back();
  if (s.empty())
    s = "v";
  if (s[0] >= '0' && s[0] <= '9')
    s = "v" + s;
  return s;
}

std::string floatLiteral(double v) {
  // The shortest text that reads back as the same f32 (ONNX attributes and tensors are
  // f32: 1e-12 stays 1e-12, not 9.99999996e-13).
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    return fmt::format("{:.1f}", v); // -10000.0, not -1e+04
  std::string s = fmt::format("{:.9g}", v);
  for (int digits = 1; digits < 9; ++digits) {
    std::string t = fmt::format("{:.{}g}", v, digits);
    if (static_cast<float>(std::strtod(t.c_str(), nullptr)) == static_cast<float>(v)) {
      s = t;
      break;
    }
  }
  if (s.find_first_of(".en") == std::string::npos)
    s += ".0";
  return s;
}

// An integer as .dnn source: negatives in parentheses, and -2^63, whose magnitude is no
// literal, as an expression.
std::string intLiteral(int64_t v) {
  if (v == std::numeric_limits<int64_t>::min())
    return "(-9223372036854775807 - 1)";
  return v < 0 ? fmt::format("({})", v) : std::to_string(v);
}

std::string listText(const std::vector<std::string> &items) {
  std::string s = "[";
  for (size_t k = 0; k < items.size(); ++k)
    s += (k ? ", " : "") + items[k];
  return s + "]";
}
std::string dimsText(const Shape &shape) {
  std::vector<std::string> items;
  for (ExprRef e : shape)
    items.push_back(e->str());
  return listText(items);
}
std::string intsText(const std::vector<int64_t> &v) {
  std::vector<std::string> items;
  for (int64_t x : v)
    items.push_back(std::to_string(x));
  return listText(items);
}
std::string typeText(DType d, const Shape &shape) { return dtypeName(d) + dimsText(shape); }

ExprRef product(const Shape &s, size_t from, size_t to) {
  ExprRef p = sym::constant(1);
  for (size_t k = from; k < to && k < s.size(); ++k)
    p = sym::mul(p, s[k]);
  return p;
}
bool isOne(ExprRef e) { return e->asConst() == std::optional<int64_t>(1); }

// Whether two dim expressions are equal, where that is known: their difference is a
// constant, or one is a constant below 1 and the other a product of dims (each >= 1).
std::optional<bool> knownEqual(ExprRef a, ExprRef b) {
  if (auto d = sym::sub(a, b)->asConst())
    return *d == 0;
  auto positive = [](ExprRef e) {
    return e->constant() == 0 && e->terms().size() == 1 && e->terms()[0].coef > 0 &&
           std::all_of(e->terms()[0].factors.begin(), e->terms()[0].factors.end(),
                       [](const sym::Atom *f) { return f->kind == sym::Atom::Kind::Var; });
  };
  if ((a->asConst() && *a->asConst() < 1 && positive(b)) || (b->asConst() && *b->asConst() < 1 && positive(a)))
    return false;
  return std::nullopt;
}

// NumPy broadcasting of two shapes; where both dims are symbolic and differ, the first
// is kept (the type checker proves or refuses the equality).
Shape broadcast(const Shape &a, const Shape &b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t k = 0; k < r; ++k) {
    ExprRef x = k + a.size() >= r ? a[k + a.size() - r] : nullptr;
    ExprRef y = k + b.size() >= r ? b[k + b.size() - r] : nullptr;
    out[k] = !x ? y : !y ? x : isOne(x) ? y : x;
  }
  return out;
}

class Importer {
public:
  Importer(const Model &m, const ImportOptions &o) : model_(m), opts_(o) {}
  ImportResult run();

private:
  using Handler = void (Importer::*)(const Node &);
  static const std::map<std::string, Handler> &handlers();

  const Model &model_;
  const ImportOptions &opts_;
  std::vector<std::map<std::string, Val>> scopes_;
  std::set<std::string> used_;
  std::vector<std::string> dimDecls_, paramDecls_;
  std::map<std::string, rt::Tensor> weights_;
  std::vector<std::string> *out_ = nullptr; // the block being written
  size_t indent_ = 1;
  bool usesNn_ = false;
  int freshDims_ = 0;
  std::set<std::string> asserted_; // dim facts already stated
  // Params made from initializers, so that a subgraph translated twice (a Loop body whose
  // dims change) declares each once.
  std::map<const Initializer *, std::string> paramOf_;
  const Node *node_ = nullptr;
  size_t nodeIndex_ = 0;

  // --- names, scopes, lines ---
  std::string fresh(const std::string &base) {
    std::string s = base;
    for (int k = 1; used_.count(s) || reservedNames().count(s); ++k)
      s = fmt::format("{}_{}", base, k);
    used_.insert(s);
    return s;
  }
  ExprRef freshDim() {
    std::string n;
    do
      n = fmt::format("N{}", ++freshDims_);
    while (used_.count(n));
    used_.insert(n);
    return sym::var(n);
  }
  void line(const std::string &s) { out_->push_back(std::string(2 * indent_, ' ') + s); }
  [[noreturn]] void fail(const std::string &why) const {
    throw DataError(fmt::format("{}: {}: {}", opts_.sourceName, node_ ? node_->where(nodeIndex_) : "graph", why));
  }
  Val *find(const std::string &name) {
    for (size_t k = scopes_.size(); k-- > 0;) {
      auto it = scopes_[k].find(name);
      if (it != scopes_[k].end())
        return &it->second;
    }
    return nullptr;
  }
  Val &in(size_t k) {
    if (k >= node_->inputs.size() || node_->inputs[k].empty())
      fail(fmt::format("input {} is missing", k));
    Val *v = find(node_->inputs[k]);
    if (!v)
      fail(fmt::format("input '{}' is not defined before its use", node_->inputs[k]));
    return *v;
  }
  // Every input of a variadic op (Concat, Max, Sum, ...), at least one.
  std::vector<Val *> allInputs() {
    std::vector<Val *> xs;
    for (size_t k = 0; k < node_->inputs.size(); ++k)
      xs.push_back(&in(k));
    if (xs.empty())
      fail("has no inputs");
    return xs;
  }
  bool has(size_t k) const { return k < node_->inputs.size() && !node_->inputs[k].empty(); }
  Val &bind(const std::string &onnxName, Val v) {
    v.onnxName = onnxName;
    return scopes_.back()[onnxName] = std::move(v);
  }
  // Writes `let NAME = expr;` for output k and records its type.
  Val &def(size_t k, const std::string &expr, DType dt, Shape shape, bool annotate = false) {
    if (k >= node_->outputs.size())
      fail("has too few outputs");
    std::string name = fresh(sanitize(node_->outputs[k]));
    line(annotate ? fmt::format("let {}: {} = {};", name, typeText(dt, shape), expr)
                  : fmt::format("let {} = {};", name, expr));
    Val v;
    v.ref = name;
    v.dtype = dt;
    v.shape = std::move(shape);
    v.depth = scopes_.size();
    return bind(node_->outputs[k], std::move(v));
  }
  Val &alias(size_t k, const Val &src) {
    Val v = src;
    return bind(node_->outputs[k], std::move(v));
  }
  Val &known(size_t k, DType dt, Shape shape, std::vector<ExprRef> ints) {
    Val v;
    v.dtype = dt;
    v.shape = std::move(shape);
    v.ints = std::move(ints);
    return bind(node_->outputs[k], std::move(v));
  }

  // --- values ---
  std::string ref(Val &v);
  std::string operand(Val &v, const Val &other);
  std::vector<int64_t> constInts(size_t k, const char *what);
  std::optional<std::vector<ExprRef>> dimsOf(size_t k);
  int64_t axisOf(int64_t a, size_t rank) {
    int64_t r = int64_t(rank);
    if (a < -r || a >= r)
      fail(fmt::format("axis {} is out of range for rank {}", a, rank));
    return a < 0 ? a + r : a;
  }
  std::vector<int64_t> axesOf(const Node &n, size_t rank);
  void constantScalar(size_t k, DType dt, const Shape &shape, double v);
  std::string unaryCall(const std::string &fn, Val &x) { return fmt::format("{}({})", fn, ref(x)); }

  // --- graphs ---
  void precheck(const Graph &g, const std::string &where, std::map<std::string, std::vector<std::string>> &bad);
  void translateNodes(const Graph &g);
  void translateNode(const Node &n, size_t index);
  void declareInputs(const Graph &g, std::vector<std::string> &params);
  void addInitializers(const Graph &g);
  Val *outputOf(const Graph &g, size_t k);

  // --- ops ---
  void unary(const Node &n);
  void binary(const Node &n);
  void variadic(const Node &n);
  void identity(const Node &n);
  void opConstant(const Node &n);
  void opCast(const Node &n);
  void opWhere(const Node &n);
  void opClip(const Node &n);
  void opActivation(const Node &n);
  void opMatMul(const Node &n);
  void opGemm(const Node &n);
  void opEinsum(const Node &n);
  void opConv(const Node &n);
  void opBatchNorm(const Node &n);
  void opLayerNorm(const Node &n);
  void opSoftmax(const Node &n);
  void opShape(const Node &n);
  void opReshape(const Node &n);
  void opFlatten(const Node &n);
  void opTranspose(const Node &n);
  void opSqueeze(const Node &n);
  void opUnsqueeze(const Node &n);
  void opConcat(const Node &n);
  void opSplit(const Node &n);
  void opSlice(const Node &n);
  void opGather(const Node &n);
  void opExpand(const Node &n);
  void opRange(const Node &n);
  void opConstantOfShape(const Node &n);
  void opReduce(const Node &n);
  void opArgMax(const Node &n);
  void opPool(const Node &n);
  void opGlobalPool(const Node &n);
  void opPad(const Node &n);
  void opNonZero(const Node &n);
  void opTopK(const Node &n);
  void opIf(const Node &n);
  void opLoop(const Node &n);
  std::string addBias(const std::string &y, Val &b, size_t rank);
  std::vector<Val> block(const Graph &g, const std::vector<Val> &inputs, std::vector<std::string> &lines);
  std::string scalarCond(Val &c);
  std::string scalarCondText(const Val &c);
  std::string initialValue(const Val &v);
};

// ------------------------------------------------------------------------------------
// Values

std::string Importer::ref(Val &v) {
  if (!v.ref.empty() && v.depth <= scopes_.size())
    return v.ref;
  if (v.constant) { // an initializer or Constant used as a tensor: a param
    std::string name = fresh(sanitize(v.onnxName));
    // The weights file keeps the ONNX name, unless no string literal can hold it (a line break).
    std::string key = v.onnxName.empty() || v.onnxName.find_first_of("\r\n") != std::string::npos ? name : v.onnxName;
    while (weights_.count(key))
      key += "_";
    weights_[key] = *v.constant;
    paramDecls_.push_back(key == name ? fmt::format("param {}: {};", name, typeText(v.dtype, v.shape))
                                      : fmt::format("param {}: {} from {};", name, typeText(v.dtype, v.shape),
                                                    quoteString(escapeBraces(key))));
    v.ref = name;
    v.depth = 0; // params are visible everywhere
    if (v.source)
      paramOf_[v.source] = name;
    return name;
  }
  if (v.ints) {
    // Shape data used as a tensor: the values are dims, so build it from them.
    std::vector<std::string> items;
    for (ExprRef e : *v.ints)
      items.push_back(fmt::format("arange({0}, {0} + 1)", e->str()));
    std::string expr = v.shape.empty() ? items.empty() ? "0" : fmt::format("arange({0}, {0} + 1)[0]", (*v.ints)[0]->str())
                                       : items.size() == 1 ? items[0] : fmt::format("concat({})", listText(items));
    if (v.shape.size() > 1)
      expr = fmt::format("reshape({}, {})", expr, dimsText(v.shape));
    if (v.dtype != DType::I64)
      expr = fmt::format("cast({}, {})", expr, dtypeName(v.dtype));
    std::string name = fresh(sanitize(v.onnxName));
    line(fmt::format("let {} = {};", name, expr));
    v.ref = name;
    v.depth = scopes_.size();
    return name;
  }
  fail(fmt::format("value '{}' has no definition", v.onnxName));
}

// An operand of an elementwise op: a one-element constant becomes a literal (which adopts
// the other operand's dtype) where that keeps the result's rank.
std::string Importer::operand(Val &v, const Val &other) {
  if (v.constant && v.constant->numel() == 1 && v.shape.size() <= other.shape.size() && v.dtype == other.dtype) {
    double x = v.constant->get(0);
    if (isFloat(v.dtype) && std::isfinite(x))
      return x < 0 ? "(" + floatLiteral(x) + ")" : floatLiteral(x);
    if (isInteger(v.dtype))
      return intLiteral(v.constant->getInt(0));
  }
  return ref(v);
}

// Input k as integers known at import (an initializer, a Constant, folded shape data).
std::vector<int64_t> Importer::constInts(size_t k, const char *what) {
  Val &v = in(k);
  std::vector<int64_t> out;
  if (v.ints)
    for (ExprRef e : *v.ints)
      if (auto c = e->asConst())
        out.push_back(*c);
      else
        fail(fmt::format("its {} must be known when importing, but it is {}", what, e->str()));
  else
    fail(fmt::format("its {} ('{}') must be a constant", what, v.onnxName));
  return out;
}

// Input k's values as dim expressions when they are known at import.
std::optional<std::vector<ExprRef>> Importer::dimsOf(size_t k) {
  if (!has(k))
    return std::nullopt;
  return in(k).ints;
}

// ------------------------------------------------------------------------------------
// The op table: the importer's op coverage, in one place (the precheck reads it).

const std::map<std::string, Importer::Handler> &Importer::handlers() {
  static const std::map<std::string, Handler> table = {
      {"Abs", &Importer::unary}, {"Neg", &Importer::unary}, {"Exp", &Importer::unary}, {"Log", &Importer::unary},
      {"Sqrt", &Importer::unary}, {"Tanh", &Importer::unary}, {"Sigmoid", &Importer::unary},
      {"Relu", &Importer::unary}, {"Erf", &Importer::unary}, {"Sin", &Importer::unary}, {"Cos", &Importer::unary},
      {"Floor", &Importer::unary}, {"Ceil", &Importer::unary}, {"Round", &Importer::unary},
      {"Sign", &Importer::unary}, {"Not", &Importer::unary}, {"Reciprocal", &Importer::unary},
      {"Add", &Importer::binary}, {"Sub", &Importer::binary}, {"Mul", &Importer::binary},
      {"Div", &Importer::binary}, {"Pow", &Importer::binary}, {"Mod", &Importer::binary},
      {"Equal", &Importer::binary}, {"Less", &Importer::binary}, {"Greater", &Importer::binary},
      {"LessOrEqual", &Importer::binary}, {"GreaterOrEqual", &Importer::binary}, {"And", &Importer::binary},
      {"Or", &Importer::binary}, {"Xor", &Importer::binary}, {"Max", &Importer::variadic},
      {"Min", &Importer::variadic}, {"Sum", &Importer::variadic}, {"Mean", &Importer::variadic},
      {"Identity", &Importer::identity}, {"Dropout", &Importer::identity}, {"Constant", &Importer::opConstant},
      {"Cast", &Importer::opCast}, {"CastLike", &Importer::opCast}, {"Where", &Importer::opWhere},
      {"Clip", &Importer::opClip}, {"Gelu", &Importer::opActivation}, {"LeakyRelu", &Importer::opActivation},
      {"Elu", &Importer::opActivation}, {"Softplus", &Importer::opActivation},
      {"HardSigmoid", &Importer::opActivation}, {"HardSwish", &Importer::opActivation},
      {"PRelu", &Importer::opActivation}, {"MatMul", &Importer::opMatMul}, {"Gemm", &Importer::opGemm},
      {"Einsum", &Importer::opEinsum}, {"Conv", &Importer::opConv},
      {"BatchNormalization", &Importer::opBatchNorm}, {"LayerNormalization", &Importer::opLayerNorm},
      {"Softmax", &Importer::opSoftmax}, {"LogSoftmax", &Importer::opSoftmax}, {"Shape", &Importer::opShape},
      {"Size", &Importer::opShape}, {"Reshape", &Importer::opReshape}, {"Flatten", &Importer::opFlatten},
      {"Transpose", &Importer::opTranspose}, {"Squeeze", &Importer::opSqueeze},
      {"Unsqueeze", &Importer::opUnsqueeze}, {"Concat", &Importer::opConcat}, {"Split", &Importer::opSplit},
      {"Slice", &Importer::opSlice}, {"Gather", &Importer::opGather}, {"Expand", &Importer::opExpand},
      {"Range", &Importer::opRange}, {"ConstantOfShape", &Importer::opConstantOfShape},
      {"ReduceSum", &Importer::opReduce}, {"ReduceMean", &Importer::opReduce}, {"ReduceMax", &Importer::opReduce},
      {"ReduceMin", &Importer::opReduce}, {"ReduceProd", &Importer::opReduce},
      {"ReduceL1", &Importer::opReduce}, {"ReduceL2", &Importer::opReduce},
      {"ReduceSumSquare", &Importer::opReduce}, {"ReduceLogSumExp", &Importer::opReduce},
      {"ArgMax", &Importer::opArgMax}, {"ArgMin", &Importer::opArgMax}, {"MaxPool", &Importer::opPool},
      {"AveragePool", &Importer::opPool}, {"GlobalAveragePool", &Importer::opGlobalPool},
      {"GlobalMaxPool", &Importer::opGlobalPool}, {"Pad", &Importer::opPad}, {"NonZero", &Importer::opNonZero},
      {"TopK", &Importer::opTopK}, {"If", &Importer::opIf}, {"Loop", &Importer::opLoop},
  };
  return table;
}

// ------------------------------------------------------------------------------------
// Graphs

void Importer::precheck(const Graph &g, const std::string &where, std::map<std::string, std::vector<std::string>> &bad) {
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node &n = g.nodes[k];
    bool known = (n.domain.empty() || n.domain == "ai.onnx") && handlers().count(n.op);
    if (!known) {
      std::string type = n.domain.empty() || n.domain == "ai.onnx" ? n.op : n.domain + "." + n.op;
      bad[type].push_back((n.name.empty() ? fmt::format("node {}", k) : "'" + n.name + "'") + where);
    }
    for (const std::string &attrName : n.attrOrder)
      if (const Attribute *a = n.attr(attrName); a && a->graph)
        precheck(*a->graph, fmt::format(" (in the {} of {})", attrName, n.where(k)) + where, bad);
  }
}

void Importer::addInitializers(const Graph &g) {
  for (const Initializer &init : g.initializers) {
    Val v;
    v.dtype = init.value.dtype;
    for (int64_t d : init.value.shape)
      v.shape.push_back(sym::constant(d));
    v.constant = std::make_shared<rt::Tensor>(init.value);
    v.source = &init;
    if (auto it = paramOf_.find(&init); it != paramOf_.end())
      v.ref = it->second; // depth 0: a param
    if (isInteger(v.dtype) && init.value.numel() <= 64) {
      std::vector<ExprRef> ints;
      for (size_t k = 0; k < init.value.numel(); ++k)
        ints.push_back(sym::constant(init.value.getInt(k)));
      v.ints = ints;
    }
    bind(init.name, std::move(v));
  }
}

void Importer::translateNode(const Node &n, size_t index) {
  node_ = &n;
  nodeIndex_ = index;
  if (n.outputs.empty())
    fail("has no outputs");
  try {
    (this->*handlers().at(n.op))(n);
  } catch (const AttributeError &e) {
    fail(e.what());
  } catch (const std::overflow_error &) { // from sym: shape data folded past 64 bits
    fail("its shape arithmetic overflows 64 bits");
  }
  for (const std::string &o : n.outputs)
    if (!o.empty() && !find(o))
      fail(fmt::format("its output '{}' is not supported (only the first outputs of this op are)", o));
}

void Importer::translateNodes(const Graph &g) {
  for (size_t k = 0; k < g.nodes.size(); ++k)
    translateNode(g.nodes[k], k);
}

Val *Importer::outputOf(const Graph &g, size_t k) {
  Val *v = find(g.outputs[k].name);
  if (!v)
    throw DataError(fmt::format("{}: graph output '{}' is produced by no node", opts_.sourceName, g.outputs[k].name));
  return v;
}

ImportResult Importer::run() {
  const Graph &g = model_.graph;
  std::map<std::string, std::vector<std::string>> bad;
  precheck(g, "", bad);
  if (!bad.empty()) {
    size_t nodes = 0;
    for (auto &[op, where] : bad)
      nodes += where.size();
    std::string msg = fmt::format("{}: {} ONNX op type{} {} not supported by dnnc import ({} node{}); nothing was written:",
                                  opts_.sourceName, bad.size(), bad.size() == 1 ? "" : "s",
                                  bad.size() == 1 ? "is" : "are", nodes, nodes == 1 ? "" : "s");
    for (auto &[op, where] : bad) {
      msg += fmt::format("\n  {}: ", op);
      for (size_t k = 0; k < where.size() && k < 8; ++k)
        msg += (k ? ", " : "") + where[k];
      if (where.size() > 8)
        msg += fmt::format(" and {} more", where.size() - 8);
    }
    throw DataError(msg);
  }
  if (model_.opset && model_.opset < 7)
    throw DataError(fmt::format("{}: opset {} is too old for dnnc import (it reads opsets 13 to 21; convert the "
                                "model with onnx.version_converter)",
                                opts_.sourceName, model_.opset));
  used_.insert(opts_.modelName);
  scopes_.emplace_back();
  addInitializers(g);

  // Inputs: their ONNX names made identifiers, dim_params as dims, in graph order.
  std::set<std::string> initNames;
  for (const Initializer &i : g.initializers)
    initNames.insert(i.name);
  std::vector<std::string> inputs, inputNames;
  std::map<std::string, ExprRef> dimParams;
  // The inputs' names first: they are what `dnnc run --input NAME=...` takes, so a dim_param
  // of the same name (an input `b` of dims [b, 4, 5]) is the one renamed.
  // Names that are identifiers already go first, so that an input `a_b` keeps its name
  // beside an input `a.b` (which becomes a_b_1), not the other way round.
  std::map<std::string, std::string> inputRefs;
  for (bool identifiers : {true, false})
    for (const ValueInfo &vi : g.inputs)
      if (!initNames.count(vi.name) && !inputRefs.count(vi.name) && (sanitize(vi.name) == vi.name) == identifiers)
        inputRefs[vi.name] = fresh(sanitize(vi.name));
  for (const ValueInfo &vi : g.inputs) {
    if (initNames.count(vi.name))
      continue; // an initializer listed as an input too (opsets before 9): a param
    std::optional<DType> dt = dtypeOf(vi.elemType);
    if (!dt)
      throw DataError(fmt::format("{}: graph input '{}' is {}, for which dnnc has no dtype", opts_.sourceName, vi.name,
                                  vi.elemType ? elemTypeName(vi.elemType) : "not a tensor or has no element type"));
    if (!vi.shape)
      throw DataError(fmt::format("{}: graph input '{}' has no shape (its rank must be known)", opts_.sourceName, vi.name));
    Val v;
    v.dtype = *dt;
    v.ref = inputRefs.at(vi.name);
    v.depth = 1;
    for (size_t k = 0; k < vi.shape->size(); ++k) {
      const Dim &d = (*vi.shape)[k];
      if (d.value && *d.value >= 0) { // (0 is a size: an empty axis)
        v.shape.push_back(sym::constant(*d.value));
        continue;
      }
      std::string key = d.param.empty() ? fmt::format("{}_d{}", vi.name, k) : d.param;
      auto it = dimParams.find(key);
      if (it == dimParams.end()) {
        std::string name = fresh(sanitize(key));
        dimDecls_.push_back(fmt::format("dim {};{}", name,
                                        d.param.empty() ? fmt::format("  # axis {} of '{}' (no dim_param)", k, vi.name)
                                        : name != d.param ? fmt::format("  # dim_param \"{}\"", d.param)
                                                          : ""));
        it = dimParams.emplace(key, sym::var(name)).first;
      }
      v.shape.push_back(it->second);
    }
    inputs.push_back(fmt::format("{}: {}", v.ref, typeText(v.dtype, v.shape)));
    inputNames.push_back(v.ref);
    bind(vi.name, std::move(v));
  }

  std::vector<std::string> body;
  out_ = &body;
  indent_ = 1;
  translateNodes(g);
  node_ = nullptr;

  std::vector<std::string> results, refs;
  std::set<std::string> outNames;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    Val *v = outputOf(g, k);
    std::string name = sanitize(g.outputs[k].name);
    // Output names are not in scope, so only keywords need another spelling.
    static const std::set<std::string> keywords = {"import", "const", "dim", "param", "fn", "model", "let", "var",
                                                   "return", "if", "else", "for", "in", "while", "assert", "and",
                                                   "or", "not", "true", "false"};
    if (keywords.count(name) || outNames.count(name))
      name += "_out";
    outNames.insert(name);
    results.push_back(fmt::format("{}: {}", name, typeText(v->dtype, v->shape)));
    refs.push_back(ref(*v));
  }

  std::ostringstream src;
  src << "# Imported by `dnnc import` from " << opts_.sourceName;
  if (model_.opset)
    src << " (ONNX opset " << model_.opset << (model_.producer.empty() ? "" : ", produced by " + model_.producer) << ")";
  src << ".\n";
  src << "# Run: dnnc run " << (opts_.outputName.empty() ? "FILE.dnn" : opts_.outputName);
  if (!weights_.empty())
    src << " --weights " << opts_.weightsName;
  for (const std::string &i : inputNames)
    src << " --input " << i << "=" << i << ".npy";
  src << "\n";
  if (usesNn_)
    src << "import nn;\n";
  src << "\n";
  for (const std::string &d : dimDecls_)
    src << d << "\n";
  if (!dimDecls_.empty())
    src << "\n";
  for (const std::string &p : paramDecls_)
    src << p << "\n";
  if (!paramDecls_.empty())
    src << "\n";
  src << "model " << opts_.modelName << "(" << fmt::format("{}", fmt::join(inputs, ", ")) << ") -> ("
      << fmt::format("{}", fmt::join(results, ", ")) << ") {\n";
  for (const std::string &l : body)
    src << l << "\n";
  if (refs.size() == 1)
    src << "  return " << refs[0] << ";\n";
  else
    src << "  return (" << fmt::format("{}", fmt::join(refs, ", ")) << ");\n";
  src << "}\n";
  return ImportResult{src.str(), std::move(weights_)};
}

// ------------------------------------------------------------------------------------
// Elementwise

// The value of `v` when it is one number known at import (a constant, or a constant dim).
std::optional<double> scalarValue(const Val &v) {
  if (v.constant && v.constant->numel() == 1)
    return v.constant->get(0);
  if (v.ints && v.ints->size() == 1)
    if (auto c = (*v.ints)[0]->asConst())
      return double(*c);
  return std::nullopt;
}

// Output k as a one-element float constant (folded scalar arithmetic: an attention scale
// computed as sqrt(cast(shape(x)[3])) is a literal, not code).
void Importer::constantScalar(size_t k, DType dt, const Shape &shape, double v) {
  rt::Tensor t = rt::Tensor::zeros(dt, std::vector<int64_t>(shape.size(), 1));
  t.set(0, v);
  Val out;
  out.dtype = dt;
  out.shape = shape;
  out.constant = std::make_shared<rt::Tensor>(std::move(t));
  bind(node_->outputs[k], std::move(out));
}

void Importer::unary(const Node &n) {
  static const std::map<std::string, std::string> fns = {
      {"Abs", "abs"}, {"Neg", "neg"}, {"Exp", "exp"}, {"Log", "log"}, {"Sqrt", "sqrt"}, {"Tanh", "tanh"},
      {"Sigmoid", "sigmoid"}, {"Relu", "relu"}, {"Erf", "erf"}, {"Sin", "sin"}, {"Cos", "cos"}, {"Floor", "floor"},
      {"Ceil", "ceil"}, {"Round", "round"}, {"Sign", "sign"}, {"Not", "not"}};
  Val &x = in(0);
  if (n.op == "Neg" && x.ints) {
    std::vector<ExprRef> v;
    for (ExprRef e : *x.ints)
      v.push_back(sym::neg(e));
    known(0, x.dtype, x.shape, v);
    return;
  }
  static const std::map<std::string, double (*)(double)> fold = {
      {"Sqrt", [](double v) { return std::sqrt(v); }}, {"Exp", [](double v) { return std::exp(v); }},
      {"Log", [](double v) { return std::log(v); }}, {"Reciprocal", [](double v) { return 1.0 / v; }},
      {"Neg", [](double v) { return -v; }}, {"Abs", [](double v) { return std::fabs(v); }}};
  if (auto v = scalarValue(x); v && isFloat(x.dtype) && fold.count(n.op)) {
    constantScalar(0, x.dtype, x.shape, fold.at(n.op)(*v));
    return;
  }
  if (n.op == "Reciprocal") {
    def(0, fmt::format("1.0 / {}", ref(x)), x.dtype, x.shape);
    return;
  }
  def(0, unaryCall(fns.at(n.op), x), x.dtype, x.shape);
}

void Importer::binary(const Node &n) {
  static const std::map<std::string, std::string> ops = {
      {"Add", "+"}, {"Sub", "-"}, {"Mul", "*"}, {"Div", "/"}, {"Pow", "**"}, {"Mod", "%"}, {"Equal", "=="},
      {"Less", "<"}, {"Greater", ">"}, {"LessOrEqual", "<="}, {"GreaterOrEqual", ">="}, {"And", "and"},
      {"Or", "or"}, {"Xor", "!="}};
  Val &a = in(0), &b = in(1);
  // Arithmetic and equality on shape data fold into dim expressions (and known bools:
  // the Equal/Where pairs exporters write around Expand's -1).
  bool arith = n.op == "Add" || n.op == "Sub" || n.op == "Mul" || n.op == "Div";
  if (a.ints && b.ints && isInteger(a.dtype) && (arith || n.op == "Equal")) {
    Shape shape = broadcast(a.shape, b.shape);
    ExprRef total = product(shape, 0, shape.size());
    if (auto count = total->asConst(); count && (a.ints->size() == 1 || b.ints->size() == 1 || a.ints->size() == b.ints->size())) {
      std::vector<ExprRef> v;
      for (int64_t k = 0; k < *count; ++k) {
        ExprRef x = (*a.ints)[a.ints->size() == 1 ? 0 : k], y = (*b.ints)[b.ints->size() == 1 ? 0 : k];
        if (arith) {
          v.push_back(n.op == "Add" ? sym::add(x, y) : n.op == "Sub" ? sym::sub(x, y) : n.op == "Mul" ? sym::mul(x, y)
                                                                                                  : sym::floorDiv(x, y));
        } else if (std::optional<bool> eq = knownEqual(x, y)) {
          v.push_back(sym::constant(*eq));
        } else {
          break;
        }
      }
      if (int64_t(v.size()) == *count) {
        known(0, arith ? a.dtype : DType::Bool, shape, v);
        return;
      }
    }
  }
  if (auto va = scalarValue(a), vb = scalarValue(b); va && vb && isFloat(a.dtype) && arith) {
    double r = n.op == "Add" ? *va + *vb : n.op == "Sub" ? *va - *vb : n.op == "Mul" ? *va * *vb : *va / *vb;
    constantScalar(0, a.dtype, broadcast(a.shape, b.shape), r);
    return;
  }
  if (n.op == "Mod" && n.intAttr("fmod", 0) != 0)
    fail("fmod = 1 (C's remainder) is not supported: dnnc's % is Python's (the sign of the divisor)");
  bool compare = n.op == "Equal" || n.op == "Less" || n.op == "Greater" || n.op == "LessOrEqual" ||
                 n.op == "GreaterOrEqual" || n.op == "Xor";
  std::string x = operand(a, b), y = operand(b, a);
  std::string expr = n.op == "Pow" && !isFloat(b.dtype) && isFloat(a.dtype) && y == ref(b)
                         ? fmt::format("{} ** cast({}, {})", x, y, dtypeName(a.dtype))
                         : fmt::format("{} {} {}", x, ops.at(n.op), y);
  def(0, expr, compare ? DType::Bool : a.dtype, broadcast(a.shape, b.shape));
}

void Importer::variadic(const Node &n) {
  std::vector<Val *> xs = allInputs();
  // Max/Min of shape data (`min(K, N)` for a TopK's k) fold into dims.
  bool allInts = n.op == "Max" || n.op == "Min";
  for (Val *v : xs)
    allInts = allInts && v->ints && v->ints->size() == xs[0]->ints->size() && v->shape.size() == xs[0]->shape.size();
  if (allInts) {
    std::vector<ExprRef> vals = *xs[0]->ints;
    for (size_t k = 1; k < xs.size(); ++k)
      for (size_t q = 0; q < vals.size(); ++q)
        vals[q] = n.op == "Max" ? sym::max(vals[q], (*xs[k]->ints)[q]) : sym::min(vals[q], (*xs[k]->ints)[q]);
    known(0, xs[0]->dtype, xs[0]->shape, vals);
    return;
  }
  std::string expr = ref(*xs[0]);
  Shape shape = xs[0]->shape;
  for (size_t k = 1; k < xs.size(); ++k) {
    std::string y = operand(*xs[k], *xs[0]);
    if (n.op == "Max" || n.op == "Min")
      expr = fmt::format("{}({}, {})", n.op == "Max" ? "maximum" : "minimum", expr, y);
    else
      expr = fmt::format("{} + {}", expr, y);
    shape = broadcast(shape, xs[k]->shape);
  }
  if (n.op == "Mean" && xs.size() > 1)
    expr = fmt::format("({}) / {}", expr, floatLiteral(double(xs.size())));
  def(0, expr, xs[0]->dtype, shape);
}

void Importer::identity(const Node &n) {
  alias(0, in(0));
  // Dropout in inference is the identity; its mask output, when asked for, is all true.
  if (n.op == "Dropout" && n.outputs.size() > 1 && !n.outputs[1].empty()) {
    Val &x = in(0);
    def(1, fmt::format("full({}, 1.0, dtype = bool)", dimsText(x.shape)), DType::Bool, x.shape);
  }
}

void Importer::opConstant(const Node &n) {
  Val v;
  const Attribute *a = nullptr;
  for (const char *k : {"value", "value_float", "value_int", "value_floats", "value_ints"})
    if ((a = n.attr(k)))
      break;
  if (!a)
    fail("only value, value_float(s) and value_int(s) constants are supported");
  rt::Tensor t;
  if (a->kind == Attribute::Kind::Tensor)
    t = *a->tensor;
  else if (a->kind == Attribute::Kind::Float)
    t = rt::Tensor::zeros(DType::F32, {}), t.set(0, a->f);
  else if (a->kind == Attribute::Kind::Int)
    t = rt::Tensor::zeros(DType::I64, {}), t.setInt(0, a->i);
  else if (a->kind == Attribute::Kind::Floats) {
    t = rt::Tensor::zeros(DType::F32, {int64_t(a->floats.size())});
    for (size_t k = 0; k < a->floats.size(); ++k)
      t.set(k, a->floats[k]);
  } else {
    t = rt::Tensor::zeros(DType::I64, {int64_t(a->ints.size())});
    for (size_t k = 0; k < a->ints.size(); ++k)
      t.setInt(k, a->ints[k]);
  }
  v.dtype = t.dtype;
  for (int64_t d : t.shape)
    v.shape.push_back(sym::constant(d));
  if (isInteger(t.dtype) && t.numel() <= 64) {
    std::vector<ExprRef> ints;
    for (size_t k = 0; k < t.numel(); ++k)
      ints.push_back(sym::constant(t.getInt(k)));
    v.ints = ints;
  }
  v.constant = std::make_shared<rt::Tensor>(std::move(t));
  bind(n.outputs[0], std::move(v));
}

void Importer::opCast(const Node &n) {
  Val &x = in(0);
  DType to;
  if (n.op == "CastLike") {
    to = in(1).dtype;
  } else {
    int t = int(n.intAttr("to", 0));
    std::optional<DType> d = t == kDouble ? std::optional<DType>(DType::F32) : dtypeOf(t);
    if (!d)
      fail(fmt::format("casts to {}, for which dnnc has no dtype", elemTypeName(t)));
    to = *d;
  }
  if (x.ints && isInteger(to)) {
    known(0, to, x.shape, *x.ints);
    return;
  }
  if (auto v = scalarValue(x); v && isFloat(to) && isInteger(x.dtype)) {
    constantScalar(0, to, x.shape, *v);
    return;
  }
  if (to == x.dtype) {
    alias(0, x);
    return;
  }
  Val &out = def(0, fmt::format("cast({}, {})", ref(x), dtypeName(to)), to, x.shape);
  if (x.ints && x.ints->size() == 1 && isFloat(to))
    out.floatOfDim = (*x.ints)[0];
}

void Importer::opWhere(const Node &n) {
  Val &c = in(0), &x = in(1), &y = in(2);
  if (c.ints && x.ints && y.ints && c.shape.size() <= 1 && x.shape.size() <= 1 && y.shape.size() <= 1) {
    // A choice among shape data by a known condition.
    size_t count = std::max({c.ints->size(), x.ints->size(), y.ints->size()});
    auto at = [&](const std::vector<ExprRef> &v, size_t k) { return v[v.size() == 1 ? 0 : k]; };
    std::vector<ExprRef> v;
    for (size_t k = 0; k < count; ++k)
      if (auto cond = at(*c.ints, k)->asConst())
        v.push_back(*cond ? at(*x.ints, k) : at(*y.ints, k));
    if (v.size() == count) {
      known(0, x.dtype, broadcast(c.shape, broadcast(x.shape, y.shape)), v);
      return;
    }
  }
  def(0, fmt::format("where({}, {}, {})", ref(c), operand(x, y), operand(y, x)), x.dtype,
      broadcast(c.shape, broadcast(x.shape, y.shape)));
}

void Importer::opClip(const Node &n) {
  Val &x = in(0);
  std::string expr = ref(x);
  std::optional<double> lo, hi;
  if (has(1) || has(2)) {
    if (has(1))
      expr = fmt::format("maximum({}, {})", expr, operand(in(1), x));
    if (has(2))
      expr = fmt::format("minimum({}, {})", expr, operand(in(2), x));
  } else if (n.attr("min") || n.attr("max")) { // opset 6 attributes
    if (n.attr("min"))
      expr = fmt::format("maximum({}, {})", expr, floatLiteral(n.floatAttr("min", 0)));
    if (n.attr("max"))
      expr = fmt::format("minimum({}, {})", expr, floatLiteral(n.floatAttr("max", 0)));
  }
  def(0, expr, x.dtype, x.shape);
}

void Importer::opActivation(const Node &n) {
  Val &x = in(0);
  std::string r = ref(x);
  std::string expr;
  if (n.op == "Gelu") {
    expr = n.stringAttr("approximate", "none") == "tanh"
               ? fmt::format("0.5 * {0} * (1.0 + tanh(0.797884561 * ({0} + 0.044715 * {0} * {0} * {0})))", r)
               : fmt::format("gelu({})", r);
  } else if (n.op == "LeakyRelu") {
    expr = fmt::format("where({0} >= 0.0, {0}, {0} * {1})", r, floatLiteral(n.floatAttr("alpha", 0.01)));
  } else if (n.op == "Elu") {
    expr = fmt::format("where({0} > 0.0, {0}, {1} * (exp({0}) - 1.0))", r, floatLiteral(n.floatAttr("alpha", 1.0)));
  } else if (n.op == "Softplus") {
    // max(x, 0) + log1p(e^-|x|), as ONNX Runtime computes it (log(1 + e^x) is inf from x =
    // 89 on); log1p(e) as log(u) e / (u - 1) with u = 1 + e, or e where u rounds to 1, so
    // that very negative x keep their e^x.
    std::string e = fresh(sanitize(n.outputs[0]) + "_e"), u = fresh(sanitize(n.outputs[0]) + "_u");
    line(fmt::format("let {} = exp(-abs({}));", e, r));
    line(fmt::format("let {} = 1.0 + {};", u, e));
    expr = fmt::format("maximum({0}, 0.0) + where({2} == 1.0, {1}, log({2}) * ({1} / ({2} - 1.0)))", r, e, u);
  } else if (n.op == "HardSigmoid") {
    expr = fmt::format("maximum(minimum({} * {} + {}, 1.0), 0.0)", r, floatLiteral(n.floatAttr("alpha", 0.2)),
                       floatLiteral(n.floatAttr("beta", 0.5)));
  } else if (n.op == "HardSwish") {
    expr = fmt::format("{0} * maximum(minimum({0} / 6.0 + 0.5, 1.0), 0.0)", r);
  } else { // PRelu
    Val &s = in(1);
    expr = fmt::format("where({0} >= 0.0, {0}, {0} * {1})", r, operand(s, x));
  }
  def(0, expr, x.dtype, x.shape);
}

// ------------------------------------------------------------------------------------
// Linear algebra, convolution, normalization

Shape matmulShape(const Shape &a, const Shape &b) {
  if (a.size() == 1 && b.size() == 1)
    return {};
  if (b.size() == 1)
    return Shape(a.begin(), a.end() - 1);
  if (a.size() == 1) {
    Shape s(b.begin(), b.end() - 2);
    s.push_back(b.back());
    return s;
  }
  Shape batch = broadcast(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  batch.push_back(a[a.size() - 2]);
  batch.push_back(b.back());
  return batch;
}

void Importer::opMatMul(const Node &n) {
  Val &a = in(0), &b = in(1);
  if (a.shape.empty() || b.shape.empty())
    fail("MatMul takes inputs of rank 1 or more");
  def(0, fmt::format("{} @ {}", ref(a), ref(b)), a.dtype, matmulShape(a.shape, b.shape));
}

void Importer::opGemm(const Node &n) {
  Val &a = in(0), &b = in(1);
  if (a.shape.size() != 2 || b.shape.size() != 2)
    fail("Gemm takes 2-D inputs");
  bool ta = n.intAttr("transA", 0), tb = n.intAttr("transB", 0);
  double alpha = n.floatAttr("alpha", 1.0), beta = n.floatAttr("beta", 1.0);
  std::string x = ta ? fmt::format("transpose({})", ref(a)) : ref(a);
  std::string w = tb ? fmt::format("transpose({})", ref(b)) : ref(b);
  std::string expr = fmt::format("{} @ {}", x, w);
  Shape shape = {ta ? a.shape[1] : a.shape[0], tb ? b.shape[0] : b.shape[1]};
  if (alpha != 1.0)
    expr = fmt::format("({}) * {}", expr, floatLiteral(alpha));
  if (has(2) && beta != 0.0) {
    Val &c = in(2);
    expr += beta == 1.0 ? " + " + ref(c) : fmt::format(" + {} * {}", ref(c), floatLiteral(beta));
    shape = broadcast(shape, c.shape);
  }
  def(0, expr, a.dtype, shape);
}

// Einsum where it is a (batched) matmul: each operand's letters are batch letters (in
// both operands and the output), one row letter, one contracted letter, one column letter.
void Importer::opEinsum(const Node &n) {
  std::string eq = n.stringAttr("equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  size_t comma = eq.find(','), arrow = eq.find("->");
  if (n.inputs.size() != 2 || comma == std::string::npos || arrow == std::string::npos || eq.find("...") != std::string::npos)
    fail(fmt::format("equation '{}' is not a matmul (two operands, explicit output, no '...')", eq));
  std::string la = eq.substr(0, comma), lb = eq.substr(comma + 1, arrow - comma - 1), lo = eq.substr(arrow + 2);
  Val &a = in(0), &b = in(1);
  auto isIn = [](const std::string &s, char c) { return s.find(c) != std::string::npos; };
  std::string batch, m, k, nn;
  for (char c : la) {
    if (isIn(lb, c) && isIn(lo, c))
      batch += c;
    else if (isIn(lb, c))
      k += c;
    else if (isIn(lo, c))
      m += c;
    else
      k = "!";
  }
  for (char c : lb)
    if (!isIn(la, c) && isIn(lo, c))
      nn += c;
  if (m.size() != 1 || k.size() != 1 || nn.size() != 1 || lo.size() != batch.size() + 2 || a.shape.size() != la.size() ||
      b.shape.size() != lb.size())
    fail(fmt::format("equation '{}' is not a matmul (one row, one contracted and one column index)", eq));
  auto permute = [&](Val &v, const std::string &letters, const std::string &want, Shape &shape) {
    std::vector<int64_t> perm;
    for (char c : want)
      perm.push_back(int64_t(letters.find(c)));
    shape.clear();
    for (int64_t p : perm)
      shape.push_back(v.shape[size_t(p)]);
    bool same = true;
    for (size_t q = 0; q < perm.size(); ++q)
      same = same && perm[q] == int64_t(q);
    return same ? ref(v) : fmt::format("transpose({}, {})", ref(v), intsText(perm));
  };
  Shape sa, sb;
  std::string x = permute(a, la, batch + m + k, sa), y = permute(b, lb, batch + k + nn, sb);
  std::string expr = fmt::format("{} @ {}", x, y);
  Shape shape = matmulShape(sa, sb);
  std::string natural = batch + m + nn;
  if (natural != lo) {
    std::vector<int64_t> perm;
    Shape s;
    for (char c : lo) {
      perm.push_back(int64_t(natural.find(c)));
      s.push_back(shape[natural.find(c)]);
    }
    expr = fmt::format("transpose({}, {})", expr, intsText(perm));
    shape = s;
  }
  def(0, expr, a.dtype, shape);
}

// y + b on the channel axis (axis 1 of an NC... tensor).
std::string Importer::addBias(const std::string &y, Val &b, size_t rank) {
  Shape s = {b.shape.empty() ? sym::constant(1) : b.shape[0]};
  for (size_t k = 2; k < rank; ++k)
    s.push_back(sym::constant(1));
  return fmt::format("{} + reshape({}, {})", y, ref(b), dimsText(s));
}

void Importer::opConv(const Node &n) {
  Val &x = in(0), &w = in(1);
  // A 1-D convolution is a 2-D one over an image one row high.
  bool oneD = x.shape.size() == 3 && w.shape.size() == 3;
  if (!oneD && (x.shape.size() != 4 || w.shape.size() != 4))
    fail("only 1-D and 2-D convolutions (NCL/NCHW input) are supported");
  Shape xs = x.shape, ws = w.shape;
  std::string xin = ref(x), win = ref(w);
  if (oneD) {
    xs.insert(xs.begin() + 2, sym::constant(1));
    ws.insert(ws.begin() + 2, sym::constant(1));
    xin = fmt::format("unsqueeze({}, 2)", xin);
    win = fmt::format("unsqueeze({}, 2)", win);
  }
  std::string autoPad = n.stringAttr("auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "VALID")
    fail(fmt::format("auto_pad {} is not supported (export with explicit pads)", autoPad));
  std::vector<int64_t> strides = n.intsAttr("strides"), pads = n.intsAttr("pads"), dil = n.intsAttr("dilations");
  if (strides.empty())
    strides = {1, 1};
  if (pads.empty() || autoPad == "VALID")
    pads = {0, 0, 0, 0};
  if (dil.empty())
    dil = {1, 1};
  if (oneD) { // the row axis: no stride, padding or dilation to speak of
    strides = {strides.at(0), strides.at(0)};
    pads = pads.size() == 2 ? std::vector<int64_t>{0, pads[0], 0, pads[1]} : std::vector<int64_t>{0, 0, 0, 0};
    dil = {dil.at(0), dil.at(0)};
  }
  if (strides.size() != 2 || pads.size() != 4 || dil.size() != 2)
    fail("its strides, pads or dilations do not fit its rank");
  if (dil[0] != dil[1])
    fail(fmt::format("dilations {} differ per axis, which conv2d does not express", intsText(dil)));
  int64_t group = n.intAttr("group", 1);
  Shape sx = xs;
  int64_t padding = pads[0];
  if (!(pads[0] == pads[1] && pads[1] == pads[2] && pads[2] == pads[3])) {
    // Uneven padding: pad first, then convolve unpadded.
    xin = fmt::format("pad({}, [0, 0, 0, 0, {}, {}, {}, {}])", xin, pads[0], pads[2], pads[1], pads[3]);
    sx[2] = sym::add(sx[2], sym::constant(pads[0] + pads[2]));
    sx[3] = sym::add(sx[3], sym::constant(pads[1] + pads[3]));
    padding = 0;
  }
  bool evenStride = strides[0] == strides[1];
  int64_t stride = evenStride ? strides[0] : 1;
  std::string args = fmt::format("{}, {}", xin, win);
  if (stride != 1)
    args += fmt::format(", stride = {}", stride);
  if (padding)
    args += fmt::format(", padding = {}", padding);
  if (dil[0] != 1)
    args += fmt::format(", dilation = {}", dil[0]);
  if (group != 1)
    args += fmt::format(", groups = {}", group);
  std::string expr = fmt::format("conv2d({})", args);
  Shape shape = {xs[0], ws[0]};
  for (int ax = 0; ax < 2; ++ax) {
    // (H + 2p - d(K - 1) - 1) / s + 1, as conv2d's type says
    ExprRef k = ws[2 + ax];
    ExprRef num = sym::sub(sym::sub(sym::add(sx[2 + ax], sym::constant(2 * padding)),
                                    sym::mul(sym::constant(dil[0]), sym::sub(k, sym::constant(1)))),
                           sym::constant(1));
    shape.push_back(sym::add(sym::floorDiv(num, sym::constant(stride)), sym::constant(1)));
  }
  if (!evenStride) {
    expr = fmt::format("({})[:, :, ::{}, ::{}]", expr, strides[0], strides[1]);
    for (int ax = 0; ax < 2; ++ax)
      shape[2 + ax] = sym::floorDiv(sym::add(shape[2 + ax], sym::constant(strides[ax] - 1)), sym::constant(strides[ax]));
  }
  if (has(2))
    expr = addBias(expr, in(2), 4);
  if (oneD) {
    expr = fmt::format("squeeze({}, axis = [2])", expr);
    shape.erase(shape.begin() + 2);
  }
  def(0, expr, x.dtype, shape);
}

void Importer::opBatchNorm(const Node &n) {
  Val &x = in(0), &scale = in(1), &bias = in(2), &mean = in(3), &var = in(4);
  if (n.intAttr("training_mode", 0))
    fail("training_mode = 1 is not supported (export the model in eval mode)");
  double eps = n.floatAttr("epsilon", 1e-5);
  Shape cs = {x.shape.size() > 1 ? x.shape[1] : sym::constant(1)};
  for (size_t k = 2; k < x.shape.size(); ++k)
    cs.push_back(sym::constant(1));
  std::string c = dimsText(cs);
  std::string expr = fmt::format("(({} - reshape({}, {})) * reshape({} * rsqrt({} + {}), {})) + reshape({}, {})", ref(x),
                                 ref(mean), c, ref(scale), ref(var), floatLiteral(eps), c, ref(bias), c);
  def(0, expr, x.dtype, x.shape);
}

void Importer::opLayerNorm(const Node &n) {
  Val &x = in(0), &g = in(1);
  int64_t axis = axisOf(n.intAttr("axis", -1), x.shape.size());
  double eps = n.floatAttr("epsilon", 1e-5);
  std::string r = ref(x);
  if (axis == int64_t(x.shape.size()) - 1 && g.shape.size() == 1 && has(2) && in(2).shape.size() == 1 &&
      x.dtype == DType::F32) {
    usesNn_ = true;
    def(0, fmt::format("nn.layer_norm({}, {}, {}, eps = {})", r, ref(g), ref(in(2)), floatLiteral(eps)), x.dtype, x.shape);
    return;
  }
  std::vector<int64_t> axes;
  for (int64_t k = axis; k < int64_t(x.shape.size()); ++k)
    axes.push_back(k);
  std::string ax = intsText(axes);
  std::string centered = fmt::format("({0} - mean({0}, axis = {1}, keepdims = true))", r, ax);
  std::string expr = fmt::format("{0} * rsqrt(mean({0} * {0}, axis = {1}, keepdims = true) + {2}) * {3}", centered, ax,
                                 floatLiteral(eps), ref(g));
  if (has(2))
    expr += " + " + ref(in(2));
  def(0, expr, x.dtype, x.shape);
}

void Importer::opSoftmax(const Node &n) {
  Val &x = in(0);
  bool old = model_.opset && model_.opset < 13;
  int64_t axis = axisOf(n.intAttr("axis", old ? 1 : -1), x.shape.size());
  if (old && axis != int64_t(x.shape.size()) - 1)
    fail("Softmax before opset 13 flattens from its axis, which is supported only for the last axis");
  def(0, fmt::format("{}({}, axis = {})", n.op == "Softmax" ? "softmax" : "log_softmax", ref(x),
                     axis == int64_t(x.shape.size()) - 1 ? -1 : axis),
      x.dtype, x.shape);
}

// ------------------------------------------------------------------------------------
// Shapes and data movement

void Importer::opShape(const Node &n) {
  Val &x = in(0);
  if (n.op == "Size") {
    known(0, DType::I64, {}, {product(x.shape, 0, x.shape.size())});
    return;
  }
  int64_t r = int64_t(x.shape.size());
  int64_t start = n.intAttr("start", 0), end = n.intAttr("end", r);
  start = std::clamp(start < 0 ? start + r : start, int64_t(0), r);
  end = std::clamp(end < 0 ? end + r : end, int64_t(0), r);
  std::vector<ExprRef> dims;
  for (int64_t k = start; k < end; ++k)
    dims.push_back(x.shape[size_t(k)]);
  known(0, DType::I64, {sym::constant(int64_t(dims.size()))}, dims);
}

void Importer::opReshape(const Node &n) {
  Val &x = in(0);
  std::optional<std::vector<ExprRef>> target = n.op == "Reshape" && n.inputs.size() < 2 ? std::nullopt : dimsOf(1);
  if (!target && n.attr("shape")) { // Reshape-1's attribute
    target.emplace();
    for (int64_t d : n.intsAttr("shape"))
      target->push_back(sym::constant(d));
  }
  if (!target)
    fail(fmt::format("its shape '{}' depends on tensor values (not on shapes), which dnnc import does not fold",
                     node_->inputs.size() > 1 ? node_->inputs[1] : ""));
  bool allowZero = n.intAttr("allowzero", 0) != 0;
  Shape shape;
  std::vector<std::string> items;
  int inferred = -1;
  for (size_t k = 0; k < target->size(); ++k) {
    ExprRef d = (*target)[k];
    if (d->asConst() == std::optional<int64_t>(0) && !allowZero) {
      if (k >= x.shape.size())
        fail("a 0 in its shape copies a dim the input does not have");
      d = x.shape[k];
    }
    if (d->asConst() == std::optional<int64_t>(-1)) {
      inferred = int(k);
      items.push_back("-1");
      shape.push_back(d);
      continue;
    }
    if (auto c = d->asConst(); c && *c < 0)
      fail(fmt::format("its shape has the negative dim {}", *c));
    items.push_back(d->str());
    shape.push_back(d);
  }
  if (inferred >= 0) {
    ExprRef rest = sym::constant(1);
    for (size_t k = 0; k < shape.size(); ++k)
      if (int(k) != inferred)
        rest = sym::mul(rest, shape[k]);
    shape[size_t(inferred)] = sym::floorDiv(product(x.shape, 0, x.shape.size()), rest);
    // Written as the dim it is when it is a plain one (`reshape(x, [B, T, 4, 16])`).
    if (shape[size_t(inferred)]->terms().size() <= 1 && shape[size_t(inferred)]->str().find('/') == std::string::npos)
      items[size_t(inferred)] = shape[size_t(inferred)]->str();
  }
  if (x.ints) {
    known(0, x.dtype, shape, *x.ints);
    return;
  }
  if (shape == x.shape) {
    alias(0, x);
    return;
  }
  def(0, fmt::format("reshape({}, {})", ref(x), listText(items)), x.dtype, shape);
}

void Importer::opFlatten(const Node &n) {
  Val &x = in(0);
  int64_t r = int64_t(x.shape.size());
  int64_t axis = n.intAttr("axis", 1);
  axis = axis < 0 ? axis + r : axis;
  if (axis < 0 || axis > r)
    fail(fmt::format("axis {} is out of range for rank {}", n.intAttr("axis", 1), r));
  Shape shape = {product(x.shape, 0, size_t(axis)), product(x.shape, size_t(axis), size_t(r))};
  def(0, fmt::format("reshape({}, {})", ref(x), dimsText(shape)), x.dtype, shape);
}

void Importer::opTranspose(const Node &n) {
  Val &x = in(0);
  std::vector<int64_t> perm = n.intsAttr("perm");
  if (perm.empty())
    for (size_t k = x.shape.size(); k-- > 0;)
      perm.push_back(int64_t(k));
  if (perm.size() != x.shape.size())
    fail(fmt::format("perm {} does not fit rank {}", intsText(perm), x.shape.size()));
  Shape shape;
  for (int64_t &p : perm) {
    p = axisOf(p, x.shape.size());
    shape.push_back(x.shape[size_t(p)]);
  }
  def(0, fmt::format("transpose({}, {})", ref(x), intsText(perm)), x.dtype, shape);
}

// The axes of a Squeeze or a reduction (input 1 since opsets 13/18, else the attribute),
// made non-negative and sorted.
std::vector<int64_t> Importer::axesOf(const Node &n, size_t rank) {
  std::vector<int64_t> axes = has(1) ? constInts(1, "axes") : n.intsAttr("axes");
  for (int64_t &a : axes)
    a = axisOf(a, rank);
  std::sort(axes.begin(), axes.end());
  return axes;
}

// `shape` without the sorted `axes` (size 1 there with `keep`).
Shape reduced(const Shape &shape, const std::vector<int64_t> &axes, bool keep) {
  Shape out;
  for (size_t k = 0; k < shape.size(); ++k)
    if (!std::binary_search(axes.begin(), axes.end(), int64_t(k)))
      out.push_back(shape[k]);
    else if (keep)
      out.push_back(sym::constant(1));
  return out;
}

void Importer::opSqueeze(const Node &n) {
  Val &x = in(0);
  std::vector<int64_t> axes = axesOf(n, x.shape.size());
  if (axes.empty()) // every axis of size 1
    for (size_t k = 0; k < x.shape.size(); ++k)
      if (isOne(x.shape[k]))
        axes.push_back(int64_t(k));
  Shape shape = reduced(x.shape, axes, false);
  if (x.ints) {
    known(0, x.dtype, shape, *x.ints);
    return;
  }
  def(0, fmt::format("squeeze({}, axis = {})", ref(x), intsText(axes)), x.dtype, shape);
}

void Importer::opUnsqueeze(const Node &n) {
  Val &x = in(0);
  std::vector<int64_t> axes = has(1) ? constInts(1, "axes") : n.intsAttr("axes");
  size_t rank = x.shape.size() + axes.size();
  for (int64_t &a : axes)
    a = axisOf(a, rank);
  std::sort(axes.begin(), axes.end());
  Shape shape = x.shape;
  std::string expr = x.ints ? "" : ref(x);
  for (int64_t a : axes) {
    shape.insert(shape.begin() + a, sym::constant(1));
    expr = fmt::format("unsqueeze({}, {})", expr, a);
  }
  if (x.ints) {
    known(0, x.dtype, shape, *x.ints);
    return;
  }
  def(0, expr, x.dtype, shape);
}

void Importer::opConcat(const Node &n) {
  std::vector<Val *> xs = allInputs();
  int64_t axis = axisOf(n.intAttr("axis", 0), xs[0]->shape.size());
  bool allKnown = true;
  for (Val *v : xs)
    allKnown = allKnown && v->ints && v->shape.size() == 1;
  Shape shape = xs[0]->shape;
  for (size_t k = 1; k < xs.size(); ++k)
    shape[size_t(axis)] = sym::add(shape[size_t(axis)], xs[k]->shape[size_t(axis)]);
  if (allKnown) {
    std::vector<ExprRef> v;
    for (Val *x : xs)
      v.insert(v.end(), x->ints->begin(), x->ints->end());
    known(0, xs[0]->dtype, shape, v);
    return;
  }
  std::vector<std::string> items;
  for (Val *v : xs)
    if (!(v->shape[size_t(axis)]->asConst() == std::optional<int64_t>(0)))
      items.push_back(ref(*v));
  if (items.size() == 1) {
    alias(0, *xs[0]);
    return;
  }
  def(0, fmt::format("concat({}, axis = {})", listText(items), axis), xs[0]->dtype, shape);
}

void Importer::opSplit(const Node &n) {
  Val &x = in(0);
  int64_t axis = axisOf(n.intAttr("axis", 0), x.shape.size());
  std::vector<int64_t> sizes = has(1) ? constInts(1, "split") : n.intsAttr("split");
  size_t parts = n.outputs.size();
  std::vector<ExprRef> dims;
  std::string how;
  if (!sizes.empty()) {
    if (sizes.size() != parts)
      fail(fmt::format("split {} does not give one size per output ({})", intsText(sizes), parts));
    for (int64_t s : sizes)
      dims.push_back(sym::constant(s));
    how = intsText(sizes);
  } else {
    ExprRef d = x.shape[size_t(axis)];
    auto c = d->asConst();
    if (c && *c % int64_t(parts) != 0) {
      // ONNX (opset 18) makes the last part smaller; list the sizes.
      int64_t each = (*c + int64_t(parts) - 1) / int64_t(parts);
      for (size_t k = 0; k < parts; ++k)
        sizes.push_back(std::min(each, *c - each * int64_t(k)));
      for (int64_t s : sizes)
        dims.push_back(sym::constant(s));
      how = intsText(sizes);
    } else {
      for (size_t k = 0; k < parts; ++k)
        dims.push_back(sym::floorDiv(d, sym::constant(int64_t(parts))));
      how = std::to_string(parts);
    }
  }
  std::vector<std::string> names;
  for (size_t k = 0; k < parts; ++k)
    names.push_back(fresh(sanitize(n.outputs[k].empty() ? "unused" : n.outputs[k])));
  std::string lhs = parts == 1 ? names[0] : "(" + fmt::format("{}", fmt::join(names, ", ")) + ")";
  line(fmt::format("let {} = split({}, {}, axis = {});", lhs, ref(x), how, axis));
  for (size_t k = 0; k < parts; ++k) {
    if (n.outputs[k].empty())
      continue;
    Val v;
    v.ref = names[k];
    v.dtype = x.dtype;
    v.shape = x.shape;
    v.shape[size_t(axis)] = dims[k];
    v.depth = scopes_.size();
    bind(n.outputs[k], std::move(v));
  }
}

void Importer::opSlice(const Node &n) {
  Val &x = in(0);
  // Bounds are dim expressions: constants, or dims from shape data (`pos[0:T]`).
  std::vector<ExprRef> starts, ends;
  std::vector<int64_t> axes, steps;
  auto bounds = [&](size_t k, const char *what) {
    std::optional<std::vector<ExprRef>> v = dimsOf(k);
    if (!v)
      fail(fmt::format("its {} ('{}') must be known when importing (constants or shapes)", what, n.inputs[k]));
    return *v;
  };
  if (n.inputs.size() > 1) {
    starts = bounds(1, "starts");
    ends = bounds(2, "ends");
    if (has(3))
      axes = constInts(3, "axes");
    if (has(4))
      steps = constInts(4, "steps");
  } else { // Slice-1's attributes
    for (int64_t v : n.intsAttr("starts"))
      starts.push_back(sym::constant(v));
    for (int64_t v : n.intsAttr("ends"))
      ends.push_back(sym::constant(v));
    axes = n.intsAttr("axes");
  }
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k)
      axes.push_back(int64_t(k));
  if (steps.empty())
    steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    fail("starts, ends, axes and steps differ in length");
  size_t r = x.shape.size();
  std::vector<std::string> subs(r, ":");
  Shape shape = x.shape;
  std::vector<ExprRef> vals;
  bool fold = x.ints && r == 1;
  const int64_t big = int64_t(1) << 40; // INT64_MAX and friends mean "to the end"
  for (size_t q = 0; q < starts.size(); ++q) {
    size_t a = size_t(axisOf(axes[q], r));
    int64_t st = steps[q];
    if (st <= 0)
      fail(fmt::format("step {} on axis {}: only positive steps are supported", st, a));
    ExprRef d = x.shape[a];
    auto dc = d->asConst();
    // A bound as NumPy clamps it; a symbolic bound is taken to lie inside the dim (as
    // exporters write them: `pos[0:T]`).
    auto bound = [&](ExprRef e) -> ExprRef {
      auto c = e->asConst();
      if (!c)
        return e;
      int64_t v = *c;
      if (v >= big)
        return d;
      if (v <= -big)
        return sym::constant(0);
      if (v < 0)
        return dc ? sym::constant(std::max<int64_t>(*dc + v, 0)) : sym::max(sym::add(d, sym::constant(v)), sym::constant(0));
      // (on a dim only known when it runs, clamped there: x[:, :2] is min(2, feat) long, as
      // the .dnn slice's type says)
      return dc || v == 0 ? sym::constant(dc ? std::min(v, *dc) : 0) : sym::min(sym::constant(v), d);
    };
    ExprRef lo = bound(starts[q]), hi = bound(ends[q]);
    auto sc = starts[q]->asConst(), ec = ends[q]->asConst();
    if (!ec && ends[q] != d && !fold) {
      // ONNX clamps the bound to the dim; the model can only mean one inside it (the
      // position table holds `sequence` rows): say so, and the slice is `sequence` long.
      std::string fact = fmt::format("{} <= {}", ends[q]->str(), d->str());
      if (asserted_.insert(fact).second)
        line(fmt::format("assert {};", fact));
    }
    // A bound at the start or the end is left out, so that x[:, 1:] keeps the plain dim
    // expression sema derives too.
    bool openLo = sc && (*sc == 0 || *sc <= -big), openHi = (ec && *ec >= big) || ends[q] == d;
    ExprRef len = sym::floorDiv(sym::add(sym::sub(openHi ? d : hi, lo), sym::constant(st - 1)), sym::constant(st));
    if (auto c = len->asConst(); c && *c < 0)
      len = sym::constant(0);
    else if (!c && !(lo->asConst() && *lo->asConst() == 0))
      len = sym::max(len, sym::constant(0)); // (a start past the end: empty)
    shape[a] = len;
    auto text = [](ExprRef e) { return e->str(); };
    std::string t = (openLo ? "" : text(starts[q])) + ":" + (openHi ? "" : text(ends[q]));
    if (st != 1)
      t += ":" + std::to_string(st);
    subs[a] = t;
    if (fold) {
      auto l = lo->asConst(), h = (openHi ? d : hi)->asConst();
      if (!l || !h)
        fold = false;
      else
        for (int64_t k = *l; k < *h; k += st)
          vals.push_back((*x.ints)[size_t(k)]);
    }
  }
  if (fold) {
    known(0, x.dtype, shape, vals);
    return;
  }
  while (!subs.empty() && subs.back() == ":")
    subs.pop_back();
  if (subs.empty()) {
    alias(0, x);
    return;
  }
  def(0, fmt::format("{}[{}]", ref(x), fmt::join(subs, ", ")), x.dtype, shape);
}

void Importer::opGather(const Node &n) {
  Val &x = in(0), &idx = in(1);
  int64_t axis = axisOf(n.intAttr("axis", 0), x.shape.size());
  Shape shape(x.shape.begin(), x.shape.begin() + axis);
  shape.insert(shape.end(), idx.shape.begin(), idx.shape.end());
  shape.insert(shape.end(), x.shape.begin() + axis + 1, x.shape.end());
  if (x.ints && x.shape.size() == 1 && idx.ints) {
    std::vector<ExprRef> v;
    for (ExprRef i : *idx.ints) {
      auto c = i->asConst();
      int64_t n0 = int64_t(x.ints->size());
      if (!c || *c < -n0 || *c >= n0)
        fail("its index into shape data is out of range or unknown");
      v.push_back((*x.ints)[size_t(*c < 0 ? *c + n0 : *c)]);
    }
    known(0, x.dtype, shape, v);
    return;
  }
  if (idx.constant && idx.shape.empty()) {
    // A constant scalar index is plain indexing: x[:, 3].
    int64_t i = idx.constant->getInt(0);
    std::vector<std::string> subs(size_t(axis), ":");
    subs.push_back(std::to_string(i));
    def(0, fmt::format("{}[{}]", ref(x), fmt::join(subs, ", ")), x.dtype, shape);
    return;
  }
  def(0, fmt::format("take({}, {}, axis = {})", ref(x), ref(idx), axis), x.dtype, shape);
}

void Importer::opExpand(const Node &n) {
  Val &x = in(0);
  std::optional<std::vector<ExprRef>> target = dimsOf(1);
  if (!target)
    fail(fmt::format("its shape '{}' depends on tensor values, which dnnc import does not fold", n.inputs[1]));
  // Bidirectional broadcasting: a 1 in the target keeps x's dim.
  Shape shape = broadcast(*target, x.shape);
  size_t r = shape.size();
  for (size_t k = 0; k < r; ++k) {
    ExprRef t = k + target->size() >= r ? (*target)[k + target->size() - r] : nullptr;
    ExprRef xd = k + x.shape.size() >= r ? x.shape[k + x.shape.size() - r] : nullptr;
    shape[k] = !t ? xd : !xd ? t : isOne(t) ? xd : t;
  }
  if (shape == x.shape) {
    alias(0, x);
    return;
  }
  def(0, fmt::format("broadcast_to({}, {})", ref(x), dimsText(shape)), x.dtype, shape);
}

// arange(start, limit, step) for a positive step, as text, and its length as the language
// types it: max(0, ceil((limit - start) / step)), or limit itself for arange(limit).
std::pair<std::string, ExprRef> arangeOf(ExprRef start, ExprRef limit, int64_t step) {
  if (start->asConst() == std::optional<int64_t>(0) && step == 1)
    return {fmt::format("arange({})", limit->str()), limit};
  ExprRef len = sym::floorDiv(sym::add(sym::sub(limit, start), sym::constant(step - 1)), sym::constant(step));
  return {fmt::format("arange({}, {}, {})", start->str(), limit->str(), step), sym::max(sym::constant(0), len)};
}

void Importer::opRange(const Node &n) {
  Val &start = in(0), &limit = in(1), &delta = in(2);
  if (start.ints && limit.ints && delta.ints && isInteger(start.dtype)) {
    ExprRef s = (*start.ints)[0], l = (*limit.ints)[0], d = (*delta.ints)[0];
    auto dc = d->asConst();
    if (!dc || *dc <= 0)
      fail("only a constant positive delta is supported");
    auto [expr, len] = arangeOf(s, l, *dc);
    if (start.dtype != DType::I64)
      expr = fmt::format("cast({}, {})", expr, dtypeName(start.dtype));
    def(0, expr, start.dtype, {len});
    return;
  }
  // A float range from an integer constant to a dim, by an integer constant step:
  // arange's integers, cast (each start + k delta is an integer, exact below 2^24 either
  // way), and its length a dim expression, so that it lines up with the tensors it comes from.
  std::optional<double> s = scalarValue(start), d = scalarValue(delta);
  auto integral = [](std::optional<double> v) { return v && std::isfinite(*v) && std::abs(*v) < 0x1p53 && *v == std::floor(*v); };
  if (start.dtype == DType::F32 && limit.floatOfDim && integral(s) && integral(d) && *d > 0) { // (f16 rounds past 2048)
    auto [ints, len] = arangeOf(sym::constant(int64_t(*s)), limit.floatOfDim, int64_t(*d));
    def(0, fmt::format("cast({}, {})", ints, dtypeName(start.dtype)), start.dtype, {len});
    return;
  }
  // Values only running knows: the length is a fresh dim.
  std::string expr = fmt::format("arange({}, {}, {})", ref(start), ref(limit), ref(delta));
  if (isFloat(start.dtype)) // start + k delta for k below max(ceil((limit - start) / delta), 0), as ONNX counts
    expr = fmt::format("cast(arange(cast(ceil(({1} - {0}) / {2}), i64)), {3}) * {2} + {0}", ref(start), ref(limit), ref(delta),
                       dtypeName(start.dtype));
  def(0, expr, start.dtype, {freshDim()}, true);
}

void Importer::opConstantOfShape(const Node &n) {
  std::optional<std::vector<ExprRef>> target = dimsOf(0);
  if (!target)
    fail(fmt::format("its shape '{}' depends on tensor values, which dnnc import does not fold", n.inputs[0]));
  const Attribute *a = n.attr("value");
  DType dt = a && a->tensor ? a->tensor->dtype : DType::F32;
  double v = a && a->tensor && a->tensor->numel() ? a->tensor->get(0) : 0.0;
  Shape shape(target->begin(), target->end());
  if (isInteger(dt)) {
    // Integer fills of a shape known at import fold too (they feed other shape data).
    auto count = product(shape, 0, shape.size())->asConst();
    if (count && *count <= 64) {
      known(0, dt, shape, std::vector<ExprRef>(size_t(*count), sym::constant(int64_t(v))));
      return;
    }
  }
  std::string expr = v == 0.0 ? fmt::format("zeros({}, dtype = {})", dimsText(shape), dtypeName(dt))
                              : fmt::format("full({}, {}, dtype = {})", dimsText(shape), floatLiteral(v), dtypeName(dt));
  def(0, expr, dt, shape);
}

// ------------------------------------------------------------------------------------
// Reductions and pooling

void Importer::opReduce(const Node &n) {
  Val &x = in(0);
  std::vector<int64_t> axes = axesOf(n, x.shape.size());
  bool keep = n.intAttr("keepdims", 1) != 0;
  if (axes.empty() && n.intAttr("noop_with_empty_axes", 0)) {
    alias(0, x);
    return;
  }
  if (axes.empty()) // every axis
    for (size_t k = 0; k < x.shape.size(); ++k)
      axes.push_back(int64_t(k));
  Shape shape = reduced(x.shape, axes, keep);
  std::string r = ref(x);
  std::string args = fmt::format("axis = {}{}", intsText(axes), keep ? ", keepdims = true" : "");
  // Each reduction as a format of (x, axis arguments).
  static const std::map<std::string, const char *> forms = {
      {"ReduceSum", "sum({0}, {1})"},          {"ReduceMean", "mean({0}, {1})"},
      {"ReduceMax", "max({0}, {1})"},          {"ReduceMin", "min({0}, {1})"},
      {"ReduceProd", "prod({0}, {1})"},        {"ReduceL1", "sum(abs({0}), {1})"},
      {"ReduceL2", "sqrt(sum({0} * {0}, {1}))"}, {"ReduceSumSquare", "sum({0} * {0}, {1})"},
      {"ReduceLogSumExp", "logsumexp({0}, {1})"}};
  std::string expr = fmt::format(fmt::runtime(forms.at(n.op)), r, args);
  def(0, expr, x.dtype, shape);
}

void Importer::opArgMax(const Node &n) {
  Val &x = in(0);
  int64_t axis = axisOf(n.intAttr("axis", 0), x.shape.size());
  bool keep = n.intAttr("keepdims", 1) != 0;
  if (n.intAttr("select_last_index", 0))
    fail("select_last_index = 1 is not supported (dnnc returns the first extreme index)");
  Shape shape = x.shape;
  if (keep)
    shape[size_t(axis)] = sym::constant(1);
  else
    shape.erase(shape.begin() + axis);
  def(0, fmt::format("{}({}, axis = {}{})", n.op == "ArgMax" ? "argmax" : "argmin", ref(x), axis,
                     keep ? ", keepdims = true" : ""),
      DType::I64, shape);
}

void Importer::opPool(const Node &n) {
  Val &x = in(0);
  if (x.shape.size() != 4)
    fail("only 2-D pooling (NCHW input) is supported");
  std::vector<int64_t> k = n.intsAttr("kernel_shape"), s = n.intsAttr("strides"), p = n.intsAttr("pads"),
                       d = n.intsAttr("dilations");
  std::string autoPad = n.stringAttr("auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "VALID")
    fail(fmt::format("auto_pad {} is not supported (export with explicit pads)", autoPad));
  if (s.empty())
    s = {1, 1};
  if (p.empty() || autoPad == "VALID")
    p = {0, 0, 0, 0};
  if (k.size() != 2 || k[0] != k[1] || s[0] != s[1] || !(p[0] == p[1] && p[1] == p[2] && p[2] == p[3]))
    fail(fmt::format("kernel {}, strides {} and pads {}: only square kernels with equal strides and equal pads are "
                     "supported",
                     intsText(k), intsText(s), intsText(p)));
  if (!d.empty() && (d[0] != 1 || d[1] != 1))
    fail("dilated pooling is not supported");
  if (n.intAttr("ceil_mode", 0))
    fail("ceil_mode = 1 is not supported");
  bool isMax = n.op == "MaxPool";
  std::string args = fmt::format("{}, stride = {}{}", k[0], s[0], p[0] ? fmt::format(", padding = {}", p[0]) : "");
  std::string expr = fmt::format("{}({}, {})", isMax ? "max_pool2d" : "avg_pool2d", ref(x), args);
  if (!isMax && p[0] && !n.intAttr("count_include_pad", 0)) {
    // dnnc's average counts the padding (as PyTorch's default); ONNX's default does not:
    // divide by the share of each window that lies inside the image.
    expr = fmt::format("{} / avg_pool2d(ones([1, 1, {}, {}]), {})", expr, x.shape[2]->str(), x.shape[3]->str(), args);
  }
  Shape shape = {x.shape[0], x.shape[1]};
  for (int ax = 0; ax < 2; ++ax)
    shape.push_back(sym::add(
        sym::floorDiv(sym::sub(sym::add(x.shape[2 + ax], sym::constant(2 * p[0])), sym::constant(k[0])), sym::constant(s[0])),
        sym::constant(1)));
  def(0, expr, x.dtype, shape);
}

void Importer::opGlobalPool(const Node &n) {
  Val &x = in(0);
  std::vector<int64_t> axes;
  Shape shape = x.shape;
  for (size_t k = 2; k < x.shape.size(); ++k) {
    axes.push_back(int64_t(k));
    shape[k] = sym::constant(1);
  }
  def(0, fmt::format("{}({}, axis = {}, keepdims = true)", n.op == "GlobalAveragePool" ? "mean" : "max", ref(x),
                     intsText(axes)),
      x.dtype, shape);
}

void Importer::opPad(const Node &n) {
  Val &x = in(0);
  if (n.stringAttr("mode", "constant") != "constant")
    fail(fmt::format("mode '{}' is not supported (only constant padding)", n.stringAttr("mode", "constant")));
  std::vector<int64_t> pads = has(1) ? constInts(1, "pads") : n.intsAttr("pads");
  size_t r = x.shape.size();
  std::vector<int64_t> axes;
  if (has(3))
    axes = constInts(3, "axes");
  else
    for (size_t k = 0; k < r; ++k)
      axes.push_back(int64_t(k));
  if (pads.size() != 2 * axes.size())
    fail(fmt::format("pads {} do not give a begin and an end per axis", intsText(pads)));
  double value = n.floatAttr("value", 0.0);
  if (has(2)) {
    Val &c = in(2);
    if (!c.constant)
      fail("its constant_value must be a constant");
    value = c.constant->numel() ? c.constant->get(0) : 0.0;
  }
  std::vector<int64_t> flat(2 * r, 0);
  Shape shape = x.shape;
  for (size_t q = 0; q < axes.size(); ++q) {
    size_t a = size_t(axisOf(axes[q], r));
    int64_t b = pads[q], e = pads[q + axes.size()];
    if (b < 0 || e < 0)
      fail("negative pads (cropping) are not supported");
    flat[2 * a] = b;
    flat[2 * a + 1] = e;
    shape[a] = sym::add(shape[a], sym::constant(b + e));
  }
  def(0, fmt::format("pad({}, {}{})", ref(x), intsText(flat), value != 0.0 ? ", " + floatLiteral(value) : ""), x.dtype,
      shape);
}

// ------------------------------------------------------------------------------------
// Data-dependent (EDO) ops

void Importer::opNonZero(const Node &n) {
  Val &x = in(0);
  std::string m = x.dtype == DType::Bool ? ref(x) : fmt::format("{} != {}", ref(x), isFloat(x.dtype) ? "0.0" : "0");
  // dnnc's nonzero is NumPy's argwhere ([N, rank]); ONNX's is its transpose.
  ExprRef count = freshDim();
  std::string idx = fresh(sanitize(n.outputs[0]) + "_rows");
  line(fmt::format("let {}: i64[{}, {}] = nonzero({});", idx, count->str(), x.shape.size(), m));
  def(0, fmt::format("transpose({})", idx), DType::I64, {sym::constant(int64_t(x.shape.size())), count});
}

void Importer::opTopK(const Node &n) {
  Val &x = in(0);
  int64_t axis = axisOf(n.intAttr("axis", -1), x.shape.size());
  bool largest = n.intAttr("largest", 1) != 0;
  std::optional<std::vector<ExprRef>> k = dimsOf(1);
  std::string kText;
  ExprRef kDim;
  bool annotate = false;
  if (k && k->size() == 1) {
    kDim = (*k)[0];
    kText = kDim->str();
  } else {
    Val &kv = in(1);
    kText = kv.shape.empty() ? ref(kv) : ref(kv) + "[0]";
    kDim = freshDim();
    annotate = true;
  }
  std::string vals = fresh(sanitize(n.outputs[0])), idx = fresh(sanitize(n.outputs.size() > 1 ? n.outputs[1] : "indices"));
  Shape shape = x.shape;
  shape[size_t(axis)] = kDim;
  std::string src = largest ? ref(x) : "-" + ref(x);
  std::string a = axis == int64_t(x.shape.size()) - 1 ? "" : fmt::format(", axis = {}", axis);
  if (annotate) {
    std::string t = fresh(vals + "_pair");
    line(fmt::format("let ({}, {}) = topk({}, {}{});", t + "_v", t + "_i", src, kText, a));
    line(fmt::format("let {}: {} = {};", vals + (largest ? "" : "_neg"), typeText(x.dtype, shape), t + "_v"));
    line(fmt::format("let {}: {} = {};", idx, typeText(DType::I64, shape), t + "_i"));
    used_.insert(t + "_v");
    used_.insert(t + "_i");
  } else {
    line(fmt::format("let ({}, {}) = topk({}, {}{});", vals + (largest ? "" : "_neg"), idx, src, kText, a));
  }
  if (!largest)
    line(fmt::format("let {} = -{}_neg;", vals, vals));
  used_.insert(vals + "_neg");
  Val v;
  v.dtype = x.dtype;
  v.shape = shape;
  v.depth = scopes_.size();
  v.ref = vals;
  bind(n.outputs[0], v);
  if (n.outputs.size() > 1 && !n.outputs[1].empty()) {
    v.dtype = DType::I64;
    v.ref = idx;
    bind(n.outputs[1], v);
  }
}

// ------------------------------------------------------------------------------------
// Control flow

// Translates subgraph `g` one block deeper into `lines`, with its inputs bound to `inputs`;
// returns its outputs (their names are valid inside the block only).
std::vector<Val> Importer::block(const Graph &g, const std::vector<Val> &inputs, std::vector<std::string> &lines) {
  const Node *node = node_;
  size_t index = nodeIndex_;
  std::vector<std::string> *saved = out_;
  scopes_.emplace_back();
  out_ = &lines;
  ++indent_;
  if (inputs.size() > g.inputs.size())
    fail(fmt::format("its subgraph '{}' takes {} inputs, not {}", g.name, g.inputs.size(), inputs.size()));
  for (size_t k = 0; k < inputs.size(); ++k) {
    Val v = inputs[k];
    v.depth = scopes_.size();
    bind(g.inputs[k].name, v);
  }
  addInitializers(g);
  translateNodes(g);
  node_ = node;
  nodeIndex_ = index;
  std::vector<Val> outs;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    Val *v = find(g.outputs[k].name);
    if (!v)
      fail(fmt::format("its subgraph output '{}' is produced by no node", g.outputs[k].name));
    ref(*v);
    outs.push_back(*v);
  }
  --indent_;
  out_ = saved;
  scopes_.pop_back();
  // Names made inside the block are not visible after it.
  for (auto &scope : scopes_)
    for (auto &[name, v] : scope)
      if (v.depth > scopes_.size()) {
        v.ref.clear();
        v.depth = 0;
      }
  return outs;
}

std::string Importer::scalarCond(Val &c) {
  std::string r = ref(c);
  return c.shape.empty() ? r : fmt::format("{}[{}]", r, fmt::join(std::vector<std::string>(c.shape.size(), "0"), ", "));
}

std::string Importer::initialValue(const Val &v) {
  Shape ones(v.shape.size(), sym::constant(1));
  return fmt::format("zeros({}, dtype = {})", dimsText(ones), dtypeName(v.dtype));
}

void Importer::opIf(const Node &n) {
  Val &c = in(0);
  const Attribute *ta = n.attr("then_branch"), *ea = n.attr("else_branch");
  if (!ta || !ta->graph || !ea || !ea->graph)
    fail("has no then_branch or else_branch graph");
  // A condition known when importing keeps only the branch taken.
  if (c.ints || (c.constant && c.constant->numel() == 1)) {
    bool taken = c.ints ? (*c.ints)[0]->asConst().value_or(1) != 0 : c.constant->get(0) != 0;
    if (!c.ints || (*c.ints)[0]->asConst()) {
      std::vector<std::string> lines;
      std::vector<Val> outs = block(taken ? *ta->graph : *ea->graph, {}, lines);
      // The taken branch's names are the model's: it runs unconditionally.
      for (std::string &l : lines)
        out_->push_back(l.substr(2));
      for (size_t k = 0; k < outs.size() && k < n.outputs.size(); ++k) {
        std::string name = fresh(sanitize(n.outputs[k]));
        line(fmt::format("let {} = {};", name, outs[k].ref.empty() ? "0" : outs[k].ref));
        Val v = outs[k];
        v.ref = name;
        v.depth = scopes_.size();
        bind(n.outputs[k], v);
      }
      return;
    }
  }
  std::string cond = scalarCond(c);
  std::vector<std::string> thenLines, elseLines;
  std::vector<Val> thenOut = block(*ta->graph, {}, thenLines);
  std::vector<Val> elseOut = block(*ea->graph, {}, elseLines);
  if (thenOut.size() != elseOut.size() || thenOut.size() < n.outputs.size())
    fail("its branches give different numbers of outputs");
  std::vector<std::string> vars;
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    const Val &t = thenOut[k], &e = elseOut[k];
    if (t.dtype != e.dtype || t.shape.size() != e.shape.size())
      fail(fmt::format("output {} is {} in one branch and {} in the other; dnnc's if needs the same dtype and rank",
                       k, typeText(t.dtype, t.shape), typeText(e.dtype, e.shape)));
    std::string var = fresh(sanitize(n.outputs[k]) + "_var");
    vars.push_back(var);
    line(fmt::format("var {} = {};", var, initialValue(t)));
    std::string pad(2 * (indent_ + 1), ' ');
    thenLines.push_back(pad + fmt::format("{} = {};", var, t.ref));
    elseLines.push_back(pad + fmt::format("{} = {};", var, e.ref));
  }
  line(fmt::format("if {} {{", cond));
  out_->insert(out_->end(), thenLines.begin(), thenLines.end());
  line("} else {");
  out_->insert(out_->end(), elseLines.begin(), elseLines.end());
  line("}");
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    const Val &t = thenOut[k], &e = elseOut[k];
    Shape shape = t.shape;
    bool differ = false;
    for (size_t a = 0; a < shape.size(); ++a)
      if (t.shape[a] != e.shape[a]) {
        shape[a] = freshDim(); // the branches disagree: a dim only running tells
        differ = true;
      }
    if (differ) {
      def(k, vars[k], t.dtype, shape, true);
    } else {
      Val v;
      v.ref = vars[k];
      v.dtype = t.dtype;
      v.shape = shape;
      v.depth = scopes_.size();
      bind(n.outputs[k], v);
    }
  }
}

void Importer::opLoop(const Node &n) {
  const Attribute *ba = n.attr("body");
  if (!ba || !ba->graph)
    fail("has no body graph");
  const Graph &body = *ba->graph;
  size_t carried = n.inputs.size() > 2 ? n.inputs.size() - 2 : 0;
  if (body.inputs.size() != carried + 2 || body.outputs.size() < carried + 1)
    fail("its body's inputs and outputs do not match its loop-carried values");
  size_t scans = body.outputs.size() - 1 - carried;
  std::optional<std::vector<ExprRef>> trip = dimsOf(0);
  std::string tripText;
  if (has(0))
    tripText = trip && trip->size() == 1 ? (*trip)[0]->str() : scalarCond(in(0));
  bool condGiven = has(1);
  bool condTrue = !condGiven || (in(1).constant && in(1).constant->numel() == 1 && in(1).constant->get(0) != 0);

  std::string iter = fresh(sanitize(body.inputs[0].name.empty() ? "i" : body.inputs[0].name));
  std::string condVar = fresh(sanitize(n.name.empty() ? "cond" : n.name + "_cond"));
  std::vector<std::string> vars;
  std::vector<Val> init;
  for (size_t k = 0; k < carried; ++k) {
    Val &v = in(2 + k);
    init.push_back(v);
    vars.push_back(fresh(sanitize(k < n.outputs.size() && !n.outputs[k].empty() ? n.outputs[k] : body.inputs[2 + k].name) + "_var"));
  }
  auto bodyInputs = [&](const std::vector<Shape> &shapes) {
    std::vector<Val> ins;
    Val it;
    it.ref = iter;
    it.dtype = DType::I64;
    ins.push_back(it);
    Val c;
    c.ref = condVar;
    c.dtype = DType::Bool;
    ins.push_back(c);
    for (size_t k = 0; k < carried; ++k) {
      Val v;
      v.ref = vars[k];
      v.dtype = init[k].dtype;
      v.shape = shapes[k];
      ins.push_back(v);
    }
    return ins;
  };
  std::vector<Shape> shapes;
  for (const Val &v : init)
    shapes.push_back(v.shape);
  std::vector<std::string> lines;
  std::set<std::string> namesBefore = used_;
  std::vector<Val> outs = block(body, bodyInputs(shapes), lines);
  // A carried value whose dims change across iterations gets fresh dims inside the body
  // (an annotation names them) and after the loop; the body is translated again with them.
  bool grows = false;
  std::vector<Shape> inner = shapes;
  for (size_t k = 0; k < carried; ++k) {
    if (outs[1 + k].shape.size() != shapes[k].size() || outs[1 + k].dtype != init[k].dtype)
      fail(fmt::format("loop-carried value {} changes its dtype or rank across iterations", k));
    for (size_t a = 0; a < shapes[k].size(); ++a)
      if (outs[1 + k].shape[a] != shapes[k][a]) {
        inner[k][a] = freshDim();
        grows = true;
      }
  }
  std::vector<std::string> prologue;
  if (grows) {
    // The first translation is dropped: its names are free again (the fresh dims stay taken).
    used_ = namesBefore;
    for (const auto &[init, name] : paramOf_)
      used_.insert(name);
    for (const Shape &sh : inner)
      for (ExprRef d : sh)
        if (const sym::Atom *a = d->asVar())
          used_.insert(a->name);
    std::vector<Val> ins = bodyInputs(inner);
    for (size_t k = 0; k < carried; ++k)
      if (inner[k] != shapes[k]) {
        std::string name = fresh(vars[k] + "_in");
        prologue.push_back(std::string(2 * (indent_ + 1), ' ') +
                           fmt::format("let {}: {} = {};", name, typeText(init[k].dtype, inner[k]), vars[k]));
        ins[2 + k].ref = name;
      }
    lines.clear();
    outs = block(body, ins, lines);
  }
  const Val &condOut = outs[0];
  bool bodyKeepsTrue = condOut.ref == condVar || (condOut.constant && condOut.constant->numel() == 1 && condOut.constant->get(0) != 0);
  bool isFor = has(0) && condTrue && bodyKeepsTrue;
  std::string pad(2 * (indent_ + 1), ' ');

  for (size_t k = 0; k < carried; ++k) {
    Val &v = in(2 + k);
    line(fmt::format("var {} = {};", vars[k], ref(v)));
  }
  std::vector<std::string> scanVars;
  for (size_t s = 0; s < scans; ++s) {
    const Val &o = outs[1 + carried + s];
    Shape empty = o.shape;
    empty.insert(empty.begin(), sym::constant(0));
    scanVars.push_back(fresh(sanitize(carried + s < n.outputs.size() ? n.outputs[carried + s] : "scan") + "_var"));
    line(fmt::format("var {} = zeros({}, dtype = {});", scanVars.back(), dimsText(empty), dtypeName(o.dtype)));
  }
  if (isFor) {
    line(fmt::format("for {} in 0..{} {{", iter, tripText));
  } else {
    line(fmt::format("var {} = zeros([], dtype = i64);", iter));
    line(fmt::format("var {} = {};", condVar, condGiven ? scalarCond(in(1)) : "full([], 1.0, dtype = bool)"));
    line(fmt::format("while {}{} {{", condVar, has(0) ? fmt::format(" and {} < {}", iter, tripText) : ""));
  }
  out_->insert(out_->end(), prologue.begin(), prologue.end());
  out_->insert(out_->end(), lines.begin(), lines.end());
  // The next iteration's values: read every body output before assigning any.
  for (size_t k = 0; k < carried; ++k)
    if (outs[1 + k].ref != vars[k])
      out_->push_back(pad + fmt::format("{} = {};", vars[k], outs[1 + k].ref));
  for (size_t s = 0; s < scans; ++s)
    out_->push_back(pad + fmt::format("{0} = concat([{0}, unsqueeze({1}, 0)], axis = 0);", scanVars[s],
                                      outs[1 + carried + s].ref));
  if (!isFor) {
    if (condOut.ref != condVar)
      out_->push_back(pad + fmt::format("{} = {};", condVar, scalarCondText(condOut)));
    out_->push_back(pad + fmt::format("{0} = {0} + 1;", iter));
  }
  line("}");
  for (size_t k = 0; k < carried && k < n.outputs.size(); ++k) {
    if (n.outputs[k].empty())
      continue;
    if (grows && inner[k] != shapes[k]) {
      Shape after = inner[k];
      for (size_t a = 0; a < after.size(); ++a)
        if (after[a] != shapes[k][a])
          after[a] = freshDim();
      def(k, vars[k], init[k].dtype, after, true);
      continue;
    }
    Val v;
    v.ref = vars[k];
    v.dtype = init[k].dtype;
    v.shape = shapes[k];
    v.depth = scopes_.size();
    bind(n.outputs[k], v);
  }
  for (size_t s = 0; s < scans && carried + s < n.outputs.size(); ++s) {
    Shape shape = outs[1 + carried + s].shape;
    shape.insert(shape.begin(), isFor && trip && trip->size() == 1 ? (*trip)[0] : freshDim());
    def(carried + s, scanVars[s], outs[1 + carried + s].dtype, shape, true);
  }
}

std::string Importer::scalarCondText(const Val &c) {
  return c.shape.empty() ? c.ref : fmt::format("{}[{}]", c.ref, fmt::join(std::vector<std::string>(c.shape.size(), "0"), ", "));
}

} // namespace

ImportResult importModel(const Model &m, const ImportOptions &o) { return Importer(m, o).run(); }

} // namespace dnnc::onnx
