// The CPU's kernel emitter: the runtime's KernelFn signature, the parallel loop over the
// chunk each call is handed, GEMMs as vector FMA micro-kernels sized to the host, and
// attention as a tiled online softmax.
#include "backend/llvm/KernelEmitter.h"

#include <algorithm>
#include <functional>

namespace dnnc::backend {
namespace {

class CpuKernelEmitter : public KernelEmitter {
public:
  CpuKernelEmitter(llvm::Module &m, const kir::Kernel &k, unsigned vectorWidth) : KernelEmitter(m, k), vectorWidth_(vectorWidth) {}

protected:
  void createFunction() override { createHostFunction(); }
  void emitBody() override {
    // Without this, targets that prefer 256-bit vectors split the GEMM's 512-bit ones.
    fn_->addFnAttr("min-legal-vector-width", std::to_string(vectorWidth_ * 32));
    stmt(*k_.body);
  }
  // The parallel nest runs the chunk [begin, end) of its collapsed range that the runtime
  // hands this call; a single parallel loop as itself, which keeps its vectorizer hint.
  void forStmt(const kir::Stmt &s) override {
    if (&s != k_.parallelLoop())
      return KernelEmitter::forStmt(s);
    std::vector<const kir::Stmt *> nest = k_.parallelNest();
    if (nest.size() == 1)
      return loopOver(s, fn_->getArg(2), fn_->getArg(3), b_.getInt64(1));
    collapsedChunk(nest);
  }
  void gemmStmt(const kir::Gemm &g) override;
  void attentionStmt(const kir::Attention &a) override;

private:
  void collapsedChunk(const std::vector<const kir::Stmt *> &nest);

  unsigned vectorWidth_; // f32 lanes of the widest vector the host has
};

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

// The GEMM schedule. Micro-kernels hold R rows x V vectors of C in registers and, for
// each k, broadcast one A element per row and multiply it into V vectors of B's row k with
// FMAs. Rows go in tiles of the path's height, then one tile of each smaller power of two
// the remainder needs, so no row is computed twice. Two paths, chosen per call:
// - packed (more than kStreamRows rows): blocks of kDepthBlock along k, panels of two
//   vectors of columns packed first (zero-padded), so that every tile of kRows rows
//   streams the panel from L1 with no cache-set conflicts;
// - streamed (at most kStreamRows rows: a batch of 1, a matrix-vector product): packing
//   would cost as much as the product, so the micro-kernels read B where it lies, as wide
//   as the registers allow (V = kAccumulators / R vectors, up to a whole 256-column task
//   for one row): B's rows are read once each, in contiguous runs, at memory bandwidth.
//   (Reading B in place with 8 or more rows, two vectors wide, ran slower than packing:
//   each pass over a panel strides B's rows through the same cache sets.)
// B read transposed is always packed (packing gathers its columns). Column tails use
// masked loads and stores.
void CpuKernelEmitter::gemmStmt(const kir::Gemm &g) {
  const int64_t kDepthBlock = 256;
  const unsigned kStreamRows = 4;
  const unsigned vw = vectorWidth_, kRows = vw >= 16 ? 8 : 6, kAccumulators = 2 * kRows, kMaxVectors = 16;
  llvm::Type *f32 = b_.getFloatTy();
  auto *vec = llvm::FixedVectorType::get(f32, vw);
  llvm::Value *aBase = index(g.aBase), *bBase = index(g.bBase), *cBase = index(g.cBase);
  llvm::Value *lda = index(g.lda), *ldb = index(g.ldb), *ldc = index(g.ldc), *n = index(g.n), *depth = index(g.depth);
  llvm::Value *bColStride = g.bColStride ? index(g.bColStride) : nullptr;
  llvm::Value *row0 = index(g.row0), *rowEnd = b_.CreateAdd(row0, index(g.rows));
  llvm::Value *A = bufs_[g.a], *B = bufs_[g.b], *C = bufs_[g.c];
  llvm::AllocaInst *panel = entryAlloca(llvm::ArrayType::get(f32, kDepthBlock * 2 * vw), "panel");
  panel->setAlignment(llvm::Align(64));
  std::vector<llvm::AllocaInst *> acc;
  for (unsigned k = 0; k < std::max(kAccumulators, kMaxVectors); ++k)
    acc.push_back(entryAlloca(vec, "acc"));
  std::vector<llvm::Constant *> lanes;
  for (unsigned l = 0; l < vw; ++l)
    lanes.push_back(b_.getInt64(l));
  llvm::Value *iota = llvm::ConstantVector::get(lanes);
  auto align = llvm::Align(4);
  // Lane masks of the V vectors of columns from j0: the columns below n.
  auto masksOf = [&](llvm::Value *j0, unsigned V) {
    std::vector<llvm::Value *> masks;
    for (unsigned v = 0; v < V; ++v)
      masks.push_back(b_.CreateICmpSLT(b_.CreateAdd(b_.CreateVectorSplat(vw, b_.CreateAdd(j0, b_.getInt64(v * vw))), iota),
                                       b_.CreateVectorSplat(vw, n)));
    return masks;
  };
  // Emits body(masked) twice: unmasked when the V vectors from j0 lie below n, masked else.
  auto fullOrTail = [&](llvm::Value *j0, unsigned V, const std::function<void(bool)> &body) {
    auto *fullBB = llvm::BasicBlock::Create(ctx_, "cols.full", fn_), *tailBB = llvm::BasicBlock::Create(ctx_, "cols.tail", fn_),
         *joinBB = llvm::BasicBlock::Create(ctx_, "cols.done", fn_);
    b_.CreateCondBr(b_.CreateICmpSLE(b_.CreateAdd(j0, b_.getInt64(V * vw)), n), fullBB, tailBB);
    for (bool masked : {false, true}) {
      b_.SetInsertPoint(masked ? tailBB : fullBB);
      body(masked);
      b_.CreateBr(joinBB);
    }
    b_.SetInsertPoint(joinBB);
  };
  auto loadVec = [&](llvm::Value *ptr, llvm::Value *mask) -> llvm::Value * {
    if (mask)
      return b_.CreateMaskedLoad(vec, ptr, align, mask, llvm::Constant::getNullValue(vec));
    return b_.CreateAlignedLoad(vec, ptr, align);
  };
  // C[i0:i0+R, j0:j0+V vectors] (+)= A[i0:i0+R, k0:kEnd] x B[k0:kEnd, ...], B's row k at
  // bRows + k * bStride; `first` says whether to store rather than add to C.
  auto microKernel = [&](llvm::Value *i0, unsigned R, unsigned V, llvm::Value *j0, llvm::Value *k0, llvm::Value *kEnd,
                         llvm::Value *first, llvm::Value *bRows, llvm::Value *bStride, bool masked) {
    std::vector<llvm::Value *> masks = masked ? masksOf(j0, V) : std::vector<llvm::Value *>(V, nullptr);
    std::vector<llvm::Value *> aRows;
    for (unsigned r = 0; r < R; ++r)
      aRows.push_back(b_.CreateAdd(aBase, b_.CreateMul(b_.CreateAdd(i0, b_.getInt64(r)), lda)));
    for (unsigned k = 0; k < R * V; ++k)
      b_.CreateStore(llvm::Constant::getNullValue(vec), acc[k]);
    forLoop("k", k0, kEnd, 1, [&](llvm::Value *k) {
      llvm::Value *bRow = b_.CreateGEP(f32, bRows, b_.CreateMul(k, bStride));
      std::vector<llvm::Value *> bv;
      for (unsigned v = 0; v < V; ++v)
        bv.push_back(loadVec(b_.CreateGEP(f32, bRow, b_.getInt64(v * vw)), masks[v]));
      for (unsigned r = 0; r < R; ++r) {
        llvm::Value *av = b_.CreateVectorSplat(vw, b_.CreateLoad(f32, b_.CreateInBoundsGEP(f32, A, b_.CreateAdd(aRows[r], k))));
        for (unsigned v = 0; v < V; ++v) {
          llvm::AllocaInst *slot = acc[r * V + v];
          b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {vec}, {av, bv[v], b_.CreateLoad(vec, slot)}), slot);
        }
      }
    });
    for (unsigned r = 0; r < R; ++r) {
      llvm::Value *cRow = b_.CreateAdd(cBase, b_.CreateAdd(b_.CreateMul(b_.CreateAdd(i0, b_.getInt64(r)), ldc), j0));
      for (unsigned v = 0; v < V; ++v) {
        llvm::Value *ptr = b_.CreateInBoundsGEP(f32, C, b_.CreateAdd(cRow, b_.getInt64(v * vw)));
        llvm::Value *sum = b_.CreateLoad(vec, acc[r * V + v]);
        sum = b_.CreateSelect(first, sum, b_.CreateFAdd(sum, loadVec(ptr, masks[v])));
        if (masked)
          b_.CreateMaskedStore(sum, ptr, align, masks[v]);
        else
          b_.CreateAlignedStore(sum, ptr, align);
      }
    }
  };
  // tile(i0, R) over rows [row0, rowEnd): full tiles of `top` rows, then one tile of each
  // smaller power of two the remainder needs.
  auto rowTiles = [&](unsigned top, const std::function<void(llvm::Value *, unsigned)> &tile) {
    llvm::Value *i = b_.CreateSub(rowEnd, b_.CreateSRem(b_.CreateSub(rowEnd, row0), b_.getInt64(top)));
    forLoop("i0", row0, i, top, [&](llvm::Value *i0) { tile(i0, top); });
    for (unsigned R = 8; R >= 1; R /= 2) {
      if (R >= top)
        continue;
      llvm::BasicBlock *pre = b_.GetInsertBlock();
      llvm::Value *advanced = b_.CreateAdd(i, b_.getInt64(R));
      llvm::BasicBlock *after = nullptr;
      onlyIf(b_.CreateICmpSLE(advanced, rowEnd), [&] {
        tile(i, R);
        after = b_.GetInsertBlock();
      });
      llvm::PHINode *phi = b_.CreatePHI(b_.getInt64Ty(), 2);
      phi->addIncoming(i, pre);
      phi->addIncoming(advanced, after);
      i = phi;
    }
  };
  llvm::Value *stream = bColStride || g.bPanels ? b_.getFalse() : b_.CreateICmpSLE(index(g.rows), b_.getInt64(int64_t(kStreamRows)));
  auto *streamBB = llvm::BasicBlock::Create(ctx_, "gemm.stream", fn_), *packBB = llvm::BasicBlock::Create(ctx_, "gemm.packed", fn_),
       *doneBB = llvm::BasicBlock::Create(ctx_, "gemm.done", fn_);
  b_.CreateCondBr(stream, streamBB, packBB);

  b_.SetInsertPoint(streamBB);
  if (!bColStride)
    rowTiles(kStreamRows, [&](llvm::Value *i0, unsigned R) {
      unsigned V = std::min(kMaxVectors, std::max(1u, kAccumulators / R));
      forLoop("j0", b_.getInt64(0), n, V * vw, [&](llvm::Value *j0) {
        fullOrTail(j0, V, [&](bool masked) {
          microKernel(i0, R, V, j0, b_.getInt64(0), depth, b_.getTrue(), b_.CreateInBoundsGEP(f32, B, b_.CreateAdd(bBase, j0)), ldb, masked);
        });
      });
    });
  b_.CreateBr(doneBB);

  b_.SetInsertPoint(packBB);
  // At least one depth block, so that an empty sum still stores its zeros.
  llvm::Value *depthBlocksEnd = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, depth, b_.getInt64(1));
  forLoop("k0", b_.getInt64(0), depthBlocksEnd, kDepthBlock, [&](llvm::Value *k0) {
    llvm::Value *kEnd = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, depth, b_.CreateAdd(k0, b_.getInt64(kDepthBlock)));
    llvm::Value *first = b_.CreateICmpEQ(k0, b_.getInt64(0));
    forLoop("j0", b_.getInt64(0), n, 2 * vw, [&](llvm::Value *j0) {
      fullOrTail(j0, 2, [&](bool masked) {
        if (g.bPanels) { // prepacked when the model loaded: B's row k of the panel at k * kPanelColumns
          llvm::Value *col = b_.CreateAdd(bBase, j0), *width = b_.getInt64(kir::kPanelColumns);
          llvm::Value *start = b_.CreateAdd(b_.CreateMul(b_.CreateSDiv(col, width), b_.CreateMul(depth, width)), b_.CreateSRem(col, width));
          llvm::Value *panelRows = b_.CreateInBoundsGEP(f32, B, start);
          rowTiles(kRows, [&](llvm::Value *i0, unsigned R) { microKernel(i0, R, 2, j0, k0, kEnd, first, panelRows, width, masked); });
          return;
        }
        std::vector<llvm::Value *> masks = masked ? masksOf(j0, 2) : std::vector<llvm::Value *>(2, nullptr);
        // Packs B[k0:kEnd, j0:j0 + 2 vectors] contiguously, zero-padding the column tail.
        forLoop("kp", k0, kEnd, 1, [&](llvm::Value *k) {
          llvm::Value *packedRow = b_.CreateMul(b_.CreateSub(k, k0), b_.getInt64(2 * vw));
          if (!bColStride) {
            llvm::Value *bRow = b_.CreateAdd(bBase, b_.CreateAdd(b_.CreateMul(k, ldb), j0));
            for (unsigned h = 0; h < 2; ++h)
              b_.CreateAlignedStore(loadVec(b_.CreateInBoundsGEP(f32, B, b_.CreateAdd(bRow, b_.getInt64(h * vw))), masks[h]),
                                    b_.CreateInBoundsGEP(f32, panel, b_.CreateAdd(packedRow, b_.getInt64(h * vw))), llvm::Align(64));
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
        rowTiles(kRows, [&](llvm::Value *i0, unsigned R) {
          microKernel(i0, R, 2, j0, k0, kEnd, first, panelRows, b_.getInt64(2 * vw), masked);
        });
      });
    });
  });
  b_.CreateBr(doneBB);
  b_.SetInsertPoint(doneBB);
  if (g.epilogue)
    stmt(*g.epilogue);
}


// The attention schedule, one query row at a time: the keys in tiles of kKeyTile, whose
// scores (vector dot products over d) live in a stack array, never in memory the model
// plans. Online softmax: a running max m and sum l; a tile with a larger max rescales l
// and the output row (the accumulator, in cache) by exp(m_old - m_new) once per tile, not
// per key. Causal: the key loop ends at the query's own index, so tiles past the diagonal
// are never visited and the diagonal tile is cut short; the keys past it (the fill) count
// after the loop, only on a row where their weight is not 0. The output row accumulates p v
// one vector of dv at a time, held in a register across the tile's keys. A row whose
// scores are all -inf keeps l = 0 and divides to NaN, as the unfused softmax does; with no
// keys at all the row is 0, as the unfused matmul over an empty dim gives.
void CpuKernelEmitter::attentionStmt(const kir::Attention &a) {
  const int64_t kKeyTile = 64, kKeyGroup = 4;
  const unsigned vw = vectorWidth_, kPvVectors = std::max(1u, 64 / vw);
  llvm::Type *f32 = b_.getFloatTy();
  auto *vec = llvm::FixedVectorType::get(f32, vw);
  auto align = llvm::Align(4);
  llvm::Value *Q = bufs_[a.q], *K = bufs_[a.k], *V = bufs_[a.v], *O = bufs_[a.o], *M = a.mask >= 0 ? bufs_[a.mask] : nullptr;
  llvm::Value *qBase = index(a.qBase), *kBase = index(a.kBase), *vBase = index(a.vBase), *oBase = index(a.oBase);
  llvm::Value *d = index(a.d), *dv = index(a.dv), *keys = index(a.keys), *row0 = index(a.row0);
  llvm::Value *rowEnd = b_.CreateAdd(row0, index(a.rows));
  llvm::Value *maskBase = M ? index(a.maskBase) : nullptr, *maskRow = M ? index(a.maskRow) : nullptr,
              *maskCol = M ? index(a.maskCol) : nullptr;
  llvm::Value *scale = llvm::ConstantFP::get(f32, a.scale), *zero = llvm::ConstantFP::get(f32, 0.0);
  llvm::Value *minusInf = llvm::ConstantFP::getInfinity(f32, true), *zeroVec = llvm::Constant::getNullValue(vec);
  llvm::AllocaInst *scores = entryAlloca(llvm::ArrayType::get(f32, kKeyTile), "scores");
  scores->setAlignment(llvm::Align(64));
  llvm::AllocaInst *runMax = entryAlloca(f32, "run.max"), *runSum = entryAlloca(f32, "run.sum"), *tileMax = entryAlloca(f32, "tile.max");
  std::vector<llvm::AllocaInst *> acc;
  for (unsigned u = 0; u < std::max<unsigned>(kKeyGroup, kPvVectors); ++u)
    acc.push_back(entryAlloca(vec, "acc"));
  std::vector<llvm::Constant *> lanes;
  for (unsigned l = 0; l < vw; ++l)
    lanes.push_back(b_.getInt64(l));
  llvm::Value *iota = llvm::ConstantVector::get(lanes);
  auto loadVec = [&](llvm::Value *ptr, llvm::Value *mask) -> llvm::Value * {
    if (mask)
      return b_.CreateMaskedLoad(vec, ptr, align, mask, zeroVec);
    return b_.CreateAlignedLoad(vec, ptr, align);
  };
  auto storeVec = [&](llvm::Value *v, llvm::Value *ptr, llvm::Value *mask) {
    if (mask)
      b_.CreateMaskedStore(v, ptr, align, mask);
    else
      b_.CreateAlignedStore(v, ptr, align);
  };
  // body(x0, mask) over [0, n) in whole vectors, then one masked vector for the tail.
  auto vectors = [&](const std::string &name, llvm::Value *n, const std::function<void(llvm::Value *, llvm::Value *)> &body) {
    llvm::Value *whole = b_.CreateSub(n, b_.CreateURem(n, b_.getInt64(vw)));
    forLoop(name, b_.getInt64(0), whole, vw, [&](llvm::Value *x0) { body(x0, nullptr); });
    onlyIf(b_.CreateICmpSLT(whole, n), [&] {
      body(whole, b_.CreateICmpSLT(b_.CreateAdd(b_.CreateVectorSplat(vw, whole), iota), b_.CreateVectorSplat(vw, n)));
    });
  };
  auto at = [&](llvm::Value *base, llvm::Value *i) { return b_.CreateInBoundsGEP(f32, base, i); };
  forLoop("att.i", row0, rowEnd, 1, [&](llvm::Value *i) {
    llvm::Value *qRow = at(Q, b_.CreateAdd(qBase, b_.CreateMul(i, d))), *oRow = at(O, b_.CreateAdd(oBase, b_.CreateMul(i, dv)));
    vectors("att.zero", dv, [&](llvm::Value *y0, llvm::Value *mask) { storeVec(zeroVec, at(oRow, y0), mask); });
    b_.CreateStore(minusInf, runMax);
    b_.CreateStore(zero, runSum);
    llvm::Value *end = a.causal ? b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, keys, b_.CreateAdd(i, b_.getInt64(1))) : keys;
    forLoop("att.j0", b_.getInt64(0), end, kKeyTile, [&](llvm::Value *j0) {
      llvm::Value *n = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b_.getInt64(kKeyTile), b_.CreateSub(end, j0));
      // Scores kKeyGroup keys at a time: as many independent FMA chains over d, sharing
      // the loads of q's row; the group's remainder one key at a time.
      auto scoreKeys = [&](llvm::Value *jj0, unsigned G) {
        std::vector<llvm::Value *> kRows;
        for (unsigned g = 0; g < G; ++g) {
          kRows.push_back(at(K, b_.CreateAdd(kBase, b_.CreateMul(b_.CreateAdd(j0, b_.CreateAdd(jj0, b_.getInt64(g))), d))));
          b_.CreateStore(zeroVec, acc[g]);
        }
        vectors("att.dot", d, [&](llvm::Value *x0, llvm::Value *mask) {
          llvm::Value *qv = loadVec(at(qRow, x0), mask);
          for (unsigned g = 0; g < G; ++g)
            b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {vec}, {qv, loadVec(at(kRows[g], x0), mask), b_.CreateLoad(vec, acc[g])}), acc[g]);
        });
        for (unsigned g = 0; g < G; ++g) {
          llvm::Value *jj = b_.CreateAdd(jj0, b_.getInt64(g)), *j = b_.CreateAdd(j0, jj);
          llvm::Value *dot;
          {
            llvm::IRBuilderBase::FastMathFlagGuard guard(b_);
            llvm::FastMathFlags fm;
            fm.setAllowReassoc();
            b_.setFastMathFlags(fm);
            dot = b_.CreateFAddReduce(zero, b_.CreateLoad(vec, acc[g]));
          }
          llvm::Value *s = b_.CreateFMul(dot, scale);
          if (M)
            s = b_.CreateFAdd(s, b_.CreateLoad(f32, at(M, b_.CreateAdd(maskBase, b_.CreateAdd(b_.CreateMul(i, maskRow), b_.CreateMul(j, maskCol))))));
          b_.CreateStore(s, at(scores, jj));
        }
      };
      llvm::Value *grouped = b_.CreateSub(n, b_.CreateSRem(n, b_.getInt64(kKeyGroup)));
      forLoop("att.s", b_.getInt64(0), grouped, kKeyGroup, [&](llvm::Value *jj0) { scoreKeys(jj0, kKeyGroup); });
      forLoop("att.s1", grouped, n, 1, [&](llvm::Value *jj) { scoreKeys(jj, 1); });
      // The tile's max, a vector at a time (NaN propagates, as the unfused softmax's max;
      // the lanes past n read -inf).
      b_.CreateStore(llvm::ConstantVector::getSplat(llvm::ElementCount::getFixed(vw), llvm::cast<llvm::Constant>(minusInf)), acc[0]);
      vectors("att.max", n, [&](llvm::Value *x0, llvm::Value *mask) {
        llvm::Value *ptr = at(scores, x0), *infs = b_.CreateVectorSplat(vw, minusInf);
        llvm::Value *x = mask ? static_cast<llvm::Value *>(b_.CreateMaskedLoad(vec, ptr, align, mask, infs)) : b_.CreateAlignedLoad(vec, ptr, align);
        b_.CreateStore(b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, b_.CreateLoad(vec, acc[0]), x), acc[0]);
      });
      b_.CreateStore(b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, b_.CreateLoad(f32, runMax),
                                              b_.CreateUnaryIntrinsic(llvm::Intrinsic::vector_reduce_fmaximum, b_.CreateLoad(vec, acc[0]))),
                     tileMax);
      // Rescale what the earlier tiles summed to the new max; an all -inf max shifts by 0
      // (exp(-inf - -inf) would be NaN where the unfused softmax has no such term yet).
      llvm::Value *newMax = b_.CreateLoad(f32, tileMax);
      llvm::Value *shift = b_.CreateSelect(b_.CreateFCmpOEQ(newMax, minusInf), zero, newMax);
      llvm::Value *corr = math(MathFn::Exp, {b_.CreateFSub(b_.CreateLoad(f32, runMax), shift)});
      b_.CreateStore(b_.CreateFMul(b_.CreateLoad(f32, runSum), corr), runSum);
      b_.CreateStore(newMax, runMax);
      vectors("att.rescale", dv, [&](llvm::Value *y0, llvm::Value *mask) {
        llvm::Value *ptr = at(oRow, y0);
        storeVec(b_.CreateFMul(loadVec(ptr, mask), b_.CreateVectorSplat(vw, corr)), ptr, mask);
      });
      // p = exp(s - max) in place of the scores, summed (the vectorizer widens the exp).
      markVectorize(forLoop("att.p", b_.getInt64(0), n, 1, [&](llvm::Value *jj) {
        llvm::Value *p = math(MathFn::Exp, {b_.CreateFSub(b_.CreateLoad(f32, at(scores, jj)), shift)});
        b_.CreateStore(p, at(scores, jj));
        b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(f32, runSum), p), runSum);
      }));
      // o += p v over the tile's keys, a vector of the row at a time.
      llvm::Value *vTile = at(V, b_.CreateAdd(vBase, b_.CreateMul(j0, dv)));
      forLoop("att.pv", b_.getInt64(0), dv, kPvVectors * vw, [&](llvm::Value *y0) {
        // kPvVectors vectors of the row stay in registers across the tile's keys, as many
        // independent FMA chains; the block at the row's end is masked.
        auto block = [&](bool masked) {
          std::vector<llvm::Value *> masks(kPvVectors, nullptr), ptrs;
          for (unsigned u = 0; u < kPvVectors; ++u) {
            llvm::Value *y = b_.CreateAdd(y0, b_.getInt64(u * vw));
            if (masked)
              masks[u] = b_.CreateICmpSLT(b_.CreateAdd(b_.CreateVectorSplat(vw, y), iota), b_.CreateVectorSplat(vw, dv));
            ptrs.push_back(at(oRow, y));
            b_.CreateStore(loadVec(ptrs[u], masks[u]), acc[u]);
          }
          forLoop("att.pj", b_.getInt64(0), n, 1, [&](llvm::Value *jj) {
            llvm::Value *p = b_.CreateVectorSplat(vw, b_.CreateLoad(f32, at(scores, jj)));
            llvm::Value *vRow = at(vTile, b_.CreateAdd(b_.CreateMul(jj, dv), y0));
            for (unsigned u = 0; u < kPvVectors; ++u)
              b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {vec}, {p, loadVec(at(vRow, b_.getInt64(u * vw)), masks[u]), b_.CreateLoad(vec, acc[u])}), acc[u]);
          });
          for (unsigned u = 0; u < kPvVectors; ++u)
            storeVec(b_.CreateLoad(vec, acc[u]), ptrs[u], masks[u]);
        };
        auto *fullBB = llvm::BasicBlock::Create(ctx_, "pv.full", fn_), *tailBB = llvm::BasicBlock::Create(ctx_, "pv.tail", fn_),
             *joinBB = llvm::BasicBlock::Create(ctx_, "pv.done", fn_);
        b_.CreateCondBr(b_.CreateICmpSLE(b_.CreateAdd(y0, b_.getInt64(kPvVectors * vw)), dv), fullBB, tailBB);
        for (bool masked : {false, true}) {
          b_.SetInsertPoint(masked ? tailBB : fullBB);
          block(masked);
          b_.CreateBr(joinBB);
        }
        b_.SetInsertPoint(joinBB);
      });
    });
    if (a.causal) {
      // The keys past the diagonal score the fill. Skipped above: their weight
      // w = exp(fill - m) is 0 unless every visible score lies within ~104 of the fill (or
      // below it, or is NaN), where the unfused softmax over all keys gives them weight
      // too. Then the max becomes max(m, fill) and l and the output row take w per hidden
      // key: a branch taken only on such rows.
      llvm::Value *fill = llvm::ConstantFP::get(f32, a.fill), *m = b_.CreateLoad(f32, runMax);
      llvm::Value *newMax = b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, m, fill);
      llvm::Value *shift = b_.CreateSelect(b_.CreateFCmpOEQ(newMax, minusInf), zero, newMax);
      llvm::Value *w = math(MathFn::Exp, {b_.CreateFSub(fill, shift)}), *hidden = b_.CreateSub(keys, end);
      onlyIf(b_.CreateAnd(b_.CreateICmpSGT(hidden, b_.getInt64(0)), b_.CreateFCmpUNE(w, zero)), [&] {
        llvm::Value *corr = math(MathFn::Exp, {b_.CreateFSub(m, shift)});
        b_.CreateStore(b_.CreateFAdd(b_.CreateFMul(b_.CreateLoad(f32, runSum), corr), b_.CreateFMul(b_.CreateSIToFP(hidden, f32), w)), runSum);
        llvm::Value *wv = b_.CreateVectorSplat(vw, w);
        vectors("att.hidden", dv, [&](llvm::Value *y0, llvm::Value *mask) {
          llvm::Value *ptr = at(oRow, y0);
          b_.CreateStore(b_.CreateFMul(loadVec(ptr, mask), b_.CreateVectorSplat(vw, corr)), acc[0]);
          forLoop("att.hj", end, keys, 1, [&](llvm::Value *j) {
            llvm::Value *vRow = at(V, b_.CreateAdd(vBase, b_.CreateAdd(b_.CreateMul(j, dv), y0)));
            b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {vec}, {wv, loadVec(vRow, mask), b_.CreateLoad(vec, acc[0])}), acc[0]);
          });
          storeVec(b_.CreateLoad(vec, acc[0]), ptr, mask);
        });
      });
    }
    onlyIf(b_.CreateICmpSGT(keys, b_.getInt64(0)), [&] {
      llvm::Value *l = b_.CreateVectorSplat(vw, b_.CreateLoad(f32, runSum));
      vectors("att.norm", dv, [&](llvm::Value *y0, llvm::Value *mask) {
        llvm::Value *ptr = at(oRow, y0);
        storeVec(b_.CreateFDiv(loadVec(ptr, mask), l), ptr, mask);
      });
    });
  });
}

} // namespace

void emitCpuKernel(llvm::Module &m, const kir::Kernel &k, unsigned vectorWidth) { CpuKernelEmitter(m, k, vectorWidth).emit(); }

} // namespace dnnc::backend
