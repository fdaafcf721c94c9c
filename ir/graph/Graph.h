// The graph IR: SSA tensor values, ops from the registry, If/For/While regions, a printer.
#pragma once

#include "base/Source.h"
#include "ir/graph/Types.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace dnnc::sym {
class Analyzer;
} // namespace dnnc::sym

namespace dnnc::ir {

enum class OpKind {
#define OP(name, spelling, cls, dtypeRule, shapeRule, pattern, placement, flags, grad, verb, sig, semantics, numpy, torch) name,
#include "ir/graph/Ops.def"
#undef OP
};

struct Op;
struct Region;

struct Value {
  int id = 0;
  TensorType type;
  std::string name; // the source name it was bound to, if any
  Op *def = nullptr;       // null for region arguments
  Region *owner = nullptr; // the region whose argument this is, if any
  SourceRange loc;
};

// Columns per panel of a prepacked weight (the `prepack` op, ir/transforms/Prepack.h):
// a multiple of two vectors of every CPU's GEMM micro-kernel (2 x 16 lanes at most).
constexpr int64_t kPrepackPanel = 32;
// A prepacked weight of at most this many columns (a classifier's) is stored transposed
// instead, each column's K values contiguous: the CPU multiplies by it as dot products
// along K, whole vectors of depth, where the panels' micro-kernels would fill a vector's
// lanes with fewer columns than it has.
constexpr int64_t kNarrowColumns = 16;
// Output channels per group from which a target that runs f32 conv2d as an implicit GEMM
// (backend/lower/Schedule.h, conv2dGemm) does so, and fusion (PassOptions::convEpilogues)
// then joins its elementwise consumers as the GEMM's epilogue: one row tile of the GEMM's
// micro-kernel. With fewer (a depthwise convolution has 1) each input element the GEMM
// gathers would feed too few FMAs to pay for its gather.
constexpr int64_t kConvGemmMinChannels = 8;
// Whether a conv2d whose result has `outChannels` channels in `groups` groups has that
// many per group: the one test fusion and lowering both make.
inline bool convGemmChannels(sym::ExprRef outChannels, int64_t groups) {
  std::optional<int64_t> out = outChannels->asConst();
  return out && *out / groups >= kConvGemmMinChannels;
}

// A list of dims in which null marks a position given by a runtime operand.
using DimList = std::vector<sym::ExprRef>;
using Attr = std::variant<int64_t, double, bool, std::string, DType, sym::ExprRef, DimList>;

struct Region {
  std::vector<Value *> args;
  std::vector<Op *> ops;
  std::vector<Value *> yields;
};

struct Op {
  OpKind kind;
  ShapeClass shapeClass; // the registry's class, refined per use (topk with a runtime k)
  std::vector<Value *> operands;
  std::vector<Value *> results;
  std::map<std::string, Attr> attrs;
  std::vector<std::unique_ptr<Region>> regions;
  SourceRange loc;

  bool has(const std::string &k) const { return attrs.count(k) != 0; }
  template <class T> const T &get(const std::string &k) const { return std::get<T>(attrs.at(k)); }
};

// The typed attributes of `index` (x[subscripts]): per input axis a start, stop and step
// (null: given by a run-time operand, those operands following x in axis order) and a
// point flag (a point index, which drops its axis). They live in the op's attrs as dim
// lists, so they print and serialize like any attribute; only this struct names them.
struct IndexAttrs {
  const DimList &starts, &stops, &steps, &points;

  // The attrs of an `index` op (InternalError for any other op).
  static IndexAttrs of(const Op &op);
  static std::map<std::string, Attr> make(DimList starts, DimList stops, DimList steps, DimList points);
  bool isPoint(size_t axis) const { return points[axis]->asConst() == 1; }
  int64_t step(size_t axis) const { return *steps[axis]->asConst(); } // sema allows constants only
  // Whether the index is points on leading axes, then whole axes of an operand of dims
  // `dims`: its result is one contiguous block of the operand (w[l] of w: f32[L, K, N]).
  bool isLeadingSlice(const DimList &dims) const;
  // The point on `axis` of a `typeText` operand whose dim is `dim` (`d` at this binding),
  // counted from the end when negative and checked against `d`: a DataError names the index
  // as the user wrote it. `value` is the static start evaluated (sema already added the dim to
  // a negative literal) or, for a runtime index, the operand's value.
  int64_t resolvePoint(size_t axis, sym::ExprRef dim, int64_t value, int64_t d, const std::string &typeText) const;
};

// One model after sema: its body region (inputs are the region's arguments, outputs its
// yields) and the store that owns every value and op.
class Graph {
public:
  std::string name;
  Region body;
  int mainFile = -1;                    // ops from other files (the stdlib) name theirs
  std::map<int, std::string> fileNames; // file id -> short name, for printing
  // The inclusive range of every dim the model knows (fresh dims start at 0); the
  // runtime checks bound dims against it.
  std::map<std::string, std::pair<int64_t, int64_t>> dimRanges;
  // The model's output names from `-> (emb: f32[B, D], ...)`, "" where unnamed; empty when
  // none is named. outputName() gives every output's name.
  std::vector<std::string> outputNames;
  // Outputs that are new values of a param or an input (a training step's updated params
  // and optimizer state, ir/transforms/TrainStep.h): the runtime may write output `output`
  // straight into the memory of param `param` (when not empty) or of input `input`. The
  // execution-order pass keeps only those it can make safe (every other reader of the old
  // value runs first) and drops the rest, which then come out as ordinary outputs.
  struct Update {
    size_t output = 0;
    std::string param;
    size_t input = 0;
  };
  std::vector<Update> updates;

  Value *newValue(TensorType type, std::string name = "", SourceRange loc = {});
  Op *newOp(OpKind kind, SourceRange loc);
  const std::vector<std::unique_ptr<Value>> &values() const { return values_; }

private:
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Op>> ops_;
};

// Output k's name: its name in the model's signature, else out{k} (what `dnnc run` calls
// its file and `dnnc shapes` lists).
std::string outputName(const Graph &g, size_t k);

// The value an update overwrites: the param's value or the input (null when the graph
// has no such param).
const Value *updateTarget(const Graph &g, const Graph::Update &u);

// "line 18" in the model's file, "nn.dnn:16" in another; "" without a location.
std::string sourceLine(const Graph &g, const SourceRange &loc);

// Every op of the graph, nested regions before the op that holds them, in program order:
// the order kernels are numbered in.
std::vector<const Op *> opsPostOrder(const Graph &g);

// Renders the graph as text (`dnnc emit --emit=ir`).
std::string print(const Graph &g);
std::string attrText(const Attr &a);

// Checks structural invariants (operands defined before use and in scope, result and
// yield counts, typed values); throws InternalError naming the first violation.
void verify(const Graph &g);
// The same, and with the analyzer that holds the model's facts (its asserts), every
// rule-typed op is re-checked: its dtype and shape rule still gives the types its results
// hold (dims a rule makes fresh are compared by rank only) and its axes are non-negative.
void verify(const Graph &g, const sym::Analyzer &analyzer);

} // namespace dnnc::ir
