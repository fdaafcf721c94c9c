// The CPU's kernel emitter: the runtime's KernelFn signature, the parallel loop over the
// chunk each call is handed, and GEMMs as vector FMA micro-kernels sized to the host.
#include "backend/llvm/KernelEmitter.h"

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

// The GEMM schedule: blocks of kDepthBlock along k, panels of two vectors of columns
// (packed, so the panel stays in L1), and a micro-kernel of kRows x 2 vector accumulators that
// broadcasts one A element per row and multiplies it into two B vectors with FMAs.
// Column tails use masked loads and stores; row tails compute on a repeated valid row
// and skip its stores.
void CpuKernelEmitter::gemmStmt(const kir::Gemm &g) {
  const int64_t kDepthBlock = 256;
  const unsigned vw = vectorWidth_, rowsPerTile = vw >= 16 ? 8 : 6;
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
  for (unsigned k = 0; k < 2 * rowsPerTile; ++k)
    acc.push_back(entryAlloca(vec, "acc"));
  std::vector<llvm::Constant *> lanes;
  for (unsigned l = 0; l < vw; ++l)
    lanes.push_back(b_.getInt64(l));
  llvm::Value *iota = llvm::ConstantVector::get(lanes);
  auto align = llvm::Align(4);
  // At least one depth block, so that an empty sum still stores its zeros.
  llvm::Value *depthBlocksEnd = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, depth, b_.getInt64(1));
  forLoop("k0", b_.getInt64(0), depthBlocksEnd, kDepthBlock, [&](llvm::Value *k0) {
    llvm::Value *kEnd = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, depth, b_.CreateAdd(k0, b_.getInt64(kDepthBlock)));
    llvm::Value *first = b_.CreateICmpEQ(k0, b_.getInt64(0));
    forLoop("j0", b_.getInt64(0), n, 2 * vw, [&](llvm::Value *j0) {
      llvm::Value *masks[2];
      for (unsigned h = 0; h < 2; ++h) {
        llvm::Value *col = b_.CreateAdd(b_.CreateVectorSplat(vw, b_.CreateAdd(j0, b_.getInt64(h * vw))), iota);
        masks[h] = b_.CreateICmpSLT(col, b_.CreateVectorSplat(vw, n));
      }
      llvm::Value *fullPanel = b_.CreateICmpSLE(b_.CreateAdd(j0, b_.getInt64(2 * vw)), n);
      // The same micro-kernel twice: unmasked for full panels, masked for the tail.
      auto *fullBB = llvm::BasicBlock::Create(ctx_, "panel.full", fn_), *tailBB = llvm::BasicBlock::Create(ctx_, "panel.tail", fn_),
           *joinBB = llvm::BasicBlock::Create(ctx_, "panel.done", fn_);
      b_.CreateCondBr(fullPanel, fullBB, tailBB);
      for (bool masked : {false, true}) {
        b_.SetInsertPoint(masked ? tailBB : fullBB);
        auto loadVec = [&](llvm::Value *ptr, unsigned h) -> llvm::Value * {
          if (masked)
            return b_.CreateMaskedLoad(vec, ptr, align, masks[h], llvm::Constant::getNullValue(vec));
          return b_.CreateAlignedLoad(vec, ptr, align);
        };
        // Packs B[k0:kEnd, j0:j0 + 2 vectors] contiguously, zero-padding the column tail:
        // the micro-kernel then streams it from L1 with no cache-set conflicts.
        forLoop("kp", k0, kEnd, 1, [&](llvm::Value *k) {
          llvm::Value *packedRow = b_.CreateMul(b_.CreateSub(k, k0), b_.getInt64(2 * vw));
          if (!bColStride) {
            llvm::Value *bRow = b_.CreateAdd(bBase, b_.CreateAdd(b_.CreateMul(k, ldb), j0));
            for (unsigned h = 0; h < 2; ++h)
              b_.CreateAlignedStore(loadVec(b_.CreateInBoundsGEP(f32, B, b_.CreateAdd(bRow, b_.getInt64(h * vw))), h),
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
        forLoop("i0", row0, rowEnd, rowsPerTile, [&](llvm::Value *i0) {
          llvm::Value *lastRow = b_.CreateSub(rowEnd, b_.getInt64(1));
          std::vector<llvm::Value *> aRows, rows;
          for (unsigned r = 0; r < rowsPerTile; ++r) {
            llvm::Value *row = b_.CreateAdd(i0, b_.getInt64(r));
            rows.push_back(row);
            llvm::Value *safe = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, row, lastRow);
            aRows.push_back(b_.CreateAdd(aBase, b_.CreateMul(safe, lda)));
          }
          for (llvm::AllocaInst *slot : acc)
            b_.CreateStore(llvm::Constant::getNullValue(vec), slot);
          forLoop("k", k0, kEnd, 1, [&](llvm::Value *k) {
            llvm::Value *packedRow = b_.CreateMul(b_.CreateSub(k, k0), b_.getInt64(2 * vw));
            llvm::Value *bv[2];
            for (unsigned h = 0; h < 2; ++h)
              bv[h] = b_.CreateAlignedLoad(vec, b_.CreateInBoundsGEP(f32, panel, b_.CreateAdd(packedRow, b_.getInt64(h * vw))), llvm::Align(64));
            for (unsigned r = 0; r < rowsPerTile; ++r) {
              llvm::Value *av = b_.CreateVectorSplat(vw, b_.CreateLoad(f32, b_.CreateInBoundsGEP(f32, A, b_.CreateAdd(aRows[r], k))));
              for (unsigned h = 0; h < 2; ++h) {
                llvm::AllocaInst *slot = acc[2 * r + h];
                b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {vec}, {av, bv[h], b_.CreateLoad(vec, slot)}), slot);
              }
            }
          });
          for (unsigned r = 0; r < rowsPerTile; ++r) {
            auto *storeBB = llvm::BasicBlock::Create(ctx_, "row.store", fn_), *nextBB = llvm::BasicBlock::Create(ctx_, "row.next", fn_);
            b_.CreateCondBr(b_.CreateICmpSLT(rows[r], rowEnd), storeBB, nextBB);
            b_.SetInsertPoint(storeBB);
            llvm::Value *cRow = b_.CreateAdd(cBase, b_.CreateAdd(b_.CreateMul(rows[r], ldc), j0));
            for (unsigned h = 0; h < 2; ++h) {
              llvm::Value *ptr = b_.CreateInBoundsGEP(f32, C, b_.CreateAdd(cRow, b_.getInt64(h * vw)));
              llvm::Value *sum = b_.CreateLoad(vec, acc[2 * r + h]);
              // Later depth blocks add to what the earlier ones stored.
              sum = b_.CreateSelect(first, sum, b_.CreateFAdd(sum, loadVec(ptr, h)));
              if (masked)
                b_.CreateMaskedStore(sum, ptr, align, masks[h]);
              else
                b_.CreateAlignedStore(sum, ptr, align);
            }
            b_.CreateBr(nextBB);
            b_.SetInsertPoint(nextBB);
          }
        });
        b_.CreateBr(joinBB);
      }
      b_.SetInsertPoint(joinBB);
    });
  });
  if (g.epilogue)
    stmt(*g.epilogue);
}

} // namespace

void emitCpuKernel(llvm::Module &m, const kir::Kernel &k, unsigned vectorWidth) { CpuKernelEmitter(m, k, vectorWidth).emit(); }

} // namespace dnnc::backend
