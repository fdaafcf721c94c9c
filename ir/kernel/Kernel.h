// Kernel IR: loop nests whose extents and indices are dim expressions (ir/sym), over
// typed buffers, with a schedule. Each kernel computes one graph op (fusion comes later).
// Loop variables are dims named "%0", "%1", ... so indices stay canonical expressions.
#pragma once

#include "ir/graph/Graph.h"

#include <memory>
#include <string>
#include <vector>

namespace dnnc::kir {

// A scalar computation. Float values compute in f32, integers in i64, bools in i1.
struct Value;
using ValuePtr = std::shared_ptr<const Value>;
struct Value {
  enum class Kind { Const, Load, Index, Local, Unary, Binary, Select, Cast };
  Kind kind = Kind::Const;
  DType dtype = DType::F32; // the value's type
  double number = 0;      // Const
  int buffer = -1;        // Load
  sym::ExprRef index = nullptr; // Load: flat element index; Index: the integer value itself
  std::string local;      // Local
  ir::OpKind op{};        // Unary/Binary: the graph op whose scalar function applies
  std::vector<ValuePtr> args; // operands; for a Load, an optional run-time offset (i64) added to index
};

ValuePtr constant(double v, DType t);
ValuePtr load(int buffer, sym::ExprRef index, DType t, ValuePtr offset = nullptr);
ValuePtr indexValue(sym::ExprRef e);
ValuePtr local(const std::string &name, DType t);
ValuePtr unary(ir::OpKind op, ValuePtr a, DType t);
ValuePtr binary(ir::OpKind op, ValuePtr a, ValuePtr b, DType t);
ValuePtr select(ValuePtr cond, ValuePtr a, ValuePtr b);
ValuePtr cast(ValuePtr a, DType t);

// A register- and cache-tiled f32 matrix product over one block of rows, which each back
// end emits with its own schedule (vector FMA micro-kernels on the CPU):
//   C[c + i*ldc + j] = sum_k A[a + i*lda + k] * B[b + k*ldb + j*bColStride]
// for i in [row0, row0 + rows), j in [0, n), k in [0, depth). A bColStride other than 1
// reads B transposed in place (packing gathers its columns, or see dotProducts).
struct Stmt;
constexpr int64_t kPanelColumns = ir::kPrepackPanel;
struct Gemm {
  int a = -1, b = -1, c = -1; // buffers
  sym::ExprRef aBase, bBase, cBase, lda, ldb, ldc, row0, rows, n, depth;
  sym::ExprRef bColStride = nullptr; // null: 1
  // B is a prepacked weight (ir/transforms/Prepack.h) stored in panels of P = kPanelColumns
  // columns: with c = b + j, B(k, j) at (c / P) * depth * P + k * w + c % P, where w is the
  // panel's width: P, or N % P for a last, narrower panel (N: B's buffer's columns). bBase
  // is then the first column, ldb unused.
  bool bPanels = false;
  // Each element a dot product along k: B is read by columns (bColStride, ldb 1) and has at
  // most ir::kNarrowColumns columns (a narrow prepacked weight, a fused transpose). Decided
  // per matmul, not per task, so that every task and variant sums in the same order (the
  // CPU's order differs from its panels': docs/semantics.md). The GPU's kernels, which
  // sum each element in one thread, do not need it.
  bool dotProducts = false;
  // B is gathered from an image instead (implicit GEMM convolution, lower::Conv2dGemm):
  // B(k, j) is x[b + ci*height*width + ih*width + iw] for k = (ci*kh + ki)*kw + kj and
  // output position p = column0 + j = oh*outWidth + ow, at ih = oh*stride + ki*dilation -
  // padding and iw = ow*stride + kj*dilation - padding; 0 where (ih, iw) lies outside the
  // image (the padding). bBase is the image's first channel; ldb unused. Packing gathers
  // each depth block's panel from the windows, so the im2col matrix never exists.
  struct Im2col {
    sym::ExprRef height, width, outWidth, column0;
    int64_t kh = 1, kw = 1, stride = 1, padding = 0, dilation = 1;
  };
  std::shared_ptr<const Im2col> im2col;
  // The CPU's shape-generic variants (runtime/GemmSelect.h): packA, a dim the runtime binds
  // per launch, packs the task's rows of A into micro-panels when nonzero (null: never);
  // shapeM and shapeN are the whole matmul's rows and columns (depth is K) and batches the
  // number of matrix products, from which the runtime picks the variant. Null where the
  // target has one fixed schedule (the GPU).
  sym::ExprRef packA = nullptr, shapeM = nullptr, shapeN = nullptr, batches = nullptr;
  // Optional, applied once the block's products are stored: a loop nest
  //   for r in 0..rows { for j in 0..n { <one Store> } }
  // rewriting element (row0 + r, j) (fused bias, activation, residual). The CPU runs the
  // nest over its row block; the GPU runs the Store per element, in the thread that
  // computed it, with r and j bound. (An implicit-GEMM convolution's, CPU only, loops over
  // its output rows and columns instead of j: for r { for oh { for ow { <one Store> } } }.)
  std::shared_ptr<const Stmt> epilogue;
};

// Attention over one block of query rows of one (batch, head) (the `attention` op, see
// ir/transforms/FuseAttention.h), which each back end emits with its own schedule:
//   s(i, j) = sum_x Q[q + i*d + x] * K[k + j*d + x] * scale  (+ M[mask + i*maskRow + j*maskCol])
//   O[o + i*dv + y] = sum_j softmax_j(s(i, .)) * V[v + j*dv + y]
// for i in [row0, row0 + rows), j in [0, keys), x in [0, d), y in [0, dv); with `causal`
// the keys j > i score `fill` instead (as the unfused where). Their weight exp(fill - m)
// is 0 in f32 when the row's max m lies more than ~104 above the fill, so a back end may
// skip them, but only then: a row whose visible scores are all near the fill (or below it)
// gives them weight, as the unfused softmax over all keys does; and a value of theirs that
// is inf or NaN makes the elements it meets NaN even at weight 0 (0 inf, 0 NaN).
struct Attention {
  int q = -1, k = -1, v = -1, o = -1, mask = -1; // buffers (mask: -1 for none)
  sym::ExprRef qBase = nullptr, kBase = nullptr, vBase = nullptr, oBase = nullptr, row0 = nullptr, rows = nullptr, keys = nullptr,
               d = nullptr, dv = nullptr;
  sym::ExprRef maskBase = nullptr, maskRow = nullptr, maskCol = nullptr; // with a mask
  // The rows go in blocks of rowBlock (the CPU's lanes across rows; the GPU sizes its
  // shared tiles by it and takes rows <= rowBlock).
  int64_t rowBlock = 1;
  double scale = 1;
  bool causal = false;
  double fill = -1e9; // with causal: the hidden keys' score
};

// A combine of a reduction loop: after the loop, partial values of `local` kept by
// separate workers merge with `combine` (Add, Mul, Maximum, Minimum). With an `argLocal`,
// `combine` is the comparison (Gt, Lt) that picked a better `local`, and `argLocal` the
// index it was found at; ties keep the smaller index (the serial scan's first).
struct Reduction {
  std::string local;
  ir::OpKind combine{};
  std::string argLocal;
};

using StmtPtr = std::unique_ptr<Stmt>;
struct Stmt {
  enum class Kind { For, Store, Block, Let, Assign, If, Gemm, Attention };
  // Reduce: a loop whose iterations fold values into `reductions`' locals, in any order
  // (float sums in vector lanes on the CPU; split across a warp's lanes on the GPU), and
  // may store elements that no other iteration reads (softmax keeps its exps); a later
  // loop over the same extent reads them back in the same iteration (the GPU gives both
  // loops' iteration j to the same lane).
  enum class Schedule { Serial, Parallel, Vectorize, Reduce };
  Kind kind = Kind::Block;
  std::string var;              // For: the loop variable; Let/Assign: the local
  sym::ExprRef extent = nullptr; // For: runs var = 0 .. extent-1
  Schedule schedule = Schedule::Serial;
  int buffer = -1;           // Store
  sym::ExprRef index = nullptr; // Store
  ValuePtr value;            // Store/Let/Assign value; If condition
  std::vector<StmtPtr> body; // For/Block/If
  Gemm gemm;                 // Gemm
  Attention attention;       // Attention
  std::vector<Reduction> reductions; // For with Schedule::Reduce
};

StmtPtr loop(const std::string &var, sym::ExprRef extent, std::vector<StmtPtr> body,
             Stmt::Schedule s = Stmt::Schedule::Serial);
StmtPtr store(int buffer, sym::ExprRef index, ValuePtr v);
StmtPtr block(std::vector<StmtPtr> body);
StmtPtr let(const std::string &name, ValuePtr v);
StmtPtr assign(const std::string &name, ValuePtr v);
StmtPtr when(ValuePtr cond, std::vector<StmtPtr> body);
StmtPtr gemm(Gemm g);
StmtPtr attention(Attention a);
StmtPtr reduceLoop(const std::string &var, sym::ExprRef extent, std::vector<StmtPtr> body, std::vector<Reduction> reductions);

struct Buffer {
  std::string name;
  DType dtype;
  std::vector<sym::ExprRef> dims;
  bool output = false;
  // A scratch array of constant dims that each running instance of the kernel (a CPU
  // task, a GPU thread) has for itself, uninitialized: not an argument, after the
  // operands and results (a column reduction's block partials, lower::reduction).
  bool local = false;
};

struct Kernel {
  std::string name;
  std::vector<Buffer> buffers; // the op's operands, then its results, then local arrays
  StmtPtr body;
  // The body is a block of loops that read none of the memory any of them writes (concat,
  // split): a GPU runs each across the whole grid, one after another, without a barrier.
  bool independentLoops = false;
  std::vector<std::string> dims() const; // every dim the kernel reads at run time, sorted
  size_t argumentBuffers() const; // the buffers a launch passes: all but the local arrays
  // The outermost loop when it is parallel: the runtime splits its range across threads
  // (CPU) or maps it onto the grid (GPU). Null when the kernel runs as one piece.
  const Stmt *parallelLoop() const;
  // The parallel loop and the parallel loops perfectly nested in it, outermost first: one
  // collapsed range of independent iterations (the rows of [B, T, D] are B*T, not B), so
  // that a kernel splits across threads even where its outermost dim is 1. Empty without
  // a parallel loop.
  std::vector<const Stmt *> parallelNest() const;
};

// Whether the iterations of loop `s`, straight-line code, touch memory independently of
// each other: every store writes a different element in each iteration (its index is
// injective in the loop variable; one index per stored buffer), and a buffer stored in the
// loop is read in it only at the element the same iteration writes. Distinct buffers do
// not overlap except where the memory plan puts a result in place over an operand, which
// it does only where the op reads that operand at the element it writes
// (ir/graph/Updates.h, writesInPlace): so such a loop carries no dependence from one
// iteration to the next through memory, in place or not. False for a loop with loops,
// GEMMs or attention in it.
bool independentIterations(const Stmt &s);

std::string print(const Kernel &k);
std::string print(const Value &v);

// The row-major flat index of `idx` in a buffer of `dims`.
sym::ExprRef flatIndex(const std::vector<sym::ExprRef> &dims, const std::vector<sym::ExprRef> &idx);
// The name of loop variable n.
std::string loopVar(int n);

} // namespace dnnc::kir
