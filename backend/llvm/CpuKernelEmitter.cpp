// The CPU's kernel emitter: the runtime's KernelFn signature, the parallel loop over the
// chunk each call is handed, GEMMs as vector FMA micro-kernels sized to the host, and
// attention as a tiled online softmax.
#include "backend/llvm/GemmMicroKernel.h"
#include "backend/llvm/KernelEmitter.h"
#include "runtime/GemmSelect.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>
#include <optional>

namespace dnnc::backend {
namespace {

// Transposes the n x n matrix whose rows are the n vectors `rows` (n lanes each, n a power
// of two): round d swaps the off-diagonal d x d blocks of every 2d x 2d block, two
// two-source shuffles per pair of rows, log2(n) rounds.
void transposeSquare(llvm::IRBuilder<> &b, std::vector<llvm::Value *> &rows) {
  const unsigned n = static_cast<unsigned>(rows.size());
  for (unsigned d = n / 2; d >= 1; d /= 2)
    for (unsigned i = 0; i < n; ++i) {
      if (i & d)
        continue;
      std::vector<int> upper(n), lower(n);
      for (unsigned e = 0; e < n; ++e) {
        upper[e] = static_cast<int>(e & d ? n + e - d : e);
        lower[e] = static_cast<int>(e & d ? n + e : e + d);
      }
      llvm::Value *a = rows[i], *c = rows[i + d];
      rows[i] = b.CreateShuffleVector(a, c, upper);
      rows[i + d] = b.CreateShuffleVector(a, c, lower);
    }
}

// The n x n matrix whose rows are row(0) .. row(n - 1), transposed: vector d is lane d of
// every row (the packing copies: A's micro-panels, a transposed B's panels, attention's q).
std::vector<llvm::Value *> transposed(llvm::IRBuilder<> &b, unsigned n, const std::function<llvm::Value *(unsigned)> &row) {
  std::vector<llvm::Value *> rows(n);
  for (unsigned r = 0; r < n; ++r)
    rows[r] = row(r);
  transposeSquare(b, rows);
  return rows;
}

// Lane i of the result is the sum of the lanes of vectors[i] (as many vectors as lanes, a
// power of two): log2(lanes) rounds, each adding the halves of every pair's segments (2
// shuffles and an add per pair), lanes - 1 adds and 2 (lanes - 1) shuffles in all, where
// reducing each vector alone takes log2(lanes) shuffles and adds per vector.
llvm::Value *sumEach(llvm::IRBuilder<> &b, std::vector<llvm::Value *> vectors) {
  const unsigned lanes = static_cast<unsigned>(vectors.size());
  for (unsigned segment = lanes; segment > 1; segment /= 2) { // each vector: lanes / segment sums' partials
    std::vector<llvm::Value *> next;
    for (size_t p = 0; p < vectors.size(); p += 2) {
      std::vector<int> low, high;
      for (unsigned from = 0; from < 2; ++from)
        for (unsigned s = 0; s < lanes; s += segment)
          for (unsigned l = 0; l < segment / 2; ++l) {
            low.push_back(static_cast<int>(from * lanes + s + l));
            high.push_back(static_cast<int>(from * lanes + s + segment / 2 + l));
          }
      next.push_back(b.CreateFAdd(b.CreateShuffleVector(vectors[p], vectors[p + 1], low),
                                  b.CreateShuffleVector(vectors[p], vectors[p + 1], high)));
    }
    vectors = std::move(next);
  }
  return vectors[0];
}

// A conv GEMM's epilogue that the band path applies to its vectors of sums (laneEpilogue):
// its Store, and how each load of it reads a vector's lanes.
struct LaneEpilogue {
  enum class Read {
    Sums,       // C at the stored element: the sums themselves
    Uniform,    // the same element for every lane (a channel's scale or shift)
    Contiguous, // one column apart per column (a residual): a masked load per output row
    PerRow,     // the same along an output row but not from one row to the next: a gather
  };
  const kir::Stmt *store = nullptr;
  std::map<const kir::Value *, Read> loads;
};

class CpuKernelEmitter : public KernelEmitter {
public:
  CpuKernelEmitter(llvm::Module &m, const kir::Kernel &k, unsigned vectorWidth) : KernelEmitter(m, k), vectorWidth_(vectorWidth) {}

protected:
  void createFunction() override { createHostFunction(); }
  void emitBody() override {
    // Without this, targets that prefer 256-bit vectors split the GEMM's 512-bit ones.
    fn_->addFnAttr("min-legal-vector-width", std::to_string(vectorWidth_ * 32));
    fn_->addFnAttr("prefer-vector-width", std::to_string(vectorWidth_ * 32));
    stmt(*k_.body);
  }
  // A Reduce loop's sums in any order: partial sums in several vectors' lanes, added up
  // at the end. A serial f32 add chain waits an add's latency (4 cycles) per element; in
  // order, a vectorized sum still adds lane by lane (optimize()'s ordered reductions).
  void forStmt(const kir::Stmt &s) override {
    if (s.schedule == kir::Stmt::Schedule::Reduce) {
      std::vector<std::string> added;
      for (const kir::Reduction &r : s.reductions)
        if (reassociable_.insert(r.local).second)
          added.push_back(r.local);
      emitFor(s);
      for (const std::string &n : added)
        reassociable_.erase(n);
      return;
    }
    emitFor(s);
  }
  // The parallel nest runs the chunk [begin, end) of its collapsed range that the runtime
  // hands this call; a single parallel loop as itself, which keeps its vectorizer hint.
  void emitFor(const kir::Stmt &s) {
    if (&s != k_.parallelLoop())
      return KernelEmitter::forStmt(s);
    std::vector<const kir::Stmt *> nest = k_.parallelNest();
    if (nest.size() == 1)
      return loopOver(s, fn_->getArg(2), fn_->getArg(3), b_.getInt64(1));
    collapsedChunk(nest);
  }
  // A vector loop over a known extent of fewer than 4 vectors with a partial last one (a
  // softmax over 10 classes): its iterations as masked vectors. Unmasked, LLVM runs loops
  // of fewer than 16 iterations scalar, and a longer one's tail scalar. A Reduce loop only
  // where each reduction's result does not depend on its order (sums, which the kernels
  // may reassociate, and max and min without an index): the vectorize hint lets LLVM
  // reorder any reduction, and an f32 product accumulates serially (docs/semantics.md).
  bool maskTail(const kir::Stmt &s) const override {
    if (s.schedule != kir::Stmt::Schedule::Vectorize && s.schedule != kir::Stmt::Schedule::Reduce)
      return false;
    for (const kir::Reduction &r : s.reductions)
      if (!r.argLocal.empty() || (r.combine != ir::OpKind::Add && r.combine != ir::OpKind::Maximum && r.combine != ir::OpKind::Minimum))
        return false;
    std::optional<int64_t> n = s.extent ? s.extent->asConst() : std::nullopt;
    return n && *n > 1 && *n < 4 * int64_t(vectorWidth_) && *n % int64_t(vectorWidth_) != 0;
  }
  void gemmStmt(const kir::Gemm &g) override;
  // tile(i0, size) over [begin, end): full tiles of `top`, then one tile of each smaller
  // power of two (8 at most) that the remainder needs, so that nothing is computed twice.
  void tiles(const std::string &name, llvm::Value *begin, llvm::Value *end, unsigned top,
             const std::function<void(llvm::Value *, unsigned)> &tile);
  // Cycles per depth step of R x 2-vector tiles of height `top` over m rows (tiles()).
  static int64_t tileCycles(int64_t m, unsigned top);
  static unsigned bandTileRows(sym::ExprRef rows, unsigned top);
  // A GEMM task's operands as gemmStmt evaluated them (B read by columns, bColStride apart).
  struct GemmTask {
    llvm::Value *aBase, *bBase, *cBase, *lda, *bColStride, *ldc, *n, *depth, *row0, *rowEnd;
  };
  // C = A B as dot products (kir::Gemm::dotProducts: at most ir::kNarrowColumns columns of
  // a B read by columns), where the panels' micro-kernels would use n of a vector's lanes
  // and load an A element per FMA.
  void dotProducts(const kir::Gemm &g, const GemmTask &t);
  // Packs an implicit-GEMM convolution's B rows [k0, kEnd) for the two vectors of output
  // positions from p0 into `panel` (row k at (k - k0) * 2 vectors); `columnMasks`, when
  // given, are the lanes below the GEMM's n.
  void packWindows(const kir::Gemm::Im2col &x, llvm::Value *X, llvm::Value *base, llvm::Value *height, llvm::Value *width,
                   llvm::Value *outWidth, llvm::Value *p0, const std::vector<llvm::Value *> &columnMasks, llvm::Value *k0,
                   llvm::Value *kEnd, llvm::Value *panel);
  // Copies an implicit-GEMM convolution's input rows for a band of output rows, padded
  // and split into the stride's phases (gemmStmt's band path).
  void copyBand(const kir::Gemm::Im2col &x, llvm::Value *X, llvm::Value *base, llvm::Value *height, llvm::Value *imageWidth,
                llvm::Value *outRow, llvm::Value *rows, llvm::Value *channels, llvm::Value *bandRows, llvm::Value *width,
                llvm::Value *band);
  void attentionStmt(const kir::Attention &a) override;
  // Where one vector of a conv band's sums lands (gemmStmt's band path): GEMM row `row`
  // (relative to its first), lanes masks[0] in output row rows[0] from column columns[0]
  // on, lanes masks[1] in rows[1] from columns[1] on (rows relative to the task's band).
  struct SumLanes {
    llvm::Value *sums, *row;
    std::array<llvm::Value *, 2> rows, columns, masks;
  };
  // The value v of g's epilogue (laneEpilogue's `e`) for those lanes.
  llvm::Value *epilogueLanes(const kir::Gemm &g, const LaneEpilogue &e, const kir::Value &v, const SumLanes &at);

private:
  void collapsedChunk(const std::vector<const kir::Stmt *> &nest);
  // v in every lane of a host vector; the lane numbers 0, 1, ... (i64).
  llvm::Value *splat(llvm::Value *v) { return b_.CreateVectorSplat(vectorWidth_, v); }
  // What a vector access at a whole number of vectors into a 64-byte-aligned local (a
  // packed panel, attention's score rows) may claim: 64 bytes only at 16 lanes.
  llvm::Align vectorAlign() const { return llvm::Align(4 * vectorWidth_); }
  llvm::Value *loadLanes(llvm::Value *ptr, llvm::Value *mask) { return backend::loadLanes(b_, vectorWidth_, ptr, mask); }
  llvm::Value *laneNumbers() {
    std::vector<llvm::Constant *> lanes;
    for (unsigned l = 0; l < vectorWidth_; ++l)
      lanes.push_back(b_.getInt64(l));
    return llvm::ConstantVector::get(lanes);
  }

  unsigned vectorWidth_; // f32 lanes of the widest vector the host has
};

// The Store of a conv GEMM's epilogue (for row { for band row { for column { Store } } })
// when the band path can apply it to its vectors of sums before they are stored, saving
// the pass that reads the task's output back: f32 throughout; C read only at the stored
// element; other buffers read at an element the same along an output row (a channel's
// scale) or one column apart per column (a residual); arithmetic that needs no vector math
// (exp, tanh, ... stay scalar functions the loop vectorizer widens). Nothing otherwise.
std::optional<LaneEpilogue> laneEpilogue(const kir::Gemm &g, const kir::Kernel &k) {
  if (!g.epilogue || g.epilogue->kind != kir::Stmt::Kind::For)
    return std::nullopt;
  const kir::Stmt *nest = g.epilogue.get();
  for (int depth = 0; depth < 3; ++depth) {
    if (nest->body.size() != 1)
      return std::nullopt;
    nest = nest->body[0].get();
  }
  const std::string &bandRow = g.epilogue->body[0]->var, &column = g.epilogue->body[0]->body[0]->var;
  if (nest->kind != kir::Stmt::Kind::Store || nest->buffer != g.c)
    return std::nullopt;
  LaneEpilogue e;
  e.store = nest;
  using Read = LaneEpilogue::Read;
  std::function<bool(const kir::Value &)> fits = [&](const kir::Value &v) {
    if (v.dtype != DType::F32)
      return false;
    switch (v.kind) {
    case kir::Value::Kind::Const: return true;
    case kir::Value::Kind::Load: {
      if (!v.args.empty() || k.buffers.at(size_t(v.buffer)).dtype != DType::F32)
        return false;
      if (v.buffer == g.c) {
        e.loads[&v] = Read::Sums;
        return v.index == e.store->index;
      }
      // How far the index moves from one output column to the next.
      sym::ExprRef step = sym::sub(sym::substitute(v.index, {{column, sym::add(sym::var(column), sym::constant(1))}}), v.index);
      std::vector<std::string> dims = sym::freeVars(v.index);
      bool alongRows = std::find(dims.begin(), dims.end(), bandRow) != dims.end();
      if (step == sym::constant(1))
        e.loads[&v] = Read::Contiguous;
      else if (step == sym::constant(0))
        e.loads[&v] = alongRows ? Read::PerRow : Read::Uniform;
      else
        return false;
      return true;
    }
    case kir::Value::Kind::Unary: {
      std::optional<ir::UnaryOp> op = ir::asUnaryOp(v.op);
      using U = ir::UnaryOp;
      return op && (*op == U::Neg || *op == U::Abs || *op == U::Relu || *op == U::Sqrt || *op == U::Rsqrt || *op == U::Floor ||
                    *op == U::Ceil || *op == U::Round || *op == U::Sign) &&
             fits(*v.args[0]);
    }
    case kir::Value::Kind::Binary: {
      std::optional<ir::BinaryOp> op = ir::asBinaryOp(v.op);
      using B = ir::BinaryOp;
      return op && (*op == B::Add || *op == B::Sub || *op == B::Mul || *op == B::Div || *op == B::Maximum || *op == B::Minimum) &&
             fits(*v.args[0]) && fits(*v.args[1]);
    }
    default: return false;
    }
  };
  if (!fits(*e.store->value))
    return std::nullopt;
  return e;
}

// The chunk [begin, end) of the collapsed range of `nest` (outermost first; the innermost
// index varies fastest): begin is split into the loops' indices once, then each iteration
// runs the innermost loop's body and advances the indices like an odometer, so that an
// iteration (often a row of a few dozen elements) costs no division. An empty chunk
// divides by nothing (its range may hold a dim of 0).
void CpuKernelEmitter::collapsedChunk(const std::vector<const kir::Stmt *> &nest) {
  llvm::Value *begin = fn_->getArg(2), *end = fn_->getArg(3);
  llvm::Type *i64 = b_.getInt64Ty();
  onlyIf(b_.CreateICmpSLT(begin, end), [&] {
    std::vector<llvm::Value *> extents(nest.size());
    std::vector<llvm::AllocaInst *> at(nest.size());
    llvm::Value *rest = begin;
    for (size_t k = nest.size(); k-- > 0;) {
      extents[k] = index(nest[k]->extent);
      at[k] = entryAlloca(i64, nest[k]->var + ".at");
      b_.CreateStore(k > 0 ? b_.CreateURem(rest, extents[k]) : rest, at[k]);
      if (k > 0)
        rest = b_.CreateUDiv(rest, extents[k]);
    }
    forLoop(nest.front()->var + ".chunk", begin, end, 1, [&](llvm::Value *) {
      std::vector<llvm::Value *> idx;
      std::map<std::string, llvm::Value *> saved;
      for (size_t k = 0; k < nest.size(); ++k) {
        idx.push_back(b_.CreateLoad(i64, at[k]));
        saved[nest[k]->var] = vars_.count(nest[k]->var) ? vars_[nest[k]->var] : nullptr;
        vars_[nest[k]->var] = idx.back();
      }
      for (const auto &c : nest.back()->body)
        stmt(*c);
      for (auto &[name, value] : saved)
        vars_[name] = value;
      // Add one to the innermost index; an index that reaches its extent wraps to 0 and
      // carries one into the next outer (the outermost never wraps inside the range).
      llvm::Value *carry = b_.getInt64(1);
      for (size_t k = nest.size(); k-- > 0;) {
        llvm::Value *next = b_.CreateAdd(idx[k], carry);
        if (k == 0) {
          b_.CreateStore(next, at[k]);
          break;
        }
        llvm::Value *wraps = b_.CreateICmpEQ(next, extents[k]);
        b_.CreateStore(b_.CreateSelect(wraps, b_.getInt64(0), next), at[k]);
        carry = b_.CreateZExt(wraps, i64);
      }
    });
  });
}

// A tile issues R * 2 FMAs on two ports, but each of its accumulators waits an FMA's
// latency (4 cycles) for the last: 16 rows as 14 and then 2 take 7 + 4 cycles, as 8 and 8,
// 8.
int64_t CpuKernelEmitter::tileCycles(int64_t m, unsigned top) {
  int64_t total = m / top * std::max<int64_t>(top, 4), rest = m % top;
  for (int64_t size = 8; size >= 1; size /= 2)
    if (size < top && rest >= size)
      total += std::max<int64_t>(size, 4), rest -= size;
  return total;
}

// The tile height for the band path's R x 2-vector tiles over `rows` output channels:
// `top`, or 8 where that takes fewer cycles per depth step (tileCycles).
unsigned CpuKernelEmitter::bandTileRows(sym::ExprRef rows, unsigned top) {
  std::optional<int64_t> m = rows->asConst();
  if (!m || *m <= 0 || top <= 8) // (8 rows are more registers than a smaller top leaves)
    return top;
  return tileCycles(*m, 8) < tileCycles(*m, top) ? 8 : top;
}

void CpuKernelEmitter::tiles(const std::string &name, llvm::Value *begin, llvm::Value *end, unsigned top,
                             const std::function<void(llvm::Value *, unsigned)> &tile) {
  llvm::Value *i = b_.CreateSub(end, b_.CreateSRem(b_.CreateSub(end, begin), b_.getInt64(top)));
  forLoop(name, begin, i, top, [&](llvm::Value *i0) { tile(i0, top); });
  for (unsigned size = 8; size >= 1; size /= 2) {
    if (size >= top)
      continue;
    llvm::BasicBlock *before = b_.GetInsertBlock();
    llvm::Value *next = b_.CreateAdd(i, b_.getInt64(size));
    llvm::BasicBlock *after = nullptr;
    onlyIf(b_.CreateICmpSLE(next, end), [&] {
      tile(i, size);
      after = b_.GetInsertBlock();
    });
    llvm::PHINode *phi = b_.CreatePHI(b_.getInt64Ty(), 2);
    phi->addIncoming(i, before);
    phi->addIncoming(next, after);
    i = phi;
  }
}

// The GEMM schedule. Micro-kernels hold R rows x V vectors of C in registers and, for
// each k, broadcast one A element per row and multiply it into V vectors of B's row k with
// FMAs; each shape is a function that every GEMM kernel calls (GemmMicroKernel.h). Rows
// go in tiles of the path's height, then one tile of each smaller power of two the
// remainder needs, so no row is computed twice. Two paths, chosen per call:
// - packed (more than kStreamRows rows): blocks of kDepthBlock along k, panels of two
//   vectors of columns packed first (zero-padded), so that every tile of kRows rows
//   streams the panel from L1 with no cache-set conflicts;
// - streamed (at most kStreamRows rows: a batch of 1, a matrix-vector product): packing
//   would cost as much as the product, so the micro-kernels read B where it lies, as wide
//   as the registers allow (V = kStreamAccumulators / R vectors, up to 16 vectors, 256 columns,
//   for one row): B's rows are read once each, in contiguous runs, at memory bandwidth.
//   (Reading B in place with 8 or more rows, two vectors wide, ran slower than packing:
//   each pass over a panel strides B's rows through the same cache sets.)
// B read transposed is always packed (packing gathers its columns). Column tails use
// masked loads and stores.
// A variant that packs A (g.packA nonzero at run time, runtime/GemmSelect.h), in a task of
// at most rt::kGemmMaxRows rows (what the panels' buffer holds), copies the task's rows of
// each depth block into micro-panels of kRows rows, k-major (row r of a
// panel at k is kRows * (k - k0) + r), before the block's column loop: the packed path's
// micro-kernels then read A at constant offsets from one pointer, contiguously, instead of
// kRows rows lda apart (which, at lda = 1024, share L1 sets with the panel of B).
void CpuKernelEmitter::gemmStmt(const kir::Gemm &g) {
  const int64_t kDepthBlock = 256;
  // The runtime's cost model (runtime/GemmSelect.h) assumes this same cutoff.
  const unsigned kStreamRows = static_cast<unsigned>(rt::kGemmStreamRows);
  const unsigned vw = vectorWidth_, kRows = vw >= 16 ? 14 : 6, kAccumulators = 2 * kRows, kMaxVectors = 16;
  const unsigned kStreamAccumulators = vw >= 16 ? 16 : 12;
  llvm::Type *f32 = b_.getFloatTy();
  auto *vec = llvm::FixedVectorType::get(f32, vw);
  llvm::Value *aBase = index(g.aBase), *bBase = index(g.bBase), *cBase = index(g.cBase);
  llvm::Value *lda = index(g.lda), *ldb = index(g.ldb), *ldc = index(g.ldc), *n = index(g.n), *depth = index(g.depth);
  llvm::Value *bColStride = g.bColStride ? index(g.bColStride) : nullptr;
  // Prepacked B: all its columns (the panels' layout depends on them, not on the task's).
  llvm::Value *panelColumns = g.bPanels ? index(k_.buffers.at(static_cast<size_t>(g.b)).dims.back()) : nullptr;
  llvm::Value *row0 = index(g.row0), *rowEnd = b_.CreateAdd(row0, index(g.rows));
  if (g.dotProducts) {
    if (!bColStride || !g.ldb->asConst() || *g.ldb->asConst() != 1)
      throw InternalError(fmt::format("{}: a GEMM of dot products must read B by columns", k_.name));
    dotProducts(g, {aBase, bBase, cBase, lda, bColStride, ldc, n, depth, row0, rowEnd});
    if (g.epilogue)
      stmt(*g.epilogue);
    return;
  }
  llvm::Value *A = bufs_[g.a], *B = bufs_[g.b], *C = bufs_[g.c];
  llvm::AllocaInst *panel = entryAlloca(llvm::ArrayType::get(f32, kDepthBlock * 2 * vw), "panel");
  panel->setAlignment(llvm::Align(64));
  llvm::AllocaInst *aPanels = nullptr;
  if (g.packA) {
    aPanels = entryAlloca(llvm::ArrayType::get(f32, (rt::kGemmMaxRows + kRows) * kDepthBlock), "apanels");
    aPanels->setAlignment(llvm::Align(64));
  }
  std::vector<llvm::AllocaInst *> acc; // the inline micro-kernels' (the band path's)
  for (unsigned k = 0; k < kAccumulators; ++k)
    acc.push_back(entryAlloca(vec, "acc"));
  llvm::Value *iota = laneNumbers();
  auto align = llvm::Align(4);
  // The columns that masks and tails are against: n, or a padded band's positions.
  llvm::Value *columns = n;
  // Lane masks of the V vectors of columns from j0: the columns below `columns`.
  auto masksOf = [&](llvm::Value *j0, unsigned V) {
    std::vector<llvm::Value *> masks;
    for (unsigned v = 0; v < V; ++v)
      masks.push_back(b_.CreateICmpSLT(b_.CreateAdd(b_.CreateVectorSplat(vw, b_.CreateAdd(j0, b_.getInt64(v * vw))), iota),
                                       b_.CreateVectorSplat(vw, columns)));
    return masks;
  };
  // Emits body(masked) twice: unmasked when the V vectors from j0 lie below `columns`,
  // masked else.
  auto fullOrTail = [&](llvm::Value *j0, unsigned V, const std::function<void(bool)> &body) {
    eitherWay(b_.CreateICmpSLE(b_.CreateAdd(j0, b_.getInt64(V * vw)), columns), [&](bool full) { body(!full); });
  };
  // C[i0:i0+R, j0:j0+V vectors] (+)= A[i0:i0+R, k0:kEnd] x B[k0:kEnd, ...], B's row k at
  // bRows + k * bStride, or at bRows + bOffsets[k] when given; `first` says whether to
  // store rather than add to C. Where packedA (i1) holds, A's rows come from the
  // micro-panels (A row i0 + r at k in the panel of row i0 - row0, at kRows * (k - k0) +
  // its place in it). `storeC`, when given, stores each sum (row, vector, value) in place
  // of the default; only then, or with bOffsets, is the micro-kernel emitted inline (its
  // one caller, the band path, reads A in place), else called (GemmMicroKernel.h).
  using StoreC = std::function<void(llvm::Value *, unsigned, llvm::Value *)>;
  auto microKernel = [&](llvm::Value *i0, unsigned R, unsigned V, llvm::Value *j0, llvm::Value *k0, llvm::Value *kEnd,
                         llvm::Value *first, llvm::Value *bRows, llvm::Value *bStride, bool masked, llvm::Value *packedA = nullptr,
                         llvm::Value *bOffsets = nullptr, const StoreC &storeC = nullptr) {
    llvm::Value *c = b_.CreateGEP(f32, C, b_.CreateAdd(cBase, b_.CreateAdd(b_.CreateMul(i0, ldc), j0)));
    llvm::Value *remaining = b_.CreateSub(columns, j0);
    auto run = [&](bool packed) {
      llvm::Value *a;
      if (packed) {
        llvm::Value *rel = b_.CreateSub(i0, row0), *top = b_.getInt64(kRows);
        llvm::Value *at = b_.CreateAdd(b_.CreateMul(b_.CreateSDiv(rel, top), b_.getInt64(kRows * kDepthBlock)), b_.CreateSRem(rel, top));
        a = b_.CreateGEP(f32, aPanels, b_.CreateSub(at, b_.CreateMul(k0, top)));
      } else {
        a = b_.CreateGEP(f32, A, b_.CreateAdd(aBase, b_.CreateMul(i0, lda)));
      }
      MicroKernelShape shape{R, V, vw, packed ? kRows : 0, masked};
      MicroKernelOperands o{a, lda, bRows, bStride, bOffsets, k0, kEnd, c, ldc, first, remaining};
      if (!storeC && !bOffsets)
        return callMicroKernel(b_, shape, o);
      emitMicroKernelBody(b_, shape, o, acc, [&](unsigned r, unsigned v, llvm::Value *sums) {
        storeC(b_.CreateAdd(i0, b_.getInt64(r)), v, sums);
      });
    };
    if (!packedA)
      return run(false);
    eitherWay(packedA, run);
  };
  // tile(i0, R) over the task's rows (tiles()).
  auto rowTiles = [&](unsigned top, const std::function<void(llvm::Value *, unsigned)> &tile) { tiles("i0", row0, rowEnd, top, tile); };
  // tile(i0, R, packedA) over the task's rows in tiles of kRows, or of 8 where the task's
  // row count takes fewer cycles so (tileCycles: 16, 17, 20, 21, 24, 25 ... rows) and A
  // is read in place (its packed micro-panels hold kRows rows each): packedA is then null.
  using RowTile = std::function<void(llvm::Value *, unsigned, llvm::Value *)>;
  auto cheapestRowTiles = [&](llvm::Value *packedA, const RowTile &tile) {
    if (kRows <= 8)
      return rowTiles(kRows, [&](llvm::Value *i0, unsigned R) { tile(i0, R, packedA); });
    uint64_t words[2] = {0, 0}; // bit m: 8-row tiles are cheaper at m rows
    for (int64_t m = 1; m < 128; ++m)
      if (tileCycles(m, 8) < tileCycles(m, kRows))
        words[m / 64] |= uint64_t(1) << (m % 64);
    llvm::Value *m = b_.CreateSub(rowEnd, row0);
    llvm::Value *word = b_.CreateSelect(b_.CreateICmpULT(m, b_.getInt64(64)), b_.getInt64(words[0]), b_.getInt64(words[1]));
    llvm::Value *bit = b_.CreateAnd(b_.CreateLShr(word, b_.CreateAnd(m, b_.getInt64(63))), b_.getInt64(1));
    llvm::Value *eight = b_.CreateAnd(b_.CreateICmpULT(m, b_.getInt64(128)), b_.CreateICmpNE(bit, b_.getInt64(0)));
    if (packedA)
      eight = b_.CreateAnd(eight, b_.CreateNot(packedA));
    eitherWay(eight, [&](bool e) {
      rowTiles(e ? 8 : kRows, [&](llvm::Value *i0, unsigned R) { tile(i0, R, e ? nullptr : packedA); });
    });
  };
  using PanelTile = std::function<void(llvm::Value *, unsigned, unsigned, llvm::Value *)>;
  // An implicit-GEMM convolution's B (kir::Gemm::Im2col): its dims, read once here.
  llvm::Value *imHeight = nullptr, *imWidth = nullptr, *imOutWidth = nullptr, *imColumn0 = nullptr;
  if (g.im2col)
    imHeight = index(g.im2col->height), imWidth = index(g.im2col->width), imOutWidth = index(g.im2col->outWidth),
    imColumn0 = index(g.im2col->column0);
  // At least one depth block, so that an empty sum still stores its zeros.
  llvm::Value *depthBlocksEnd = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, depth, b_.getInt64(1));
  llvm::Value *stream = bColStride || g.bPanels || g.im2col ? b_.getFalse() : b_.CreateICmpSLE(index(g.rows), b_.getInt64(int64_t(kStreamRows)));
  auto *streamBB = llvm::BasicBlock::Create(ctx_, "gemm.stream", fn_), *packBB = llvm::BasicBlock::Create(ctx_, "gemm.packed", fn_),
       *doneBB = llvm::BasicBlock::Create(ctx_, "gemm.done", fn_);
  b_.CreateCondBr(stream, streamBB, packBB);
  // The band path's epilogue in registers (laneEpilogue), if any, and where it goes on.
  std::optional<LaneEpilogue> epilogue;
  auto *epilogueDoneBB = llvm::BasicBlock::Create(ctx_, "gemm.epilogue.done", fn_);

  // tile(j0, W, masked) over [0, columns): full tiles of `top` vectors, then tiles of
  // one vector, then one masked vector for the rest. (A single masked tile of `top`
  // vectors for the tail ran every masked-off vector through the whole depth: [1, 512] x
  // [512, 10] took 8 us instead of 0.7. Halving tiles, 16, 8, 4, 2, 1, made every GEMM
  // kernel 29% longer and training compiles as much slower.)
  auto columnTiles = [&](unsigned top, const std::function<void(llvm::Value *, unsigned, bool)> &tile) {
    llvm::Value *wide = b_.CreateMul(b_.CreateSDiv(columns, b_.getInt64(top * vw)), b_.getInt64(top * vw));
    forLoop("j0", b_.getInt64(0), wide, top * vw, [&](llvm::Value *j0) { tile(j0, top, false); });
    llvm::Value *whole = b_.CreateMul(b_.CreateSDiv(columns, b_.getInt64(vw)), b_.getInt64(vw));
    forLoop("j1", wide, whole, vw, [&](llvm::Value *j1) { tile(j1, 1, false); });
    onlyIf(b_.CreateICmpSLT(whole, columns), [&] { tile(whole, 1, true); });
  };

  // forDepthBlocks(k0, kEnd, first) per block of kDepthBlock along k: both paths add up
  // the same blocks, so a product's sums do not depend on which one (or variant) runs it.
  auto forDepthBlocks = [&](const std::string &name, const std::function<void(llvm::Value *, llvm::Value *, llvm::Value *)> &body) {
    forLoop(name, b_.getInt64(0), depthBlocksEnd, kDepthBlock, [&](llvm::Value *k0) {
      body(k0, b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, depth, b_.CreateAdd(k0, b_.getInt64(kDepthBlock))),
           b_.CreateICmpEQ(k0, b_.getInt64(0)));
    });
  };

  b_.SetInsertPoint(streamBB);
  if (!bColStride)
    rowTiles(kStreamRows, [&](llvm::Value *i0, unsigned R) {
      columnTiles(std::min(kMaxVectors, std::max(1u, kStreamAccumulators / R)), [&](llvm::Value *j0, unsigned V, bool masked) {
        llvm::Value *bRows = b_.CreateInBoundsGEP(f32, B, b_.CreateAdd(bBase, j0));
        forDepthBlocks("sk0", [&](llvm::Value *k0, llvm::Value *kEnd, llvm::Value *first) {
          microKernel(i0, R, V, j0, k0, kEnd, first, bRows, ldb, masked);
        });
      });
    });
  b_.CreateBr(doneBB);

  b_.SetInsertPoint(packBB);
  if (g.im2col && g.im2col->dilation == 1 && g.im2col->stride <= 4) {
    // A convolution whose input rows fit kBandFloats, a few output rows at a time: those
    // rows are copied, zero-padded on every side and split into the stride's s x s
    // phases (padded row r*s + pr, column c*s + pc at phase (pr, pc), row r, column c),
    // into `band`, and the micro-kernels read B straight from it. Over positions q =
    // t * bandWidth + ow, B's row k = (ci, ki, kj) is then the phase (ki % s, kj % s) of
    // channel ci from row ki / s and column kj / s on: a contiguous vector per k, no
    // packing (which, at 16 output channels and 27 taps, cost as much as the FMAs). The
    // (kw - 1) / s positions past outWidth of each row are computed and dropped: a
    // vector's sums are stored as the lanes of its first output row and those of the next.
    // The epilogue, where it allows, is applied to each vector of sums before its stores.
    const kir::Gemm::Im2col &im = *g.im2col;
    epilogue = laneEpilogue(g, k_);
    const int64_t kBandFloats = 24576, taps = im.kh * im.kw, st = im.stride, phases = st * st;
    const int64_t rowHalo = (im.kh - 1) / st, colHalo = (im.kw - 1) / st;
    llvm::Type *i64 = b_.getInt64Ty();
    auto i = [&](int64_t v) { return b_.getInt64(v); };
    llvm::Value *outWidth = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, imOutWidth, i(1));
    llvm::Value *outRow0 = b_.CreateSDiv(imColumn0, outWidth), *outRows = b_.CreateSDiv(n, outWidth);
    llvm::Value *bandWidth = b_.CreateAdd(imOutWidth, i(colHalo)), *channels = b_.CreateSDiv(depth, i(taps));
    // Rows of one phase of one channel: as many output rows at a time as fit, plus the halo.
    llvm::Value *perRow = b_.CreateMul(b_.CreateMul(channels, i(phases)), bandWidth);
    llvm::Value *fitRows = b_.CreateSDiv(i(kBandFloats), b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, perRow, i(1)));
    llvm::Value *chunkRows = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, outRows, b_.CreateSub(fitRows, i(rowHalo)));
    llvm::Value *bandRows = b_.CreateAdd(chunkRows, i(rowHalo));
    llvm::Value *fits = b_.CreateICmpSGT(n, i(0));
    fits = b_.CreateAnd(fits, b_.CreateICmpSGE(depth, i(1)));
    fits = b_.CreateAnd(fits, b_.CreateICmpSLE(depth, i(kDepthBlock)));
    fits = b_.CreateAnd(fits, b_.CreateICmpSGE(bandWidth, i(vw)));
    fits = b_.CreateAnd(fits, b_.CreateICmpSGE(chunkRows, i(1)));
    fits = b_.CreateAnd(fits, b_.CreateICmpEQ(n, b_.CreateMul(outRows, outWidth))); // whole output rows (conv2dGemm's bands)
    auto *bandBB = llvm::BasicBlock::Create(ctx_, "gemm.band", fn_), *windowsBB = llvm::BasicBlock::Create(ctx_, "gemm.windows", fn_);
    b_.CreateCondBr(fits, bandBB, windowsBB);
    b_.SetInsertPoint(bandBB);
    llvm::AllocaInst *band = entryAlloca(llvm::ArrayType::get(f32, kBandFloats), "band");
    band->setAlignment(llvm::Align(64));
    llvm::AllocaInst *offsets = entryAlloca(llvm::ArrayType::get(i64, kDepthBlock), "band.offsets");
    forLoop("bk", i(0), depth, 1, [&](llvm::Value *k) {
      llvm::Value *ci = b_.CreateSDiv(k, i(taps)), *tap = b_.CreateSRem(k, i(taps));
      llvm::Value *ki = b_.CreateSDiv(tap, i(im.kw)), *kj = b_.CreateSRem(tap, i(im.kw));
      llvm::Value *phase = b_.CreateAdd(b_.CreateMul(b_.CreateSRem(ki, i(st)), i(st)), b_.CreateSRem(kj, i(st)));
      llvm::Value *block = b_.CreateAdd(b_.CreateMul(phase, channels), ci);
      llvm::Value *row = b_.CreateAdd(b_.CreateMul(block, bandRows), b_.CreateSDiv(ki, i(st)));
      b_.CreateStore(b_.CreateAdd(b_.CreateMul(row, bandWidth), b_.CreateSDiv(kj, i(st))), b_.CreateInBoundsGEP(i64, offsets, k));
    });
    forLoop("bt", i(0), outRows, chunkRows, [&](llvm::Value *t0) {
      llvm::Value *rows = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, chunkRows, b_.CreateSub(outRows, t0));
      copyBand(im, B, bBase, imHeight, imWidth, b_.CreateAdd(outRow0, t0), b_.CreateAdd(rows, i(rowHalo)), channels, bandRows,
               bandWidth, band);
      columns = b_.CreateAdd(b_.CreateMul(b_.CreateSub(rows, i(1)), bandWidth), imOutWidth);
      llvm::Value *chunkAt = b_.CreateMul(t0, imOutWidth); // the chunk's first output position in the task
      columnTiles(2, [&](llvm::Value *j0, unsigned V, bool masked) {
        std::vector<llvm::Value *> tail = masked ? masksOf(j0, V) : std::vector<llvm::Value *>(V, splat(b_.getTrue()));
        // Per vector: where its lanes of output row t and of row t + 1 go, and which.
        std::vector<llvm::Value *> here(V), next(V), hereLanes(V), nextLanes(V), bandRow(V), column(V);
        for (unsigned h = 0; h < V; ++h) {
          llvm::Value *q = b_.CreateAdd(j0, i(h * vw)), *t = b_.CreateUDiv(q, bandWidth);
          llvm::Value *ow = b_.CreateSub(q, b_.CreateMul(t, bandWidth)), *owLanes = b_.CreateAdd(splat(ow), iota);
          hereLanes[h] = b_.CreateAnd(tail[h], b_.CreateICmpSLT(owLanes, splat(imOutWidth)));
          nextLanes[h] = b_.CreateAnd(tail[h], b_.CreateAnd(b_.CreateICmpSGE(owLanes, splat(bandWidth)),
                                                            b_.CreateICmpSLT(owLanes, splat(b_.CreateAdd(bandWidth, imOutWidth)))));
          here[h] = b_.CreateAdd(chunkAt, b_.CreateAdd(b_.CreateMul(t, imOutWidth), ow));
          next[h] = b_.CreateSub(b_.CreateAdd(here[h], imOutWidth), bandWidth);
          bandRow[h] = b_.CreateAdd(t0, t), column[h] = ow;
        }
        StoreC store = [&](llvm::Value *row, unsigned v, llvm::Value *sum) {
          if (epilogue)
            sum = epilogueLanes(g, *epilogue, *epilogue->store->value,
                                {sum, b_.CreateSub(row, row0), {bandRow[v], b_.CreateAdd(bandRow[v], i(1))},
                                 {column[v], b_.CreateSub(column[v], bandWidth)}, {hereLanes[v], nextLanes[v]}});
          llvm::Value *cRow = b_.CreateAdd(cBase, b_.CreateMul(row, ldc));
          b_.CreateMaskedStore(sum, b_.CreateGEP(f32, C, b_.CreateAdd(cRow, here[v])), align, hereLanes[v]);
          b_.CreateMaskedStore(sum, b_.CreateGEP(f32, C, b_.CreateAdd(cRow, next[v])), align, nextLanes[v]);
        };
        llvm::Value *bandRowsAt = b_.CreateInBoundsGEP(f32, band, j0);
        rowTiles(bandTileRows(g.rows, kRows), [&](llvm::Value *i0, unsigned R) {
          microKernel(i0, R, V, j0, i(0), depth, b_.getTrue(), bandRowsAt, nullptr, masked, nullptr, offsets, store);
        });
      });
      columns = n;
    });
    b_.CreateBr(epilogue ? epilogueDoneBB : doneBB);
    b_.SetInsertPoint(windowsBB);
  }
  // tile(i0, R, V) over the rows of a two-vector panel from column j0: V = 2, or in a
  // masked tail of at most one vector (a B in rows with 10 columns) V = 1, where two-vector
  // tiles spent half their FMAs on masked-off lanes.
  auto panelTiles = [&](llvm::Value *j0, bool masked, llvm::Value *packedA, const PanelTile &tile) {
    auto tiles = [&](unsigned V) { cheapestRowTiles(packedA, [&](llvm::Value *i0, unsigned R, llvm::Value *p) { tile(i0, R, V, p); }); };
    if (!masked)
      return tiles(2);
    eitherWay(b_.CreateICmpSLE(b_.CreateSub(columns, j0), b_.getInt64(vw)), [&](bool one) { tiles(one ? 1 : 2); });
  };
  // The packed path; packedA (i1, or null for never): whether this task's variant packs A.
  auto packedPath = [&](llvm::Value *packedA) {
    forDepthBlocks("k0", [&](llvm::Value *k0, llvm::Value *kEnd, llvm::Value *first) {
      if (packedA) {
        onlyIf(packedA, [&] {
          // A[rows, k0:kEnd] into micro-panels; a last panel's rows past the task repeat its
          // last row (never read back).
          llvm::Value *panels = b_.CreateSDiv(b_.CreateAdd(b_.CreateSub(rowEnd, row0), b_.getInt64(kRows - 1)), b_.getInt64(kRows));
          llvm::Value *lastRow = b_.CreateSub(rowEnd, b_.getInt64(1));
          forLoop("ap", b_.getInt64(0), panels, 1, [&](llvm::Value *p) {
            llvm::Value *panelRow0 = b_.CreateAdd(row0, b_.CreateMul(p, b_.getInt64(kRows)));
            std::vector<llvm::Value *> rowAt;
            for (unsigned r = 0; r < kRows; ++r) {
              llvm::Value *row = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b_.CreateAdd(panelRow0, b_.getInt64(r)), lastRow);
              rowAt.push_back(b_.CreateAdd(aBase, b_.CreateMul(row, lda)));
            }
            llvm::Value *panelAt = b_.CreateSub(b_.CreateMul(p, b_.getInt64(kRows * kDepthBlock)), b_.CreateMul(k0, b_.getInt64(kRows)));
            // vw depths at a time: the rows' vectors transposed in registers, each depth's
            // kRows lanes stored at once. (Element by element, the copy took 14% of a
            // 1024^3 product, as long as its FMAs' gain from the packed layout.)
            auto depthAt = [&](llvm::Value *k) { return b_.CreateAdd(panelAt, b_.CreateMul(k, b_.getInt64(kRows))); };
            llvm::Value *vectorEnd = k0; // depths [k0, vectorEnd) by transposes, the rest one at a time
            if (kRows <= vw) {
              vectorEnd = b_.CreateSub(kEnd, b_.CreateSRem(b_.CreateSub(kEnd, k0), b_.getInt64(vw)));
              llvm::Value *rowLanes = b_.CreateICmpSLT(iota, splat(b_.getInt64(kRows))); // a constant
              forLoop("akv", k0, vectorEnd, vw, [&](llvm::Value *k) {
                std::vector<llvm::Value *> lanes = transposed(b_, vw, [&](unsigned r) -> llvm::Value * {
                  if (r >= kRows)
                    return llvm::PoisonValue::get(vec);
                  return b_.CreateAlignedLoad(vec, b_.CreateInBoundsGEP(f32, A, b_.CreateAdd(rowAt[r], k)), align);
                });
                llvm::Value *to = depthAt(k);
                for (unsigned j = 0; j < vw; ++j)
                  b_.CreateMaskedStore(lanes[j], b_.CreateInBoundsGEP(f32, aPanels, b_.CreateAdd(to, b_.getInt64(j * kRows))), align, rowLanes);
              });
            }
            forLoop("ak", vectorEnd, kEnd, 1, [&](llvm::Value *k) {
              llvm::Value *to = depthAt(k);
              for (unsigned r = 0; r < kRows; ++r)
                b_.CreateStore(b_.CreateLoad(f32, b_.CreateInBoundsGEP(f32, A, b_.CreateAdd(rowAt[r], k))),
                               b_.CreateInBoundsGEP(f32, aPanels, b_.CreateAdd(to, b_.getInt64(r))));
            });
          });
        });
      }
      forLoop("j0", b_.getInt64(0), n, 2 * vw, [&](llvm::Value *j0) {
        fullOrTail(j0, 2, [&](bool masked) {
          if (g.bPanels) { // prepacked when the model loaded: B's row k of the panel at k * its width
            llvm::Value *col = b_.CreateAdd(bBase, j0), *full = b_.getInt64(kir::kPanelColumns);
            llvm::Value *panel = b_.CreateSDiv(col, full);
            llvm::Value *start = b_.CreateAdd(b_.CreateMul(panel, b_.CreateMul(depth, full)), b_.CreateSRem(col, full));
            llvm::Value *width = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, full, b_.CreateSub(panelColumns, b_.CreateMul(panel, full)));
            llvm::Value *panelRows = b_.CreateInBoundsGEP(f32, B, start);
            panelTiles(j0, masked, packedA, [&](llvm::Value *i0, unsigned R, unsigned V, llvm::Value *p) {
              microKernel(i0, R, V, j0, k0, kEnd, first, panelRows, width, masked, p);
            });
            return;
          }
          if (g.im2col) {
            packWindows(*g.im2col, B, bBase, imHeight, imWidth, imOutWidth, b_.CreateAdd(imColumn0, j0), masked ? masksOf(j0, 2) : std::vector<llvm::Value *>{},
                        k0, kEnd, panel);
            llvm::Value *panelRows = b_.CreateGEP(f32, panel, b_.CreateMul(k0, b_.getInt64(-2 * int64_t(vw))));
            cheapestRowTiles(packedA, [&](llvm::Value *i0, unsigned R, llvm::Value *p) {
              microKernel(i0, R, 2, j0, k0, kEnd, first, panelRows, b_.getInt64(2 * vw), masked, p);
            });
            return;
          }
          std::vector<llvm::Value *> masks = masked ? masksOf(j0, 2) : std::vector<llvm::Value *>(2, nullptr);
          // Packs B[k0:kEnd, j0:j0 + 2 vectors] contiguously, zero-padding the column tail.
          // B read transposed with its depths contiguous (ldb 1: x @ transpose(w), the
          // backward pass's dy @ transpose(w)): vw depths at a time, each column's run of
          // them a vector load, transposed in registers into vw panel rows. (Element by
          // element, the packing took as long as the FMAs: 96-141 GF/s on a training step's
          // dy @ transpose(w).) The depths past a multiple of vw go one at a time below.
          llvm::Value *oneByOne = k0;
          if (bColStride && g.ldb->asConst() == 1) {
            oneByOne = b_.CreateSub(kEnd, b_.CreateSRem(b_.CreateSub(kEnd, k0), b_.getInt64(vw)));
            forLoop("kt", k0, oneByOne, vw, [&](llvm::Value *k) {
              for (unsigned h = 0; h < 2; ++h) {
                std::vector<llvm::Value *> runs = transposed(b_, vw, [&](unsigned l) { // runs[d]: depth k + d of the vw columns
                  llvm::Value *col = b_.CreateAdd(j0, b_.getInt64(h * vw + l)), *inside = b_.CreateICmpSLT(col, n);
                  llvm::Value *at = b_.CreateSelect(inside, b_.CreateAdd(bBase, b_.CreateAdd(b_.CreateMul(col, bColStride), k)), bBase);
                  return loadLanes(b_.CreateInBoundsGEP(f32, B, at), splat(inside));
                });
                llvm::Value *packedRow = b_.CreateMul(b_.CreateSub(k, k0), b_.getInt64(2 * vw));
                for (unsigned d = 0; d < vw; ++d)
                  b_.CreateAlignedStore(runs[d], b_.CreateInBoundsGEP(f32, panel, b_.CreateAdd(packedRow, b_.getInt64(d * 2 * vw + h * vw))),
                                        vectorAlign());
              }
            });
          }
          forLoop("kp", oneByOne, kEnd, 1, [&](llvm::Value *k) {
            llvm::Value *packedRow = b_.CreateMul(b_.CreateSub(k, k0), b_.getInt64(2 * vw));
            if (!bColStride) {
              llvm::Value *bRow = b_.CreateAdd(bBase, b_.CreateAdd(b_.CreateMul(k, ldb), j0));
              for (unsigned h = 0; h < 2; ++h)
                b_.CreateAlignedStore(loadLanes(b_.CreateInBoundsGEP(f32, B, b_.CreateAdd(bRow, b_.getInt64(h * vw))), masks[h]),
                                      b_.CreateInBoundsGEP(f32, panel, b_.CreateAdd(packedRow, b_.getInt64(h * vw))), vectorAlign());
              return;
            }
            // B read transposed: gather each column's element; columns past n pack zeros.
            llvm::Value *kOffset = b_.CreateAdd(bBase, b_.CreateMul(k, ldb));
            for (unsigned l = 0; l < 2 * vw; ++l) {
              llvm::Value *col = b_.CreateAdd(j0, b_.getInt64(l));
              llvm::Value *inside = b_.CreateICmpSLT(col, n);
              llvm::Value *at = b_.CreateSelect(inside, b_.CreateAdd(kOffset, b_.CreateMul(col, bColStride)), bBase);
              llvm::Value *v = b_.CreateSelect(inside, b_.CreateLoad(f32, b_.CreateInBoundsGEP(f32, B, at)), llvm::ConstantFP::get(f32, 0.0));
              b_.CreateStore(v, b_.CreateInBoundsGEP(f32, panel, b_.CreateAdd(packedRow, b_.getInt64(l))));
            }
          });
          // The panel's row k lies at (k - k0) * 2 vectors.
          llvm::Value *panelRows = b_.CreateGEP(f32, panel, b_.CreateMul(k0, b_.getInt64(-2 * int64_t(vw))));
          panelTiles(j0, masked, packedA, [&](llvm::Value *i0, unsigned R, unsigned V, llvm::Value *p) {
            microKernel(i0, R, V, j0, k0, kEnd, first, panelRows, b_.getInt64(2 * vw), masked, p);
          });
        });
      });
    });
  };
  // A task of at most kGemmMaxRows rows whose variant packs A packs it; one path, whose
  // micro-kernel calls choose (two copies of the path were half of a GEMM kernel's code).
  llvm::Value *packedA = nullptr;
  if (g.packA)
    packedA = b_.CreateAnd(b_.CreateICmpNE(index(g.packA), b_.getInt64(0)),
                           b_.CreateICmpSLE(b_.CreateSub(rowEnd, row0), b_.getInt64(rt::kGemmMaxRows)));
  packedPath(packedA);
  b_.CreateBr(doneBB);
  b_.SetInsertPoint(doneBB);
  if (g.epilogue)
    stmt(*g.epilogue);
  b_.CreateBr(epilogueDoneBB);
  b_.SetInsertPoint(epilogueDoneBB);
}

// Tiles of up to 4 rows by 4 columns: 16 vectors of partial sums along K (a vector of A's
// row and of B's column per step, 8 loads per 16 FMAs), then each one's lanes summed
// (sumEach) and stored. A's rows are read in place, B's columns from its transposed
// layout. The order of the additions differs from the panels' serial sum over k (the
// lanes' partial sums, then a tree): docs/semantics.md.
void CpuKernelEmitter::dotProducts(const kir::Gemm &g, const GemmTask &t) {
  const unsigned vw = vectorWidth_, kTileRows = 4, kTileColumns = 4;
  llvm::Type *f32 = b_.getFloatTy();
  auto *vec = llvm::FixedVectorType::get(f32, vw);
  llvm::Value *A = bufs_[g.a], *B = bufs_[g.b], *C = bufs_[g.c];
  std::vector<llvm::AllocaInst *> acc;
  for (unsigned k = 0; k < kTileRows * kTileColumns; ++k)
    acc.push_back(entryAlloca(vec, "dot"));
  llvm::Value *whole = b_.CreateSub(t.depth, b_.CreateSRem(t.depth, b_.getInt64(vw)));
  llvm::Value *tailLanes = b_.CreateICmpSLT(laneNumbers(), splat(b_.CreateSub(t.depth, whole)));
  auto align = llvm::Align(4);
  auto tile = [&](llvm::Value *i0, unsigned R, llvm::Value *j0, unsigned J) {
    std::vector<llvm::Value *> aRow, bColumn;
    for (unsigned r = 0; r < R; ++r)
      aRow.push_back(b_.CreateInBoundsGEP(f32, A, b_.CreateAdd(t.aBase, b_.CreateMul(b_.CreateAdd(i0, b_.getInt64(r)), t.lda))));
    for (unsigned j = 0; j < J; ++j)
      bColumn.push_back(b_.CreateInBoundsGEP(f32, B, b_.CreateAdd(t.bBase, b_.CreateMul(b_.CreateAdd(j0, b_.getInt64(j)), t.bColStride))));
    for (unsigned k = 0; k < R * J; ++k)
      b_.CreateStore(llvm::Constant::getNullValue(vec), acc[k]);
    auto step = [&](llvm::Value *k, llvm::Value *mask) {
      auto load = [&](llvm::Value *base) { return loadLanes(b_.CreateInBoundsGEP(f32, base, k), mask); };
      std::vector<llvm::Value *> a;
      for (unsigned r = 0; r < R; ++r)
        a.push_back(load(aRow[r]));
      for (unsigned j = 0; j < J; ++j) {
        llvm::Value *bv = load(bColumn[j]);
        for (unsigned r = 0; r < R; ++r)
          b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {vec}, {a[r], bv, b_.CreateLoad(vec, acc[r * J + j])}), acc[r * J + j]);
      }
    };
    forLoop("dk", b_.getInt64(0), whole, vw, [&](llvm::Value *k) { step(k, nullptr); });
    onlyIf(b_.CreateICmpSLT(whole, t.depth), [&] { step(whole, tailLanes); });
    // Groups of vw sums, padded with -0 (x + -0 is x for every x, so the pads' adds fold
    // away): sum a = r * J + j in lane a % vw of group a / vw.
    std::vector<llvm::Value *> sums;
    llvm::Value *pad = llvm::ConstantFP::get(vec, -0.0);
    for (unsigned a0 = 0; a0 < R * J; a0 += vw) {
      std::vector<llvm::Value *> group;
      for (unsigned a = a0; a < a0 + vw; ++a)
        group.push_back(a < R * J ? static_cast<llvm::Value *>(b_.CreateLoad(vec, acc[a])) : pad);
      sums.push_back(sumEach(b_, std::move(group)));
    }
    for (unsigned r = 0; r < R; ++r) { // row r's J sums lie side by side (J divides vw)
      llvm::Value *cRow = b_.CreateAdd(t.cBase, b_.CreateAdd(b_.CreateMul(b_.CreateAdd(i0, b_.getInt64(r)), t.ldc), j0));
      llvm::Value *at = b_.CreateInBoundsGEP(f32, C, cRow), *group = sums[r * J / vw];
      unsigned first = r * J % vw;
      if (J == 1) {
        b_.CreateStore(b_.CreateExtractElement(group, b_.getInt64(first)), at);
        continue;
      }
      std::vector<int> lanes;
      for (unsigned j = 0; j < J; ++j)
        lanes.push_back(static_cast<int>(first + j));
      b_.CreateAlignedStore(b_.CreateShuffleVector(group, lanes), at, align);
    }
  };
  // Rows in tiles of 4, then at most one of 2 and one of 1; so too the columns of each.
  // (Tiles of 4 by 1 for the last columns left each accumulator's FMAs waiting on the one
  // before: four chains of a 4-cycle latency, half the FMA ports' rate.)
  tiles("di", t.row0, t.rowEnd, kTileRows, [&](llvm::Value *i0, unsigned R) {
    tiles("dj", b_.getInt64(0), t.n, kTileColumns, [&](llvm::Value *j0, unsigned J) { tile(i0, R, j0, J); });
  });
}

llvm::Value *CpuKernelEmitter::epilogueLanes(const kir::Gemm &g, const LaneEpilogue &e, const kir::Value &v, const SumLanes &at) {
  switch (v.kind) {
  case kir::Value::Kind::Const: return splat(value(v));
  case kir::Value::Kind::Unary: return floatUnary(*ir::asUnaryOp(v.op), epilogueLanes(g, e, *v.args[0], at));
  case kir::Value::Kind::Binary:
    return floatBinary(*ir::asBinaryOp(v.op), epilogueLanes(g, e, *v.args[0], at), epilogueLanes(g, e, *v.args[1], at));
  case kir::Value::Kind::Load: break;
  default: throw InternalError("a conv epilogue's value the band path does not apply");
  }
  LaneEpilogue::Read read = e.loads.at(&v);
  if (read == LaneEpilogue::Read::Sums)
    return at.sums;
  const std::string &row = g.epilogue->var, &bandRow = g.epilogue->body[0]->var, &column = g.epilogue->body[0]->body[0]->var;
  vars_[row] = at.row;
  llvm::Value *lanes;
  if (read == LaneEpilogue::Read::Uniform) {
    lanes = splat(loadValue(v));
  } else {
    // Lanes of each output row from the element of its first lane (which, for the second
    // row, lies at a column before 0, maybe outside the buffer: only masked lanes are read).
    auto *vec = llvm::FixedVectorType::get(b_.getFloatTy(), vectorWidth_);
    llvm::Value *zeros = llvm::Constant::getNullValue(vec), *parts[2];
    for (int r = 0; r < 2; ++r) {
      vars_[bandRow] = at.rows[r], vars_[column] = at.columns[r];
      llvm::Value *first = b_.CreateGEP(b_.getFloatTy(), bufs_[v.buffer], index(v.index));
      parts[r] = read == LaneEpilogue::Read::Contiguous ? b_.CreateMaskedLoad(vec, first, llvm::Align(4), at.masks[r], zeros)
                                                        : b_.CreateMaskedGather(vec, splat(first), llvm::Align(4), at.masks[r], zeros);
    }
    vars_.erase(bandRow), vars_.erase(column);
    lanes = b_.CreateSelect(at.masks[0], parts[0], parts[1]);
  }
  vars_.erase(row);
  return lanes;
}

// The windows of an implicit-GEMM convolution, gathered into the GEMM's panel. Per panel
// (not per row k) each lane's output position p becomes (oh, ow): p / outWidth in f64
// (exact to within one for any p below 2^52), then corrected by one step each way, so no
// lane needs an integer division. Row k = (ci, ki, kj) then reads x at (oh*s + ki*d - pad,
// ow*s + kj*d - pad) of channel ci, 0 where that lies outside the image: a masked gather;
// or, at stride 1 or 2 for a vector whose positions lie in one output row (so their input
// columns are every s-th of one input row), masked loads of s vectors of that row, every
// s-th lane kept. (A gather costs a load per lane; these, s loads per vector. Which one
// is a branch per vector that every row k of the panel takes the same way.)
void CpuKernelEmitter::packWindows(const kir::Gemm::Im2col &x, llvm::Value *X, llvm::Value *base, llvm::Value *height,
                                   llvm::Value *width, llvm::Value *outWidth, llvm::Value *p0,
                                   const std::vector<llvm::Value *> &columnMasks, llvm::Value *k0, llvm::Value *kEnd,
                                   llvm::Value *panel) {
  const unsigned vw = vectorWidth_;
  llvm::Type *f32 = b_.getFloatTy(), *i64 = b_.getInt64Ty();
  auto *vec = llvm::FixedVectorType::get(f32, vw);
  auto *ivec = llvm::FixedVectorType::get(i64, vw);
  auto *dvec = llvm::FixedVectorType::get(b_.getDoubleTy(), vw);
  auto splatInt = [&](int64_t v) { return splat(b_.getInt64(v)); };
  llvm::Value *iota = laneNumbers();
  llvm::Value *outWidths = splat(outWidth);
  llvm::Value *inverse = splat(b_.CreateFDiv(llvm::ConstantFP::get(b_.getDoubleTy(), 1.0), b_.CreateSIToFP(outWidth, b_.getDoubleTy())));
  // Per vector h: the input row and column of tap (0, 0) in each lane, and the lanes to load.
  std::vector<llvm::Value *> rowOf(2), colOf(2), lanesIn(2), oneRow(2); // oneRow: the vector's positions in one output row
  for (unsigned h = 0; h < 2; ++h) {
    llvm::Value *p = b_.CreateAdd(splat(b_.CreateAdd(p0, b_.getInt64(h * vw))), iota);
    llvm::Value *oh = b_.CreateFPToSI(b_.CreateFMul(b_.CreateSIToFP(p, dvec), inverse), ivec);
    llvm::Value *ow = b_.CreateSub(p, b_.CreateMul(oh, outWidths));
    llvm::Value *under = b_.CreateICmpSLT(ow, splatInt(0));
    oh = b_.CreateSelect(under, b_.CreateSub(oh, splatInt(1)), oh), ow = b_.CreateSelect(under, b_.CreateAdd(ow, outWidths), ow);
    llvm::Value *over = b_.CreateICmpSGE(ow, outWidths);
    oh = b_.CreateSelect(over, b_.CreateAdd(oh, splatInt(1)), oh), ow = b_.CreateSelect(over, b_.CreateSub(ow, outWidths), ow);
    rowOf[h] = b_.CreateSub(b_.CreateMul(oh, splatInt(x.stride)), splatInt(x.padding));
    colOf[h] = b_.CreateSub(b_.CreateMul(ow, splatInt(x.stride)), splatInt(x.padding));
    lanesIn[h] = columnMasks.empty() ? llvm::Constant::getAllOnesValue(llvm::FixedVectorType::get(b_.getInt1Ty(), vw)) : columnMasks[h];
    llvm::Value *firstCol = b_.CreateExtractElement(ow, uint64_t(0));
    oneRow[h] = b_.CreateICmpSLE(b_.CreateAdd(firstCol, b_.getInt64(vw)), outWidth);
  }
  llvm::Value *heights = splat(height), *widths = splat(width), *plane = b_.CreateMul(height, width);
  auto zero = llvm::Constant::getNullValue(vec);
  forLoop("kp", k0, kEnd, 1, [&](llvm::Value *k) {
    llvm::Value *ci = b_.CreateSDiv(k, b_.getInt64(x.kh * x.kw)), *tap = b_.CreateSRem(k, b_.getInt64(x.kh * x.kw));
    llvm::Value *ki = b_.CreateSDiv(tap, b_.getInt64(x.kw)), *kj = b_.CreateSRem(tap, b_.getInt64(x.kw));
    llvm::Value *channel = b_.CreateAdd(base, b_.CreateMul(ci, plane));
    llvm::Value *rowShift = splat(b_.CreateMul(ki, b_.getInt64(x.dilation))), *colShift = splat(b_.CreateMul(kj, b_.getInt64(x.dilation)));
    llvm::Value *packedRow = b_.CreateMul(b_.CreateSub(k, k0), b_.getInt64(2 * vw));
    for (unsigned h = 0; h < 2; ++h) {
      llvm::Value *ih = b_.CreateAdd(rowOf[h], rowShift), *iw = b_.CreateAdd(colOf[h], colShift);
      // Unsigned compares: a negative row or column is outside too.
      llvm::Value *inside = b_.CreateAnd(lanesIn[h], b_.CreateAnd(b_.CreateICmpULT(ih, heights), b_.CreateICmpULT(iw, widths)));
      auto gather = [&] {
        llvm::Value *at = b_.CreateAdd(splat(channel), b_.CreateAdd(b_.CreateMul(ih, widths), iw));
        return b_.CreateMaskedGather(vec, b_.CreateGEP(f32, X, at), llvm::Align(4), inside, zero);
      };
      // Input columns iw0, iw0 + s, ... of row ih0: s masked loads from iw0, every s-th lane kept.
      auto rowLoads = [&]() -> llvm::Value * {
        llvm::Value *row = b_.CreateExtractElement(ih, uint64_t(0)), *col = b_.CreateExtractElement(iw, uint64_t(0));
        llvm::Value *first = b_.CreateGEP(f32, X, b_.CreateAdd(channel, b_.CreateAdd(b_.CreateMul(row, width), col)));
        if (x.stride == 1)
          return b_.CreateMaskedLoad(vec, first, llvm::Align(4), inside, zero);
        llvm::Value *rowIn = splat(b_.CreateICmpULT(row, height)), *halves[2];
        for (unsigned q = 0; q < 2; ++q) {
          llvm::Value *cols = b_.CreateAdd(splat(b_.CreateAdd(col, b_.getInt64(q * vw))), iota);
          halves[q] = b_.CreateMaskedLoad(vec, b_.CreateGEP(f32, first, b_.getInt64(q * vw)), llvm::Align(4),
                                          b_.CreateAnd(rowIn, b_.CreateICmpULT(cols, widths)), zero);
        }
        std::vector<int> even;
        for (unsigned l = 0; l < vw; ++l)
          even.push_back(int(2 * l));
        return b_.CreateShuffleVector(halves[0], halves[1], even);
      };
      llvm::Value *v;
      if (x.stride > 2) {
        v = gather();
      } else {
        auto *loadBB = llvm::BasicBlock::Create(ctx_, "windows.row", fn_), *gatherBB = llvm::BasicBlock::Create(ctx_, "windows.gather", fn_),
             *doneBB = llvm::BasicBlock::Create(ctx_, "windows.done", fn_);
        b_.CreateCondBr(oneRow[h], loadBB, gatherBB);
        b_.SetInsertPoint(loadBB);
        llvm::Value *loaded = rowLoads();
        llvm::BasicBlock *loadEnd = b_.GetInsertBlock();
        b_.CreateBr(doneBB);
        b_.SetInsertPoint(gatherBB);
        llvm::Value *gathered = gather();
        llvm::BasicBlock *gatherEnd = b_.GetInsertBlock();
        b_.CreateBr(doneBB);
        b_.SetInsertPoint(doneBB);
        llvm::PHINode *phi = b_.CreatePHI(vec, 2);
        phi->addIncoming(loaded, loadEnd);
        phi->addIncoming(gathered, gatherEnd);
        v = phi;
      }
      b_.CreateAlignedStore(v, b_.CreateInBoundsGEP(f32, panel, b_.CreateAdd(packedRow, b_.getInt64(h * vw))), vectorAlign());
    }
  });
}

// Fills `band` for the output rows from `outRow` (see gemmStmt's band path): phase (pr, pc)
// of channel ci, row r < `rows`, column c < `width` at ((phase * channels + ci) * bandRows
// + r) * width + c is the image's (ih, iw) = ((outRow + r) * s + pr - padding, c * s + pc
// - padding), 0 outside it. Stride 1 loads a row's vectors, stride 2 two vectors whose
// even lanes are kept, larger strides gather.
void CpuKernelEmitter::copyBand(const kir::Gemm::Im2col &x, llvm::Value *X, llvm::Value *base, llvm::Value *height,
                                llvm::Value *imageWidth, llvm::Value *outRow, llvm::Value *rows, llvm::Value *channels,
                                llvm::Value *bandRows, llvm::Value *width, llvm::Value *band) {
  const unsigned vw = vectorWidth_;
  const int64_t st = x.stride;
  llvm::Type *f32 = b_.getFloatTy();
  auto *vec = llvm::FixedVectorType::get(f32, vw);
  auto i = [&](int64_t v) { return b_.getInt64(v); };
  llvm::Value *iota = laneNumbers();
  auto lanesFrom = [&](llvm::Value *first, int64_t step) { // first + step * lane
    return b_.CreateAdd(splat(first), b_.CreateMul(iota, splat(i(step))));
  };
  auto align = llvm::Align(4);
  llvm::Value *plane = b_.CreateMul(height, imageWidth), *zero = llvm::Constant::getNullValue(vec);
  // Per phase and vector of band columns, the lanes inside the image's columns and the
  // band's are the same for every channel and row: computed once there, not per row (in
  // 64-bit lanes, 6 instructions a mask, they were most of the copy's work).
  forLoop("bp", i(0), i(st * st), 1, [&](llvm::Value *phase) {
    llvm::Value *pr = b_.CreateSDiv(phase, i(st)), *pc = b_.CreateSRem(phase, i(st));
    forLoop("bw", i(0), width, vw, [&](llvm::Value *c) {
      llvm::Value *iw0 = b_.CreateSub(b_.CreateAdd(b_.CreateMul(c, i(st)), pc), i(x.padding));
      // Where each read starts (the st loads' first columns; a larger stride's gathered
      // columns), and its lanes inside the image.
      std::vector<llvm::Value *> starts, insides;
      auto read = [&](llvm::Value *start, llvm::Value *columns) {
        starts.push_back(start);
        insides.push_back(b_.CreateICmpULT(columns, splat(imageWidth)));
      };
      for (int64_t h = 0; st <= 2 && h < st; ++h) {
        llvm::Value *first = b_.CreateAdd(iw0, i(h * vw));
        read(first, lanesFrom(first, 1));
      }
      if (st > 2) {
        llvm::Value *columns = lanesFrom(iw0, st);
        read(columns, columns);
      }
      llvm::Value *stored = b_.CreateICmpSLT(lanesFrom(c, 1), splat(width));
      forLoop("bc", i(0), channels, 1, [&](llvm::Value *ci) {
        forLoop("br", i(0), rows, 1, [&](llvm::Value *r) {
          llvm::Value *ih = b_.CreateSub(b_.CreateAdd(b_.CreateMul(b_.CreateAdd(outRow, r), i(st)), pr), i(x.padding));
          llvm::Value *rowIn = splat(b_.CreateICmpULT(ih, height));
          // Masked-off lanes are not read, so these addresses may lie outside the image.
          llvm::Value *src = b_.CreateGEP(f32, X, b_.CreateAdd(base, b_.CreateAdd(b_.CreateMul(ci, plane), b_.CreateMul(ih, imageWidth))));
          llvm::Value *block = b_.CreateAdd(b_.CreateMul(phase, channels), ci);
          llvm::Value *dst = b_.CreateInBoundsGEP(f32, band, b_.CreateMul(b_.CreateAdd(b_.CreateMul(block, bandRows), r), width));
          llvm::Value *v;
          if (st <= 2) { // st loads of vw columns from iw0, every st-th lane kept
            llvm::Value *parts[2];
            for (int64_t h = 0; h < st; ++h)
              parts[h] = b_.CreateMaskedLoad(vec, b_.CreateGEP(f32, src, starts[h]), align, b_.CreateAnd(rowIn, insides[h]), zero);
            std::vector<int> every;
            for (unsigned l = 0; l < vw; ++l)
              every.push_back(int(st * l));
            v = st == 1 ? parts[0] : b_.CreateShuffleVector(parts[0], parts[1], every);
          } else {
            v = b_.CreateMaskedGather(vec, b_.CreateGEP(f32, src, starts[0]), align, b_.CreateAnd(rowIn, insides[0]), zero);
          }
          b_.CreateMaskedStore(v, b_.CreateInBoundsGEP(f32, dst, c), align, stored);
        });
      });
    });
  });
}

// The attention schedule: the task's rows go in blocks of a.rowBlock, the last first (the
// scan of the values a causal block hides then reads each key once per task); each block
// goes through each tile of kKeyTile keys together, the rows as vector lanes. Scores come
// transposed, sT[key][row], from a micro-kernel over the head dim (q's block held
// transposed in qT, kDepthChunk of d at a time: one vector load of q and one broadcast of
// k per key and depth step, kScoreKeys keys' FMA chains at once; no horizontal sums); the
// scale, mask, causal predicate (in a tile past the block's first row's diagonal only),
// the tile's max (two chains of plain vector maxes: a NaN score, which they skip, makes
// its row NaN through p anyway), the online softmax's rescale and p = exp(s - max) are
// then vector operations across the rows (VectorMath's vector exp). o += p v runs as a GEMM
// micro-kernel, kPvRows rows by kPvVectors vectors of dv in registers across the tile's
// keys, the output rows in the result buffer (rescaled as they load). Online softmax: a
// running max m and sum l per row; a tile with a larger max rescales l and the row by
// exp(m_old - m_new) once per tile. Causal: the tiles end at the block's last row; the
// keys past a row's diagonal in them score -inf (weight 0), and all the keys past it
// (the fill) count after the loop, only on a row where their weight is not 0. A row whose
// scores are all -inf keeps l = 0 and divides to NaN, as the unfused softmax does; with no
// keys at all the row is 0, as the unfused matmul over an empty dim gives.
void CpuKernelEmitter::attentionStmt(const kir::Attention &a) {
  const int64_t kKeyTile = 64, kDepthChunk = 128;
  const unsigned vw = vectorWidth_, rowVectors = static_cast<unsigned>((a.rowBlock + vw - 1) / vw), lanes = rowVectors * vw;
  const unsigned kScoreKeys = std::max(1u, 8 / rowVectors), kPvRows = 4, kPvVectors = std::max(1u, 64 / vw);
  llvm::Type *f32 = b_.getFloatTy();
  auto *vec = llvm::FixedVectorType::get(f32, vw);
  auto align = llvm::Align(4);
  llvm::Value *Q = bufs_[a.q], *K = bufs_[a.k], *V = bufs_[a.v], *O = bufs_[a.o], *M = a.mask >= 0 ? bufs_[a.mask] : nullptr;
  llvm::Value *qBase = index(a.qBase), *kBase = index(a.kBase), *vBase = index(a.vBase), *oBase = index(a.oBase);
  llvm::Value *d = index(a.d), *dv = index(a.dv), *keys = index(a.keys), *taskRow0 = index(a.row0);
  llvm::Value *taskRowEnd = b_.CreateAdd(taskRow0, index(a.rows));
  llvm::Value *zero = llvm::ConstantFP::get(f32, 0.0), *minusInf = llvm::ConstantFP::getInfinity(f32, true);
  llvm::Value *zeroVec = llvm::Constant::getNullValue(vec), *minusInfVec = b_.CreateVectorSplat(vw, minusInf);
  auto local = [&](int64_t floats, const char *name) {
    llvm::AllocaInst *a = entryAlloca(llvm::ArrayType::get(f32, floats), name);
    a->setAlignment(llvm::Align(64));
    return a;
  };
  llvm::AllocaInst *qT = local(kDepthChunk * lanes, "att.qt"), *sT = local(kKeyTile * lanes, "att.st");
  llvm::AllocaInst *corrs = local(lanes, "att.corr"), *maxes = local(lanes, "att.max"), *sums = local(lanes, "att.sum");
  std::vector<llvm::AllocaInst *> acc, runMax, runSum;
  for (unsigned u = 0; u < std::max(kScoreKeys * rowVectors, kPvRows * kPvVectors); ++u)
    acc.push_back(entryAlloca(vec, "acc"));
  for (unsigned v = 0; v < rowVectors; ++v)
    runMax.push_back(entryAlloca(vec, "run.max")), runSum.push_back(entryAlloca(vec, "run.sum"));
  llvm::Value *iota = laneNumbers();
  auto at = [&](llvm::Value *base, llvm::Value *i) { return b_.CreateInBoundsGEP(f32, base, i); };
  auto i = [&](int64_t v) { return b_.getInt64(v); };
  auto storeVec = [&](llvm::Value *v, llvm::Value *ptr, llvm::Value *mask) {
    if (mask)
      b_.CreateMaskedStore(v, ptr, align, mask);
    else
      b_.CreateAlignedStore(v, ptr, align);
  };
  // sT's vector v of key jj, and qT's of depth x.
  auto sAt = [&](llvm::Value *jj, unsigned v) { return at(sT, b_.CreateAdd(b_.CreateMul(jj, i(lanes)), i(v * vw))); };
  auto qAt = [&](llvm::Value *x, unsigned v) { return at(qT, b_.CreateAdd(b_.CreateMul(x, i(lanes)), i(v * vw))); };
  // body(y0, mask) over [0, dv) in whole vectors, then one masked vector for the tail.
  auto rowVectorsOf = [&](const std::string &name, const std::function<void(llvm::Value *, llvm::Value *)> &body) {
    llvm::Value *whole = b_.CreateSub(dv, b_.CreateURem(dv, i(vw)));
    forLoop(name, i(0), whole, vw, [&](llvm::Value *y0) { body(y0, nullptr); });
    onlyIf(b_.CreateICmpSLT(whole, dv), [&] {
      body(whole, b_.CreateICmpSLT(b_.CreateAdd(b_.CreateVectorSplat(vw, whole), iota), b_.CreateVectorSplat(vw, dv)));
    });
  };
  auto oRow = [&](llvm::Value *row) { return at(O, b_.CreateAdd(oBase, b_.CreateMul(row, dv))); };
  // q's depths go in chunks of kDepthChunk.
  llvm::Value *depthChunks = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, i(1), b_.CreateSDiv(b_.CreateAdd(d, i(kDepthChunk - 1)), i(kDepthChunk)));
  auto chunkDepth = [&](llvm::Value *x0) { return b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, i(kDepthChunk), b_.CreateSub(d, x0)); };
  // Causal: whether a value hidden from a block so far (rows [end, scanned) of v) is inf
  // or NaN, as one sum of x - x (NaN from inf or NaN, in any order).
  llvm::AllocaInst *bad = nullptr, *scanned = nullptr;
  if (a.causal) {
    bad = entryAlloca(f32, "att.bad"), scanned = entryAlloca(b_.getInt64Ty(), "att.scanned");
    b_.CreateStore(zero, bad);
    b_.CreateStore(keys, scanned);
  }
  llvm::Value *blocks = b_.CreateSDiv(b_.CreateAdd(b_.CreateSub(taskRowEnd, taskRow0), i(a.rowBlock - 1)), i(a.rowBlock));
  forLoop("att.b", i(0), blocks, 1, [&](llvm::Value *fromLast) {
    llvm::Value *row0 = b_.CreateAdd(taskRow0, b_.CreateMul(b_.CreateSub(b_.CreateSub(blocks, i(1)), fromLast), i(a.rowBlock)));
    llvm::Value *rowEnd = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, taskRowEnd, b_.CreateAdd(row0, i(a.rowBlock)));
    llvm::Value *rows = b_.CreateSub(rowEnd, row0);
    // The row (query index) of each lane of vector v of a key's scores.
    std::vector<llvm::Value *> laneRows;
    for (unsigned v = 0; v < rowVectors; ++v)
      laneRows.push_back(b_.CreateAdd(b_.CreateVectorSplat(vw, b_.CreateAdd(row0, i(v * vw))), iota));
    // q's rows [row0, rowEnd), depths [x0, x0 + kDepthChunk) of them, into qT[x][row]; the
    // lanes past the block's rows hold 0. vw rows by vw depths at a time, loaded (none past
    // the chunk's depths or the block's rows) and transposed in registers; qT's rows past
    // the chunk's depths are not read. (Scattered row by row, the copy took 4% of the
    // kernel at T = 512.)
    auto packQ = [&](llvm::Value *x0) {
      llvm::Value *xn = chunkDepth(x0);
      forLoop("att.qx", i(0), xn, vw, [&](llvm::Value *x) {
        llvm::Value *depths = b_.CreateICmpSLT(b_.CreateAdd(b_.CreateVectorSplat(vw, x), iota), b_.CreateVectorSplat(vw, xn));
        for (unsigned v = 0; v < rowVectors; ++v) {
          std::vector<llvm::Value *> rowsOf = transposed(b_, vw, [&](unsigned r) {
            llvm::Value *row = b_.CreateAdd(row0, i(v * vw + r)), *inside = b_.CreateICmpSLT(row, rowEnd);
            llvm::Value *from = b_.CreateAdd(b_.CreateMul(b_.CreateSelect(inside, row, row0), d), b_.CreateAdd(x0, x));
            return loadLanes(at(Q, b_.CreateAdd(qBase, from)), b_.CreateAnd(depths, b_.CreateVectorSplat(vw, inside)));
          });
          for (unsigned j = 0; j < vw; ++j)
            b_.CreateAlignedStore(rowsOf[j], qAt(b_.CreateAdd(x, i(j)), v), align);
        }
      });
    };
    llvm::Value *oneChunk = b_.CreateICmpSLE(d, i(kDepthChunk));
    onlyIf(oneChunk, [&] { packQ(i(0)); });
    forLoop("att.zero", row0, rowEnd, 1, [&](llvm::Value *row) {
      rowVectorsOf("att.zy", [&](llvm::Value *y0, llvm::Value *mask) { storeVec(zeroVec, at(oRow(row), y0), mask); });
    });
    for (unsigned v = 0; v < rowVectors; ++v)
      b_.CreateStore(minusInfVec, runMax[v]), b_.CreateStore(zeroVec, runSum[v]);
    llvm::Value *end = a.causal ? b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, keys, rowEnd) : keys;
    forLoop("att.j0", i(0), end, kKeyTile, [&](llvm::Value *j0) {
      llvm::Value *n = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, i(kKeyTile), b_.CreateSub(end, j0));
      // sT[jj][row] = q[row] . k[j0 + jj] over the chunks of d.
      forLoop("att.c", i(0), depthChunks, 1, [&](llvm::Value *c) {
        llvm::Value *x0 = b_.CreateMul(c, i(kDepthChunk)), *xn = chunkDepth(x0), *firstChunk = b_.CreateICmpEQ(c, i(0));
        onlyIf(b_.CreateNot(oneChunk), [&] { packQ(x0); });
        auto scoreKeys = [&](llvm::Value *jj0, unsigned G) {
          std::vector<llvm::Value *> kRows;
          for (unsigned g = 0; g < G; ++g) {
            llvm::Value *jj = b_.CreateAdd(jj0, i(g));
            kRows.push_back(at(K, b_.CreateAdd(kBase, b_.CreateAdd(b_.CreateMul(b_.CreateAdd(j0, jj), d), x0))));
            for (unsigned v = 0; v < rowVectors; ++v)
              b_.CreateStore(b_.CreateSelect(firstChunk, zeroVec, b_.CreateAlignedLoad(vec, sAt(jj, v), vectorAlign())), acc[g * rowVectors + v]);
          }
          forLoop("att.x", i(0), xn, 1, [&](llvm::Value *x) {
            std::vector<llvm::Value *> qv;
            for (unsigned v = 0; v < rowVectors; ++v)
              qv.push_back(b_.CreateAlignedLoad(vec, qAt(x, v), vectorAlign()));
            for (unsigned g = 0; g < G; ++g) {
              llvm::Value *kb = b_.CreateVectorSplat(vw, b_.CreateLoad(f32, at(kRows[g], x)));
              for (unsigned v = 0; v < rowVectors; ++v) {
                llvm::AllocaInst *slot = acc[g * rowVectors + v];
                b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {vec}, {kb, qv[v], b_.CreateLoad(vec, slot)}), slot);
              }
            }
          });
          for (unsigned g = 0; g < G; ++g)
            for (unsigned v = 0; v < rowVectors; ++v)
              b_.CreateAlignedStore(b_.CreateLoad(vec, acc[g * rowVectors + v]), sAt(b_.CreateAdd(jj0, i(g)), v), vectorAlign());
        };
        tiles("att.s", i(0), n, kScoreKeys, [&](llvm::Value *jj0, unsigned G) { scoreKeys(jj0, G); });
      });
      // Scale, mask and the causal predicate, and the tile's max per row in two chains
      // (acc[v] and acc[rowVectors + v], the keys alternating): s > m ? s : m is one max.
      std::vector<llvm::Value *> rowInside;
      for (unsigned v = 0; v < rowVectors; ++v) {
        b_.CreateStore(minusInfVec, acc[v]), b_.CreateStore(minusInfVec, acc[rowVectors + v]);
        rowInside.push_back(b_.CreateICmpSLT(laneRows[v], b_.CreateVectorSplat(vw, rowEnd)));
      }
      auto scoreAndMax = [&](llvm::Value *jj, unsigned chain, bool diagonal) {
        llvm::Value *j = b_.CreateAdd(j0, jj);
        for (unsigned v = 0; v < rowVectors; ++v) {
          llvm::Value *ptr = sAt(jj, v);
          llvm::Value *s = b_.CreateFMul(b_.CreateAlignedLoad(vec, ptr, vectorAlign()), b_.CreateVectorSplat(vw, llvm::ConstantFP::get(f32, a.scale)));
          if (M) {
            llvm::Value *maskAt = b_.CreateAdd(b_.CreateVectorSplat(vw, b_.CreateAdd(index(a.maskBase), b_.CreateMul(j, index(a.maskCol)))),
                                               b_.CreateMul(laneRows[v], b_.CreateVectorSplat(vw, index(a.maskRow))));
            s = b_.CreateFAdd(s, b_.CreateMaskedGather(vec, b_.CreateInBoundsGEP(f32, M, maskAt), align, rowInside[v], zeroVec));
          }
          if (diagonal) // as the unfused where: a key past the row's diagonal scores the fill
            s = b_.CreateSelect(b_.CreateICmpSGT(b_.CreateVectorSplat(vw, j), laneRows[v]), b_.CreateVectorSplat(vw, llvm::ConstantFP::get(f32, a.fill)), s);
          b_.CreateAlignedStore(s, ptr, vectorAlign());
          llvm::AllocaInst *m = acc[chain * rowVectors + v];
          llvm::Value *max = b_.CreateLoad(vec, m);
          b_.CreateStore(b_.CreateSelect(b_.CreateFCmpOGT(s, max), s, max), m);
        }
      };
      auto scores = [&](bool diagonal) {
        llvm::Value *pairs = b_.CreateAnd(n, i(~int64_t(1)));
        forLoop("att.m", i(0), pairs, 2, [&](llvm::Value *jj) {
          scoreAndMax(jj, 0, diagonal);
          scoreAndMax(b_.CreateAdd(jj, i(1)), 1, diagonal);
        });
        onlyIf(b_.CreateICmpSLT(pairs, n), [&] { scoreAndMax(pairs, 0, diagonal); });
      };
      if (a.causal) // whether the tile has a key past the block's first row's diagonal
        eitherWay(b_.CreateICmpSGT(b_.CreateAdd(j0, b_.CreateSub(n, i(1))), row0), scores);
      else
        scores(false);
      for (unsigned v = 0; v < rowVectors; ++v) {
        llvm::Value *m0 = b_.CreateLoad(vec, acc[v]), *m1 = b_.CreateLoad(vec, acc[rowVectors + v]);
        b_.CreateStore(b_.CreateSelect(b_.CreateFCmpOGT(m1, m0), m1, m0), acc[v]);
      }
      // Rescale what the earlier tiles summed to the new max; an all -inf max shifts by 0
      // (exp(-inf - -inf) would be NaN where the unfused softmax has no such term yet).
      std::vector<llvm::Value *> shift;
      for (unsigned v = 0; v < rowVectors; ++v) {
        llvm::Value *oldMax = b_.CreateLoad(vec, runMax[v]);
        llvm::Value *newMax = b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, oldMax, b_.CreateLoad(vec, acc[v]));
        shift.push_back(b_.CreateSelect(b_.CreateFCmpOEQ(newMax, minusInfVec), zeroVec, newMax));
        llvm::Value *corr = math(MathFn::Exp, {b_.CreateFSub(oldMax, shift[v])});
        b_.CreateStore(b_.CreateFMul(b_.CreateLoad(vec, runSum[v]), corr), runSum[v]);
        b_.CreateStore(newMax, runMax[v]);
        b_.CreateAlignedStore(corr, at(corrs, i(v * vw)), vectorAlign());
      }
      // p = exp(s - max) in place of the scores, summed per row.
      forLoop("att.p", i(0), n, 1, [&](llvm::Value *jj) {
        for (unsigned v = 0; v < rowVectors; ++v) {
          llvm::Value *ptr = sAt(jj, v);
          llvm::Value *p = math(MathFn::Exp, {b_.CreateFSub(b_.CreateAlignedLoad(vec, ptr, vectorAlign()), shift[v])});
          b_.CreateAlignedStore(p, ptr, vectorAlign());
          b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(vec, runSum[v]), p), runSum[v]);
        }
      });
      // o = o corr + p v: R rows by kPvVectors vectors of dv in registers across the keys.
      llvm::Value *vTile = at(V, b_.CreateAdd(vBase, b_.CreateMul(j0, dv)));
      auto pvTile = [&](llvm::Value *r0, unsigned R) {
        forLoop("att.y0", i(0), dv, kPvVectors * vw, [&](llvm::Value *y0) {
          auto block = [&](bool masked) {
            std::vector<llvm::Value *> masks(kPvVectors, nullptr), ptrs, pLanes;
            for (unsigned u = 0; u < kPvVectors; ++u)
              if (masked)
                masks[u] = b_.CreateICmpSLT(b_.CreateAdd(b_.CreateVectorSplat(vw, b_.CreateAdd(y0, i(u * vw))), iota), b_.CreateVectorSplat(vw, dv));
            for (unsigned r = 0; r < R; ++r) {
              llvm::Value *lane = b_.CreateSub(b_.CreateAdd(r0, i(r)), row0);
              pLanes.push_back(lane);
              llvm::Value *corr = b_.CreateVectorSplat(vw, b_.CreateLoad(f32, at(corrs, lane)));
              for (unsigned u = 0; u < kPvVectors; ++u) {
                ptrs.push_back(at(oRow(b_.CreateAdd(r0, i(r))), b_.CreateAdd(y0, i(u * vw))));
                b_.CreateStore(b_.CreateFMul(loadLanes(ptrs.back(), masks[u]), corr), acc[r * kPvVectors + u]);
              }
            }
            forLoop("att.pj", i(0), n, 1, [&](llvm::Value *jj) {
              llvm::Value *vRow = at(vTile, b_.CreateAdd(b_.CreateMul(jj, dv), y0));
              std::vector<llvm::Value *> vv;
              for (unsigned u = 0; u < kPvVectors; ++u)
                vv.push_back(loadLanes(at(vRow, i(u * vw)), masks[u]));
              llvm::Value *pRow = b_.CreateMul(jj, i(lanes));
              for (unsigned r = 0; r < R; ++r) {
                llvm::Value *p = b_.CreateVectorSplat(vw, b_.CreateLoad(f32, at(sT, b_.CreateAdd(pRow, pLanes[r]))));
                for (unsigned u = 0; u < kPvVectors; ++u) {
                  llvm::AllocaInst *slot = acc[r * kPvVectors + u];
                  b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {vec}, {p, vv[u], b_.CreateLoad(vec, slot)}), slot);
                }
              }
            });
            for (unsigned r = 0; r < R; ++r)
              for (unsigned u = 0; u < kPvVectors; ++u)
                storeVec(b_.CreateLoad(vec, acc[r * kPvVectors + u]), ptrs[r * kPvVectors + u], masks[u]);
          };
          auto *fullBB = llvm::BasicBlock::Create(ctx_, "pv.full", fn_), *tailBB = llvm::BasicBlock::Create(ctx_, "pv.tail", fn_),
               *joinBB = llvm::BasicBlock::Create(ctx_, "pv.done", fn_);
          b_.CreateCondBr(b_.CreateICmpSLE(b_.CreateAdd(y0, i(kPvVectors * vw)), dv), fullBB, tailBB);
          for (bool masked : {false, true}) {
            b_.SetInsertPoint(masked ? tailBB : fullBB);
            block(masked);
            b_.CreateBr(joinBB);
          }
          b_.SetInsertPoint(joinBB);
        });
      };
      llvm::Value *fullRows = b_.CreateSub(rowEnd, b_.CreateSRem(rows, i(kPvRows)));
      forLoop("att.r4", row0, fullRows, kPvRows, [&](llvm::Value *r0) { pvTile(r0, kPvRows); });
      forLoop("att.r1", fullRows, rowEnd, 1, [&](llvm::Value *r0) { pvTile(r0, 1); });
    });
    for (unsigned v = 0; v < rowVectors; ++v) {
      b_.CreateAlignedStore(b_.CreateLoad(vec, runMax[v]), at(maxes, i(v * vw)), vectorAlign());
      b_.CreateAlignedStore(b_.CreateLoad(vec, runSum[v]), at(sums, i(v * vw)), vectorAlign());
    }
    // Causal: the keys past the block's last row, hidden from every row of it, score the
    // fill. Skipped above: their weight w = exp(fill - m) is 0 unless a row's scores all lie
    // within ~104 of the fill (or below it, or are NaN), where the unfused softmax over all
    // keys gives them weight too; and with w = 0 they still matter where a value is inf or
    // NaN (0 inf and 0 NaN are NaN in the unfused p v). So a row takes them (the max becomes
    // max(m, fill), l and the output row take w per key) where w is not 0 or where any of
    // their values is not finite, found once per block: a branch taken on such rows only.
    llvm::Value *hiddenNotFinite = nullptr;
    if (a.causal) { // their values lie contiguous: the rows that the blocks after this one did not scan
      llvm::Value *until = b_.CreateAdd(vBase, b_.CreateMul(b_.CreateLoad(b_.getInt64Ty(), scanned), dv));
      markVectorize(forLoop("att.hf", b_.CreateAdd(vBase, b_.CreateMul(end, dv)), until, 1, [&](llvm::Value *t) {
        llvm::IRBuilderBase::FastMathFlagGuard guard(b_);
        llvm::FastMathFlags fm;
        fm.setAllowReassoc();
        b_.setFastMathFlags(fm);
        llvm::Value *x = b_.CreateLoad(f32, at(V, t));
        b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(f32, bad), b_.CreateFSub(x, x)), bad);
      }));
      b_.CreateStore(end, scanned);
      llvm::Value *total = b_.CreateLoad(f32, bad);
      hiddenNotFinite = b_.CreateFCmpUNO(total, total);
    }
    forLoop("att.fin", row0, rowEnd, 1, [&](llvm::Value *row) {
      llvm::Value *lane = b_.CreateSub(row, row0), *sumAt = at(sums, lane);
      if (a.causal) {
        llvm::Value *fill = llvm::ConstantFP::get(f32, a.fill), *m = b_.CreateLoad(f32, at(maxes, lane));
        llvm::Value *newMax = b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, m, fill);
        llvm::Value *shift = b_.CreateSelect(b_.CreateFCmpOEQ(newMax, minusInf), zero, newMax);
        llvm::Value *w = math(MathFn::Exp, {b_.CreateFSub(fill, shift)});
        llvm::Value *hidden = b_.CreateSub(keys, end);
        llvm::Value *takes = b_.CreateOr(b_.CreateFCmpUNE(w, zero), hiddenNotFinite);
        onlyIf(b_.CreateAnd(b_.CreateICmpSGT(hidden, i(0)), takes), [&] {
          llvm::Value *corr = math(MathFn::Exp, {b_.CreateFSub(m, shift)});
          b_.CreateStore(b_.CreateFAdd(b_.CreateFMul(b_.CreateLoad(f32, sumAt), corr), b_.CreateFMul(b_.CreateSIToFP(hidden, f32), w)), sumAt);
          llvm::Value *wv = b_.CreateVectorSplat(vw, w);
          rowVectorsOf("att.hidden", [&](llvm::Value *y0, llvm::Value *mask) {
            llvm::Value *ptr = at(oRow(row), y0);
            b_.CreateStore(b_.CreateFMul(loadLanes(ptr, mask), b_.CreateVectorSplat(vw, corr)), acc[0]);
            forLoop("att.hj", end, keys, 1, [&](llvm::Value *j) {
              llvm::Value *vRow = at(V, b_.CreateAdd(vBase, b_.CreateAdd(b_.CreateMul(j, dv), y0)));
              b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {vec}, {wv, loadLanes(vRow, mask), b_.CreateLoad(vec, acc[0])}), acc[0]);
            });
            storeVec(b_.CreateLoad(vec, acc[0]), ptr, mask);
          });
        });
      }
      onlyIf(b_.CreateICmpSGT(keys, i(0)), [&] {
        llvm::Value *l = b_.CreateVectorSplat(vw, b_.CreateLoad(f32, sumAt));
        rowVectorsOf("att.norm", [&](llvm::Value *y0, llvm::Value *mask) {
          llvm::Value *ptr = at(oRow(row), y0);
          storeVec(b_.CreateFDiv(loadLanes(ptr, mask), l), ptr, mask);
        });
      });
    });
  });
}

} // namespace

void emitCpuKernel(llvm::Module &m, const kir::Kernel &k, unsigned vectorWidth) { CpuKernelEmitter(m, k, vectorWidth).emit(); }

} // namespace dnnc::backend
