// The GPU's kernel emitter: a kernel's work spread over the grid as backend/gpu's mapping
// says (grid-stride threads, warps whose lanes split reductions and combine them with
// shuffles, blocks computing GEMMs or attention in shared-memory tiles), and its two targets, NVPTX and
// the simulator, which differ only in the hooks: calling convention, math library,
// special registers, barrier, shuffle and shared memory.
#include "backend/llvm/KernelEmitter.h"

#include "backend/gpu/GpuMapping.h"
#include "base/Error.h"
#include "runtime/KernelAbi.h"

#include <llvm/IR/IntrinsicsNVPTX.h>

#include <cmath>
#include <functional>

namespace dnnc::backend {
namespace {

class GpuKernelEmitter : public KernelEmitter {
public:
  using KernelEmitter::KernelEmitter;

protected:
  // ---- the GPU target's hooks ----
  // Special register `r` (thread and block ids and counts), as an i32.
  virtual llvm::Value *specialRegister(rt::SimRegister r) = 0;
  // __syncthreads.
  virtual void barrier() = 0;
  // __shfl_xor_sync over the full warp of one 32-bit word.
  virtual llvm::Value *shuffleXorWord(llvm::Value *word, unsigned laneMask) = 0;
  // Where a block's shared array lives: its address space and initializer.
  struct SharedPlacement {
    unsigned addressSpace;
    llvm::Constant *init;
  };
  virtual SharedPlacement sharedPlacement(llvm::ArrayType *type) = 0;

  void emitBody() override;
  void storeStmt(const kir::Stmt &s) override;
  void forStmt(const kir::Stmt &s) override;
  void gemmStmt(const kir::Gemm &g) override;
  void attentionStmt(const kir::Attention &a) override;

private:
  llvm::Value *sreg(rt::SimRegister r) { return b_.CreateZExt(specialRegister(r), b_.getInt64Ty()); }
  llvm::Value *shuffleXor(llvm::Value *v, unsigned laneMask);
  void combineAcrossLanes(const kir::Reduction &r);
  // v combined over the warp's 32 lanes by a butterfly of shuffles: every lane gets it.
  llvm::Value *allLanes(llvm::Value *v, ir::OpKind combine, bool fp);
  void collapsedParallelLoop(const kir::Stmt &s);
  llvm::Value *sharedArray(const std::string &name, int64_t elements);
  void tiledGemm(const kir::Gemm &g);
  void gemmLoops(const kir::Gemm &g);

  gpu::Mapping mapping_ = gpu::Mapping::Threads;
  llvm::Value *begin_ = nullptr, *step_ = nullptr; // this thread's (warp's, block's) share of the grid loops
  llvm::Value *lane_ = nullptr; // Warps: the thread's lane
  bool laneSplit_ = false;      // Warps: inside a loop whose iterations the lanes split
  int gemms_ = 0;               // Blocks: GEMMs emitted (names their shared arrays)
  int attentions_ = 0;          // Blocks: attentions emitted (likewise)
};

// Sets up the kernel's share of the grid (see gpu::Mapping) and emits its body.
void GpuKernelEmitter::emitBody() {
  mapping_ = gpu::mappingOf(k_);
  llvm::Value *tid = sreg(rt::kSimTidX), *width = sreg(rt::kSimNtidX);
  llvm::Value *block = sreg(rt::kSimCtaidX), *blocks = sreg(rt::kSimNctaidX);
  llvm::Value *thread = b_.CreateAdd(b_.CreateMul(block, width), tid), *threads = b_.CreateMul(width, blocks);
  switch (mapping_) {
  case gpu::Mapping::Threads: begin_ = thread, step_ = threads; break;
  case gpu::Mapping::Warps:
    lane_ = b_.CreateAnd(tid, b_.getInt64(31));
    begin_ = b_.CreateLShr(thread, 5), step_ = b_.CreateLShr(threads, 5);
    break;
  case gpu::Mapping::Blocks: begin_ = block, step_ = blocks; break;
  }
  if (k_.parallelLoop())
    stmt(*k_.body);
  else if (std::vector<const kir::Stmt *> loops = gpu::gridLoops(k_); !loops.empty())
    for (const kir::Stmt *loop : loops) // independent: no barrier between them
      collapsedParallelLoop(*loop);
  else // the first thread (or warp) does all of it
    onlyIf(b_.CreateICmpEQ(begin_, b_.getInt64(0)), [&] { stmt(*k_.body); });
}

// gpu::loopNest of grid loop `s` as one grid-stride loop over the product of its extents.
void GpuKernelEmitter::collapsedParallelLoop(const kir::Stmt &s) {
  std::vector<const kir::Stmt *> chain = gpu::loopNest(s, mapping_);
  std::vector<llvm::Value *> extents;
  llvm::Value *total = b_.getInt64(1);
  for (const kir::Stmt *loop : chain) {
    extents.push_back(index(loop->extent));
    total = b_.CreateMul(total, extents.back());
  }
  forLoop(s.var + ".flat", begin_, total, step_, [&](llvm::Value *flat) {
    std::map<std::string, llvm::Value *> saved;
    for (size_t k = chain.size(); k-- > 0;) { // the innermost varies fastest
      llvm::Value *i = flat;
      if (k > 0) {
        i = b_.CreateURem(flat, extents[k]);
        flat = b_.CreateUDiv(flat, extents[k]);
      }
      saved[chain[k]->var] = vars_.count(chain[k]->var) ? vars_[chain[k]->var] : nullptr;
      vars_[chain[k]->var] = i;
    }
    for (const auto &c : chain.back()->body)
      stmt(*c);
    for (auto &[name, value] : saved)
      vars_[name] = value;
  });
}

void GpuKernelEmitter::storeStmt(const kir::Stmt &s) {
  if (mapping_ == gpu::Mapping::Warps && !laneSplit_) // every lane holds the value: lane 0 stores it
    return onlyIf(b_.CreateICmpEQ(lane_, b_.getInt64(0)), [&] { KernelEmitter::storeStmt(s); });
  KernelEmitter::storeStmt(s);
}

void GpuKernelEmitter::forStmt(const kir::Stmt &s) {
  if (&s == k_.parallelLoop()) // this thread's, warp's or block's share of the grid
    return mapping_ == gpu::Mapping::Blocks ? loopOver(s, begin_, index(s.extent), step_) : collapsedParallelLoop(s);
  // A warp's lanes split its reductions and its independent (vectorizable) loops.
  bool splitLanes = mapping_ == gpu::Mapping::Warps && !laneSplit_ &&
                    (s.schedule == kir::Stmt::Schedule::Reduce || s.schedule == kir::Stmt::Schedule::Vectorize);
  if (!splitLanes)
    return KernelEmitter::forStmt(s);
  laneSplit_ = true;
  loopOver(s, lane_, index(s.extent), b_.getInt64(gpu::kWarpLanes));
  laneSplit_ = false;
  for (const kir::Reduction &r : s.reductions)
    combineAcrossLanes(r);
}

void GpuKernelEmitter::gemmStmt(const kir::Gemm &g) {
  if (g.bPanels) // the GPU schedule keeps weights as they are (ScheduleOptions::packedWeights)
    throw InternalError("kernel " + k_.name + ": a GPU GEMM reads B in rows, not prepacked panels");
  if (g.im2col) // the GPU schedule keeps its direct convolution (ScheduleOptions::implicitGemmConv2d)
    throw InternalError("kernel " + k_.name + ": a GPU GEMM reads B in rows, not gathered from an image");
  switch (mapping_) {
  case gpu::Mapping::Blocks: return tiledGemm(g);
  case gpu::Mapping::Warps: throw InternalError("kernel " + k_.name + " has a GEMM among reductions");
  case gpu::Mapping::Threads: return gemmLoops(g);
  }
}

// For any scalar the kernels compute in, as one or two 32-bit words.
llvm::Value *GpuKernelEmitter::shuffleXor(llvm::Value *v, unsigned laneMask) {
  llvm::Type *i32 = b_.getInt32Ty(), *t = v->getType();
  auto word = [&](llvm::Value *x) { return shuffleXorWord(x, laneMask); };
  if (t->isFloatTy())
    return b_.CreateBitCast(word(b_.CreateBitCast(v, i32)), t);
  if (t->isIntegerTy(64)) {
    llvm::Value *lo = word(b_.CreateTrunc(v, i32)), *hi = word(b_.CreateTrunc(b_.CreateLShr(v, 32), i32));
    return b_.CreateOr(b_.CreateZExt(lo, t), b_.CreateShl(b_.CreateZExt(hi, t), 32));
  }
  return b_.CreateTrunc(word(b_.CreateZExt(v, i32)), t);
}

// After a loop split across lanes: a butterfly of shuffles leaves every lane with the
// combination of all 32 partials.
llvm::Value *GpuKernelEmitter::allLanes(llvm::Value *v, ir::OpKind combine, bool fp) {
  for (unsigned mask = 16; mask >= 1; mask /= 2)
    v = binaryOp(combine, v, shuffleXor(v, mask), fp);
  return v;
}

void GpuKernelEmitter::combineAcrossLanes(const kir::Reduction &r) {
  llvm::AllocaInst *slot = locals_.at(r.local), *atSlot = r.argLocal.empty() ? nullptr : locals_.at(r.argLocal);
  bool fp = slot->getAllocatedType()->isFloatTy();
  if (!atSlot) {
    b_.CreateStore(allLanes(b_.CreateLoad(slot->getAllocatedType(), slot), r.combine, fp), slot);
    return;
  }
  for (unsigned mask = 16; mask >= 1; mask /= 2) {
    llvm::Value *mine = b_.CreateLoad(slot->getAllocatedType(), slot), *theirs = shuffleXor(mine, mask);
    llvm::Value *myAt = b_.CreateLoad(b_.getInt64Ty(), atSlot), *theirAt = shuffleXor(myAt, mask);
    llvm::Value *same = binaryOp(ir::OpKind::Eq, theirs, mine, fp), *better = binaryOp(r.combine, theirs, mine, fp);
    if (fp) { // NaN beats any number, and of two NaNs the first index wins (as in the serial loop)
      llvm::Value *theirNan = b_.CreateFCmpUNO(theirs, theirs), *myNan = b_.CreateFCmpUNO(mine, mine);
      better = b_.CreateOr(better, b_.CreateAnd(theirNan, b_.CreateNot(myNan)));
      same = b_.CreateOr(same, b_.CreateAnd(theirNan, myNan));
    }
    llvm::Value *tie = b_.CreateAnd(same, b_.CreateICmpSLT(theirAt, myAt));
    llvm::Value *take = b_.CreateOr(better, tie);
    b_.CreateStore(b_.CreateSelect(take, theirs, mine), slot);
    b_.CreateStore(b_.CreateSelect(take, theirAt, myAt), atSlot);
  }
}

// A float array in the block's shared memory.
llvm::Value *GpuKernelEmitter::sharedArray(const std::string &name, int64_t elements) {
  auto *type = llvm::ArrayType::get(b_.getFloatTy(), static_cast<uint64_t>(elements));
  SharedPlacement at = sharedPlacement(type);
  auto *g = new llvm::GlobalVariable(m_, type, false, llvm::GlobalValue::InternalLinkage, at.init, k_.name + "." + name, nullptr,
                                     llvm::GlobalValue::NotThreadLocal, at.addressSpace);
  g->setAlignment(llvm::Align(16));
  return g;
}

// The GEMM by one thread block: output tiles of gpu::kGemmTile x gpu::kGemmTile (the block's
// rows, columns strided over the grid's y), each thread accumulating 4 x 4 of them in
// registers from gpu::kGemmDepth-deep stages of A and B staged in shared memory. Rows of a
// stage are padded by one float so that neither the staging stores nor the reads conflict
// on banks. Out-of-range elements stage as zeros; out-of-range outputs are not stored.
void GpuKernelEmitter::tiledGemm(const kir::Gemm &g) {
  constexpr int64_t tile = gpu::kGemmTile, depthStage = gpu::kGemmDepth, pitch = tile + 1;
  constexpr int64_t threads = gpu::kBlockThreads, perThread = tile / 16; // a 16 x 16 grid of threads
  static_assert(threads == 256 && tile * depthStage % threads == 0);
  llvm::Type *f32 = b_.getFloatTy();
  llvm::Value *zero = llvm::ConstantFP::get(f32, 0.0);
  llvm::Value *tid = sreg(rt::kSimTidX), *tx = b_.CreateAnd(tid, b_.getInt64(15)), *ty = b_.CreateLShr(tid, 4);
  llvm::Value *aBase = index(g.aBase), *bBase = index(g.bBase), *cBase = index(g.cBase);
  llvm::Value *lda = index(g.lda), *ldb = index(g.ldb), *ldc = index(g.ldc), *n = index(g.n), *depth = index(g.depth);
  llvm::Value *row0 = index(g.row0), *rows = index(g.rows);
  llvm::Value *bColStride = g.bColStride ? index(g.bColStride) : b_.getInt64(1);
  llvm::Value *sharedA = sharedArray("a" + std::to_string(gemms_), depthStage * pitch);
  llvm::Value *sharedB = sharedArray("b" + std::to_string(gemms_++), depthStage * pitch);
  auto at = [&](llvm::Value *base, llvm::Value *i) { return b_.CreateInBoundsGEP(f32, base, i); };
  std::vector<llvm::AllocaInst *> acc;
  for (int64_t k = 0; k < perThread * perThread; ++k)
    acc.push_back(entryAlloca(f32, "acc"));
  llvm::Value *colStart = b_.CreateMul(sreg(rt::kSimCtaidY), b_.getInt64(tile));
  llvm::Value *colStep = b_.CreateMul(sreg(rt::kSimNctaidY), b_.getInt64(tile));
  forLoop("j0", colStart, n, colStep, [&](llvm::Value *j0) {
    for (llvm::AllocaInst *slot : acc)
      b_.CreateStore(zero, slot);
    forLoop("k0", b_.getInt64(0), depth, depthStage, [&](llvm::Value *k0) {
      for (int64_t q = 0; q < tile * depthStage / threads; ++q) {
        llvm::Value *e = b_.CreateAdd(tid, b_.getInt64(q * threads));
        // A: consecutive threads read consecutive k of one row.
        llvm::Value *r = b_.CreateLShr(e, 4), *kk = b_.CreateAnd(e, b_.getInt64(depthStage - 1));
        llvm::Value *k = b_.CreateAdd(k0, kk);
        llvm::Value *inside = b_.CreateAnd(b_.CreateICmpSLT(r, rows), b_.CreateICmpSLT(k, depth));
        llvm::Value *from = b_.CreateSelect(inside, b_.CreateAdd(aBase, b_.CreateAdd(b_.CreateMul(b_.CreateAdd(row0, r), lda), k)), aBase);
        b_.CreateStore(b_.CreateSelect(inside, b_.CreateLoad(f32, at(bufs_[g.a], from)), zero),
                       at(sharedA, b_.CreateAdd(b_.CreateMul(kk, b_.getInt64(pitch)), r)));
        // B: consecutive threads read along B's contiguous axis (k when it is transposed).
        llvm::Value *col;
        if (g.bColStride)
          col = b_.CreateLShr(e, 4), kk = b_.CreateAnd(e, b_.getInt64(depthStage - 1));
        else
          col = b_.CreateAnd(e, b_.getInt64(tile - 1)), kk = b_.CreateLShr(e, 6);
        k = b_.CreateAdd(k0, kk);
        llvm::Value *j = b_.CreateAdd(j0, col);
        inside = b_.CreateAnd(b_.CreateICmpSLT(k, depth), b_.CreateICmpSLT(j, n));
        from = b_.CreateSelect(inside, b_.CreateAdd(bBase, b_.CreateAdd(b_.CreateMul(k, ldb), b_.CreateMul(j, bColStride))), bBase);
        b_.CreateStore(b_.CreateSelect(inside, b_.CreateLoad(f32, at(bufs_[g.b], from)), zero),
                       at(sharedB, b_.CreateAdd(b_.CreateMul(kk, b_.getInt64(pitch)), col)));
      }
      barrier();
      forLoop("k", b_.getInt64(0), b_.getInt64(depthStage), 1, [&](llvm::Value *k) {
        llvm::Value *stageRow = b_.CreateMul(k, b_.getInt64(pitch));
        std::vector<llvm::Value *> av, bv;
        for (int64_t t = 0; t < perThread; ++t) {
          av.push_back(b_.CreateLoad(f32, at(sharedA, b_.CreateAdd(stageRow, b_.CreateAdd(ty, b_.getInt64(16 * t))))));
          bv.push_back(b_.CreateLoad(f32, at(sharedB, b_.CreateAdd(stageRow, b_.CreateAdd(tx, b_.getInt64(16 * t))))));
        }
        for (int64_t i = 0; i < perThread; ++i)
          for (int64_t j = 0; j < perThread; ++j) {
            llvm::AllocaInst *slot = acc[i * perThread + j];
            b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {f32}, {av[i], bv[j], b_.CreateLoad(f32, slot)}), slot);
          }
      });
      barrier(); // the next stage overwrites what this one read
    });
    const kir::Stmt *epilogue = g.epilogue ? g.epilogue->body[0]->body[0].get() : nullptr;
    for (int64_t i = 0; i < perThread; ++i)
      for (int64_t j = 0; j < perThread; ++j) {
        llvm::Value *r = b_.CreateAdd(ty, b_.getInt64(16 * i)), *col = b_.CreateAdd(b_.CreateAdd(j0, tx), b_.getInt64(16 * j));
        onlyIf(b_.CreateAnd(b_.CreateICmpSLT(r, rows), b_.CreateICmpSLT(col, n)), [&] {
          llvm::Value *to = b_.CreateAdd(cBase, b_.CreateAdd(b_.CreateMul(b_.CreateAdd(row0, r), ldc), col));
          b_.CreateStore(b_.CreateLoad(f32, acc[i * perThread + j]), at(bufs_[g.c], to));
          if (epilogue) { // this thread's own element: no barrier needed
            vars_[g.epilogue->var] = r, vars_[g.epilogue->body[0]->var] = col;
            stmt(*epilogue);
            vars_.erase(g.epilogue->var), vars_.erase(g.epilogue->body[0]->var);
          }
        });
      }
  });
}

// The attention of one thread block (gpu::Mapping::Blocks): its block of query rows a warp
// each (row r of the block in warp r mod 8), the keys in tiles of gpu::kAttentionKeyTile,
// one key per lane. Per tile: q's rows and the tile's keys stage through shared memory
// gpu::kAttentionDepth elements of the head dim at a time (consecutive threads load
// consecutive elements; rows padded by one float so that lanes reading down a column hit
// distinct banks) and each lane accumulates its key's dot product in a register; an
// online softmax per row (the tile's max and sum by warp shuffles, as the softmax kernel
// combines its lanes; p to shared memory); then the tile's values stage the same way and
// each lane updates the output elements it owns (y = lane mod 32), rescaled by
// exp(m_old - m_new) once per tile. The output rows accumulate in place: each element is
// one lane's, so they need no barrier. Causal is a predicate: the tiles stop at the
// block's last row, the keys past a row's diagonal in them score the fill (as the unfused
// where), and the keys past the block's last row count after the loop, on a row where the
// fill's weight is not 0 (kir::Attention). Every thread runs every tile, because the
// barriers need all of them; a row past the block's end stores nothing.
void GpuKernelEmitter::attentionStmt(const kir::Attention &a) {
  constexpr int64_t tile = gpu::kAttentionKeyTile, depth = gpu::kAttentionDepth, pitch = depth + 1, lanes = gpu::kWarpLanes;
  constexpr int64_t threads = gpu::kBlockThreads, warps = threads / lanes;
  static_assert(tile == lanes && depth == lanes, "a lane per key of a tile and per staged element of a row");
  if (mapping_ != gpu::Mapping::Blocks)
    throw InternalError("kernel " + k_.name + ": an attention outside a block-mapped loop");
  const int64_t perWarp = (a.rowBlock + warps - 1) / warps, blockRows = perWarp * warps;
  llvm::Type *f32 = b_.getFloatTy();
  llvm::Value *zero = llvm::ConstantFP::get(f32, 0.0), *minusInf = llvm::ConstantFP::getInfinity(f32, true);
  llvm::Value *tid = sreg(rt::kSimTidX), *lane = b_.CreateAnd(tid, b_.getInt64(lanes - 1)), *warp = b_.CreateLShr(tid, 5);
  llvm::Value *Q = bufs_[a.q], *K = bufs_[a.k], *V = bufs_[a.v], *O = bufs_[a.o], *M = a.mask >= 0 ? bufs_[a.mask] : nullptr;
  llvm::Value *qBase = index(a.qBase), *kBase = index(a.kBase), *vBase = index(a.vBase), *oBase = index(a.oBase);
  llvm::Value *d = index(a.d), *dv = index(a.dv), *keys = index(a.keys), *row0 = index(a.row0), *rows = index(a.rows);
  llvm::Value *maskBase = M ? index(a.maskBase) : nullptr, *maskRow = M ? index(a.maskRow) : nullptr,
              *maskCol = M ? index(a.maskCol) : nullptr;
  // The keys the tiles cover: with causal, up to the block's last row.
  llvm::Value *keyEnd = a.causal ? b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, keys, b_.CreateAdd(row0, rows)) : keys;
  std::string id = std::to_string(attentions_++);
  llvm::Value *sharedQ = sharedArray("att.q" + id, blockRows * pitch), *sharedKV = sharedArray("att.kv" + id, tile * pitch);
  llvm::Value *sharedP = sharedArray("att.p" + id, blockRows * tile);
  auto at = [&](llvm::Value *base, llvm::Value *i) { return b_.CreateInBoundsGEP(f32, base, i); };
  auto add = [&](llvm::Value *x, llvm::Value *y) { return b_.CreateAdd(x, y); };
  auto mul = [&](llvm::Value *x, llvm::Value *y) { return b_.CreateMul(x, y); };
  auto lt = [&](llvm::Value *x, llvm::Value *y) { return b_.CreateICmpSLT(x, y); };
  auto i64 = [&](int64_t v) { return b_.getInt64(v); };
  // This warp's rows: their index in the block, in the sequence, and whether they exist.
  std::vector<llvm::Value *> local, row, active;
  std::vector<llvm::AllocaInst *> dot, runMax, runSum, corr;
  for (int64_t r = 0; r < perWarp; ++r) {
    local.push_back(add(warp, i64(r * warps)));
    row.push_back(add(row0, local.back()));
    active.push_back(lt(local.back(), rows));
    dot.push_back(entryAlloca(f32, "att.dot"));
    runMax.push_back(entryAlloca(f32, "att.max"));
    runSum.push_back(entryAlloca(f32, "att.sum"));
    corr.push_back(entryAlloca(f32, "att.corr"));
  }
  llvm::AllocaInst *acc = entryAlloca(f32, "att.acc");
  // The output elements this lane owns in row r: body(pointer to element y).
  auto ownElements = [&](int64_t r, const std::function<void(llvm::Value *)> &body) {
    onlyIf(active[r], [&] {
      forLoop("att.y", lane, dv, lanes, [&](llvm::Value *y) { body(at(O, add(oBase, add(mul(row[r], dv), y)))); });
    });
  };
  // Stages `n` rows of `depth` elements into `shared` (pitch floats a row): element (r, x)
  // from src[index(r, x)] where inside(r, x), else 0; then a barrier.
  auto stage = [&](llvm::Value *shared, int64_t n, llvm::Value *src, const std::function<llvm::Value *(llvm::Value *, llvm::Value *)> &inside,
                   const std::function<llvm::Value *(llvm::Value *, llvm::Value *)> &where) {
    for (int64_t q = 0; q * threads < n * depth; ++q) {
      llvm::Value *e = add(tid, i64(q * threads)), *r = b_.CreateLShr(e, 5), *x = b_.CreateAnd(e, i64(depth - 1));
      auto body = [&] {
        llvm::Value *in = inside(r, x), *from = b_.CreateSelect(in, where(r, x), i64(0));
        b_.CreateStore(b_.CreateSelect(in, b_.CreateLoad(f32, at(src, from)), zero), at(shared, add(mul(r, i64(pitch)), x)));
      };
      if ((q + 1) * threads <= n * depth)
        body();
      else
        onlyIf(lt(e, i64(n * depth)), body);
    }
    barrier();
  };
  for (int64_t r = 0; r < perWarp; ++r) {
    ownElements(r, [&](llvm::Value *ptr) { b_.CreateStore(zero, ptr); });
    b_.CreateStore(minusInf, runMax[r]);
    b_.CreateStore(zero, runSum[r]);
  }
  forLoop("att.j0", i64(0), keyEnd, tile, [&](llvm::Value *j0) {
    for (llvm::AllocaInst *slot : dot)
      b_.CreateStore(zero, slot);
    // Scores: this lane's key j0 + lane against each of the warp's rows.
    forLoop("att.x0", i64(0), d, depth, [&](llvm::Value *x0) {
      stage(sharedQ, blockRows, Q, [&](llvm::Value *r, llvm::Value *x) { return b_.CreateAnd(lt(r, rows), lt(add(x0, x), d)); },
            [&](llvm::Value *r, llvm::Value *x) { return add(qBase, add(mul(add(row0, r), d), add(x0, x))); });
      stage(sharedKV, tile, K, [&](llvm::Value *r, llvm::Value *x) { return b_.CreateAnd(lt(add(j0, r), keyEnd), lt(add(x0, x), d)); },
            [&](llvm::Value *r, llvm::Value *x) { return add(kBase, add(mul(add(j0, r), d), add(x0, x))); });
      llvm::Value *width = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, i64(depth), b_.CreateSub(d, x0));
      forLoop("att.x", i64(0), width, 1, [&](llvm::Value *x) {
        llvm::Value *kx = b_.CreateLoad(f32, at(sharedKV, add(mul(lane, i64(pitch)), x)));
        for (int64_t r = 0; r < perWarp; ++r) {
          llvm::Value *qx = b_.CreateLoad(f32, at(sharedQ, add(mul(local[r], i64(pitch)), x)));
          b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {f32}, {qx, kx, b_.CreateLoad(f32, dot[r])}), dot[r]);
        }
      });
      barrier(); // the next stage overwrites what this one read
    });
    // The online softmax of each row over the tile: every lane ends with the same max and sum.
    llvm::Value *j = add(j0, lane), *valid = lt(j, keyEnd);
    for (int64_t r = 0; r < perWarp; ++r) {
      llvm::Value *s = b_.CreateFMul(b_.CreateLoad(f32, dot[r]), llvm::ConstantFP::get(f32, a.scale));
      if (M) {
        llvm::Value *mi = add(maskBase, add(mul(row[r], maskRow), mul(j, maskCol)));
        s = b_.CreateFAdd(s, b_.CreateLoad(f32, at(M, b_.CreateSelect(b_.CreateAnd(valid, active[r]), mi, maskBase))));
      }
      if (a.causal)
        s = b_.CreateSelect(b_.CreateICmpSGT(j, row[r]), llvm::ConstantFP::get(f32, a.fill), s);
      s = b_.CreateSelect(valid, s, minusInf);
      llvm::Value *old = b_.CreateLoad(f32, runMax[r]);
      llvm::Value *newMax = binaryOp(ir::OpKind::Maximum, old, allLanes(s, ir::OpKind::Maximum, true), true);
      // An all -inf max shifts by 0 (exp(-inf - -inf) would be NaN where the unfused softmax has no such term yet).
      llvm::Value *shift = b_.CreateSelect(b_.CreateFCmpOEQ(newMax, minusInf), zero, newMax);
      llvm::Value *c = math(MathFn::Exp, {b_.CreateFSub(old, shift)}), *p = math(MathFn::Exp, {b_.CreateFSub(s, shift)});
      b_.CreateStore(b_.CreateFAdd(b_.CreateFMul(b_.CreateLoad(f32, runSum[r]), c), allLanes(p, ir::OpKind::Add, true)), runSum[r]);
      b_.CreateStore(newMax, runMax[r]);
      b_.CreateStore(c, corr[r]);
      b_.CreateStore(p, at(sharedP, add(mul(local[r], i64(tile)), lane)));
    }
    // o = o * corr + p v, the values staged depth columns at a time.
    llvm::Value *n = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, i64(tile), b_.CreateSub(keyEnd, j0));
    forLoop("att.y0", i64(0), dv, depth, [&](llvm::Value *y0) {
      stage(sharedKV, tile, V, [&](llvm::Value *r, llvm::Value *y) { return b_.CreateAnd(lt(add(j0, r), keyEnd), lt(add(y0, y), dv)); },
            [&](llvm::Value *r, llvm::Value *y) { return add(vBase, add(mul(add(j0, r), dv), add(y0, y))); });
      llvm::Value *y = add(y0, lane);
      for (int64_t r = 0; r < perWarp; ++r)
        onlyIf(b_.CreateAnd(active[r], lt(y, dv)), [&] {
          llvm::Value *ptr = at(O, add(oBase, add(mul(row[r], dv), y)));
          b_.CreateStore(b_.CreateFMul(b_.CreateLoad(f32, ptr), b_.CreateLoad(f32, corr[r])), acc);
          forLoop("att.pj", i64(0), n, 1, [&](llvm::Value *jj) {
            llvm::Value *p = b_.CreateLoad(f32, at(sharedP, add(mul(local[r], i64(tile)), jj)));
            llvm::Value *vj = b_.CreateLoad(f32, at(sharedKV, add(mul(jj, i64(pitch)), lane)));
            b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {f32}, {p, vj, b_.CreateLoad(f32, acc)}), acc);
          });
          b_.CreateStore(b_.CreateLoad(f32, acc), ptr);
        });
      barrier(); // the next stage overwrites the values (and the next tile p)
    });
  });
  // Whether a value of the keys past the block's last row, in this lane's elements of the
  // row, is inf or NaN (whose weight 0 still gives NaN in the unfused p v).
  llvm::Value *hiddenNotFinite = nullptr;
  if (a.causal) {
    llvm::AllocaInst *bad = entryAlloca(f32, "att.bad");
    b_.CreateStore(zero, bad);
    forLoop("att.hf", keyEnd, keys, 1, [&](llvm::Value *hj) {
      forLoop("att.hfy", lane, dv, lanes, [&](llvm::Value *y) {
        llvm::Value *x = b_.CreateLoad(f32, at(V, add(vBase, add(mul(hj, dv), y))));
        b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(f32, bad), b_.CreateFSub(x, x)), bad); // NaN from inf or NaN
      });
    });
    llvm::Value *total = b_.CreateLoad(f32, bad);
    hiddenNotFinite = b_.CreateFCmpUNO(total, total);
  }
  for (int64_t r = 0; r < perWarp; ++r) {
    if (a.causal) {
      // The keys past the block's last row: all hidden from this row, each scoring the fill,
      // whose weight w is 0 unless the row's scores all lie within ~104 of it (or below
      // it, or are NaN). Then l and the output take w per hidden key, as the unfused
      // softmax over all keys does; also on a lane whose hidden values are not all finite
      // (w = 0 there: l stays, its elements turn NaN as 0 inf and 0 NaN do).
      onlyIf(active[r], [&] {
        llvm::Value *fill = llvm::ConstantFP::get(f32, a.fill), *m = b_.CreateLoad(f32, runMax[r]);
        llvm::Value *newMax = binaryOp(ir::OpKind::Maximum, m, fill, true);
        llvm::Value *shift = b_.CreateSelect(b_.CreateFCmpOEQ(newMax, minusInf), zero, newMax);
        llvm::Value *w = math(MathFn::Exp, {b_.CreateFSub(fill, shift)}), *hidden = b_.CreateSub(keys, keyEnd);
        llvm::Value *takes = b_.CreateOr(b_.CreateFCmpUNE(w, zero), hiddenNotFinite);
        onlyIf(b_.CreateAnd(b_.CreateICmpSGT(hidden, i64(0)), takes), [&] {
          llvm::Value *c = math(MathFn::Exp, {b_.CreateFSub(m, shift)});
          b_.CreateStore(b_.CreateFAdd(b_.CreateFMul(b_.CreateLoad(f32, runSum[r]), c), b_.CreateFMul(b_.CreateSIToFP(hidden, f32), w)),
                         runSum[r]);
          forLoop("att.y", lane, dv, lanes, [&](llvm::Value *y) {
            llvm::Value *ptr = at(O, add(oBase, add(mul(row[r], dv), y)));
            b_.CreateStore(b_.CreateFMul(b_.CreateLoad(f32, ptr), c), acc);
            forLoop("att.hj", keyEnd, keys, 1, [&](llvm::Value *hj) {
              llvm::Value *vj = b_.CreateLoad(f32, at(V, add(vBase, add(mul(hj, dv), y))));
              b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {f32}, {w, vj, b_.CreateLoad(f32, acc)}), acc);
            });
            b_.CreateStore(b_.CreateLoad(f32, acc), ptr);
          });
        });
      });
    }
    // Divide by the sum; with no keys at all the row stays 0 (the unfused matmul over an empty dim).
    onlyIf(b_.CreateICmpSGT(keys, i64(0)), [&] {
      ownElements(r, [&](llvm::Value *ptr) { b_.CreateStore(b_.CreateFDiv(b_.CreateLoad(f32, ptr), b_.CreateLoad(f32, runSum[r])), ptr); });
    });
  }
}

// The GEMM as plain loops: one dot product per element of the row block.
void GpuKernelEmitter::gemmLoops(const kir::Gemm &g) {
  llvm::Type *f32 = b_.getFloatTy();
  llvm::Value *aBase = index(g.aBase), *bBase = index(g.bBase), *cBase = index(g.cBase);
  llvm::Value *lda = index(g.lda), *ldb = index(g.ldb), *ldc = index(g.ldc);
  llvm::Value *row0 = index(g.row0), *rowEnd = b_.CreateAdd(row0, index(g.rows));
  llvm::AllocaInst *acc = entryAlloca(f32, "acc");
  forLoop("i", row0, rowEnd, 1, [&](llvm::Value *i) {
    forLoop("j", b_.getInt64(0), index(g.n), 1, [&](llvm::Value *j) {
      b_.CreateStore(llvm::ConstantFP::get(f32, 0.0), acc);
      forLoop("k", b_.getInt64(0), index(g.depth), 1, [&](llvm::Value *k) {
        llvm::Value *a = b_.CreateLoad(f32, b_.CreateInBoundsGEP(f32, bufs_[g.a], b_.CreateAdd(aBase, b_.CreateAdd(b_.CreateMul(i, lda), k))));
        llvm::Value *col = g.bColStride ? b_.CreateMul(j, index(g.bColStride)) : j;
        llvm::Value *bv = b_.CreateLoad(f32, b_.CreateInBoundsGEP(f32, bufs_[g.b], b_.CreateAdd(bBase, b_.CreateAdd(b_.CreateMul(k, ldb), col))));
        b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {f32}, {a, bv, b_.CreateLoad(f32, acc)}), acc);
      });
      b_.CreateStore(b_.CreateLoad(f32, acc), b_.CreateInBoundsGEP(f32, bufs_[g.c], b_.CreateAdd(cBase, b_.CreateAdd(b_.CreateMul(i, ldc), j))));
    });
  });
  if (g.epilogue)
    stmt(*g.epilogue);
}

// NVPTX: PTX's kernel ABI, libdevice, and the special registers, barrier and shuffles of
// the hardware.
class NvptxKernelEmitter : public GpuKernelEmitter {
public:
  using GpuKernelEmitter::GpuKernelEmitter;

protected:
  void createFunction() override {
    auto names = k_.dims();
    size_t arguments = k_.argumentBuffers();
    std::vector<llvm::Type *> params(arguments, llvm::PointerType::get(ctx_, 0));
    params.insert(params.end(), names.size(), b_.getInt64Ty());
    beginFunction(params);
    fn_->setCallingConv(llvm::CallingConv::PTX_Kernel);
    // .maxntid: ptxas then keeps the registers within what a block of this many threads
    // may have (the convnet's GEMM used 255 of the 256 a 256-thread block allows).
    llvm::Metadata *bound[] = {llvm::ValueAsMetadata::get(fn_), llvm::MDString::get(ctx_, "maxntidx"),
                               llvm::ValueAsMetadata::get(b_.getInt32(static_cast<uint32_t>(gpu::gridOf(k_).threads)))};
    fn_->getParent()->getOrInsertNamedMetadata("nvvm.annotations")->addOperand(llvm::MDNode::get(ctx_, bound));
    for (size_t i = 0; i < arguments; ++i) {
      fn_->getArg(static_cast<unsigned>(i))->setName(k_.buffers[i].name);
      bufs_.push_back(fn_->getArg(static_cast<unsigned>(i)));
    }
    for (size_t i = 0; i < names.size(); ++i)
      vars_[names[i]] = fn_->getArg(static_cast<unsigned>(arguments + i));
  }
  // libdevice's __nv_ form: NVPTX has no lowering for exp, log, sin, ... GELU is
  // x/2 erfc(-x/sqrt 2): 1 + erf(x/sqrt 2) cancels to 0 for x below about -6.
  llvm::Value *math(MathFn fn, std::vector<llvm::Value *> args) override {
    llvm::Type *f = b_.getFloatTy();
    llvm::Value *x = args[0];
    if (fn == MathFn::Silu) { // x / (1 + e^-x): x e^x / (1 + e^x) below 0, where e^-x may overflow
      auto one = llvm::ConstantFP::get(f, 1.0);
      llvm::Value *e = callExternal("__nv_expf", {b_.CreateFNeg(call(llvm::Intrinsic::fabs, {x}))});
      llvm::Value *xs = b_.CreateFMul(x, b_.CreateFDiv(one, b_.CreateFAdd(one, e)));
      return b_.CreateSelect(b_.CreateFCmpOLT(x, llvm::ConstantFP::get(f, 0.0)), b_.CreateFMul(xs, e), xs);
    }
    if (fn != MathFn::Gelu)
      return callExternal(std::string("__nv_") + libmName(fn), args);
    return b_.CreateFMul(b_.CreateFMul(llvm::ConstantFP::get(f, 0.5), x),
                         callExternal("__nv_erfcf", {b_.CreateFMul(x, llvm::ConstantFP::get(f, -M_SQRT1_2))}));
  }
  llvm::Value *specialRegister(rt::SimRegister r) override {
    static const llvm::Intrinsic::ID ids[] = {
        llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x,   llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x,
        llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x,
        llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_y, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_y};
    return b_.CreateIntrinsic(ids[r], {}, {});
  }
  void barrier() override { b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {}); }
  llvm::Value *shuffleXorWord(llvm::Value *word, unsigned laneMask) override {
    return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, {},
                              {b_.getInt32(0xffffffffu), word, b_.getInt32(laneMask), b_.getInt32(31)});
  }
  // Shared memory (address space 3) takes no initializer.
  SharedPlacement sharedPlacement(llvm::ArrayType *type) override { return {3, llvm::UndefValue::get(type)}; }
};

// The simulated GPU (rt::SimulatedGpuDevice): the host's KernelFn ABI and math, with the
// simulator's hooks (runtime/KernelAbi.h) for special registers, barriers and shuffles.
class SimulatedGpuKernelEmitter : public GpuKernelEmitter {
public:
  using GpuKernelEmitter::GpuKernelEmitter;

protected:
  void createFunction() override { createHostFunction(); }
  llvm::Value *specialRegister(rt::SimRegister r) override {
    return b_.CreateCall(hook("dnnc_sim_sreg", b_.getInt32Ty(), {b_.getInt32Ty()}), {b_.getInt32(r)});
  }
  void barrier() override { b_.CreateCall(hook("dnnc_sim_barrier", b_.getVoidTy(), {})); }
  llvm::Value *shuffleXorWord(llvm::Value *word, unsigned laneMask) override {
    llvm::Type *i32 = b_.getInt32Ty();
    return b_.CreateCall(hook("dnnc_sim_shfl_bfly", i32, {i32, i32}), {word, b_.getInt32(laneMask)});
  }
  // A plain zero-filled global: the simulator runs one block at a time.
  SharedPlacement sharedPlacement(llvm::ArrayType *type) override { return {0, llvm::Constant::getNullValue(type)}; }

private:
  llvm::FunctionCallee hook(const char *name, llvm::Type *ret, std::vector<llvm::Type *> args) {
    llvm::FunctionCallee f = m_.getOrInsertFunction(name, llvm::FunctionType::get(ret, args, false));
    if (auto *fn = llvm::dyn_cast<llvm::Function>(f.getCallee()))
      fn->addFnAttr(llvm::Attribute::Convergent);
    return f;
  }
};

} // namespace

void emitNvptxKernel(llvm::Module &m, const kir::Kernel &k) { NvptxKernelEmitter(m, k).emit(); }
void emitSimulatedGpuKernel(llvm::Module &m, const kir::Kernel &k) { SimulatedGpuKernelEmitter(m, k).emit(); }

} // namespace dnnc::backend
