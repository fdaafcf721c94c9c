// Kernel IR to LLVM IR: the entry point per target, and the base every target's emitter
// extends (Halide's CodeGen_LLVM pattern). Private to backend/llvm.
//
// Contract of each emit*Kernel: adds one function named after the kernel to `m`, verified.
//  - CPU: signature rt::KernelFn (runtime/KernelAbi.h); the parallel loop runs the chunk
//    [begin, end) the runtime hands the call; GEMMs run a vector micro-kernel.
//  - NVPTX: a PTX kernel taking each buffer pointer, then each dim (i64), by value, whose
//    work maps onto the grid as gpu::mappingOf says (backend/gpu/GpuMapping.h); it must be
//    launched with gpu::gridOf's block size.
//  - Simulated GPU: the GPU's mapping behind rt::KernelFn's signature, with the
//    simulator's hooks in place of special registers, barriers and shuffles.
#pragma once

#include "backend/llvm/VectorMath.h"
#include "ir/graph/ScalarOps.h"
#include "ir/kernel/Kernel.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace llvm {
class TargetMachine;
class Error;
} // namespace llvm

namespace dnnc::backend {

// vectorWidth: f32 lanes of the host's widest vector register (the GEMM's tiles).
void emitCpuKernel(llvm::Module &m, const kir::Kernel &k, unsigned vectorWidth);
void emitNvptxKernel(llvm::Module &m, const kir::Kernel &k);
void emitSimulatedGpuKernel(llvm::Module &m, const kir::Kernel &k);

// The key of kernel `kernel`'s code, from `m`, a module holding it alone, for `device`
// ("CPU", "simulated GPU", "NVPTX"): kernels with equal keys compile to the same code on
// the device. An op repeated in every layer, a training step's update of each param and
// the ops every recompute version shares are such twins.
std::string codeKey(llvm::Module &m, const std::string &kernel, std::string_view device);
// The symbol a code compiles under: "dnnc_" and 32 hex digits of its key's SHA-256, so
// that neither the kernels' names (which number them in program order) nor their order
// decide an object.
std::string codeSymbol(const std::string &key);

// A vector of `lanes` f32 from ptr (4-byte aligned); with a mask, only its lanes (0 elsewhere).
llvm::Value *loadLanes(llvm::IRBuilder<> &b, unsigned lanes, llvm::Value *ptr, llvm::Value *mask);

// The O3 module pipeline for `tm`'s target.
void optimize(llvm::Module &m, llvm::TargetMachine &tm);
std::string errorText(llvm::Error e);

// What every target emits alike: indices, scalar values (the semantics of
// ir/graph/ScalarOps.def, docs/semantics.md), loads and stores in each dtype's storage,
// locals, serial loops. A target overrides the hooks below; the base never asks which
// target it serves.
class KernelEmitter {
public:
  KernelEmitter(llvm::Module &m, const kir::Kernel &k) : m_(m), ctx_(m.getContext()), b_(ctx_), k_(k) {}
  virtual ~KernelEmitter() = default;
  // Creates the kernel's function, fills it and verifies it (InternalError if LLVM rejects it).
  void emit();

protected:
  // ---- target hooks ----
  // Creates fn_ in the target's calling convention (with beginFunction) and binds bufs_
  // and vars_ (the kernel's dims) to its arguments.
  virtual void createFunction() = 0;
  // The kernel body, emitted at the end of the entry block; the return follows.
  virtual void emitBody() = 0;
  // A transcendental function of f32 operands. The host's: VectorMath's inline IR, which
  // the loop vectorizer widens.
  virtual llvm::Value *math(MathFn fn, std::vector<llvm::Value *> args);
  virtual void storeStmt(const kir::Stmt &s);
  // The base runs the loop serially over its whole extent.
  virtual void forStmt(const kir::Stmt &s);
  virtual void gemmStmt(const kir::Gemm &g) = 0;
  // The base has none: only targets whose schedule makes attention ops (fusedAttention,
  // backend/lower/Schedule.h) emit it; anything else is an internal error.
  virtual void attentionStmt(const kir::Attention &a);

  // ---- function and ABI ----
  void beginFunction(const std::vector<llvm::Type *> &params);
  // rt::KernelFn: (void **buffers, int64_t *dims, int64_t begin, int64_t end).
  void createHostFunction();

  // ---- types, calls ----
  llvm::Type *computeType(DType t);
  llvm::Type *storageType(DType t);
  llvm::Value *call(llvm::Intrinsic::ID id, std::vector<llvm::Value *> args);
  // A call of the external function `name`, whose parameters and result have the type of args[0].
  llvm::Value *callExternal(const std::string &name, std::vector<llvm::Value *> args);

  // ---- indices (i64) ----
  llvm::Value *floorDivMod(llvm::Value *a, llvm::Value *d, bool wantMod);
  llvm::Value *index(sym::ExprRef e);
  llvm::Value *atom(const sym::Atom *a);

  // ---- scalar values ----
  llvm::Value *convert(llvm::Value *v, DType from, DType to);
  llvm::Value *loadValue(const kir::Value &v);
  llvm::Value *bfloat16Bits(llvm::Value *v);
  llvm::Value *roundTo(llvm::Value *v, DType t);
  void storeValue(int buffer, sym::ExprRef idx, llvm::Value *v, DType from);
  llvm::Value *floatUnary(ir::UnaryOp k, llvm::Value *x);
  llvm::Value *intUnary(ir::UnaryOp k, llvm::Value *x);
  llvm::Value *intPow(llvm::Value *a, llvm::Value *e);
  llvm::Value *floatBinary(ir::BinaryOp k, llvm::Value *a, llvm::Value *c);
  llvm::Value *boolBinary(ir::BinaryOp k, llvm::Value *a, llvm::Value *c);
  llvm::Value *intBinary(ir::BinaryOp k, llvm::Value *a, llvm::Value *c);
  llvm::Value *binaryOp(ir::OpKind k, llvm::Value *a, llvm::Value *c, bool fp);
  llvm::Value *value(const kir::Value &v);

  // ---- statements ----
  void stmt(const kir::Stmt &s);
  // `s` (a For) as the loop start, start + step, ... below end, with its body, marked for
  // the vectorizer when its schedule says so.
  void loopOver(const kir::Stmt &s, llvm::Value *start, llvm::Value *end, llvm::Value *step);
  llvm::AllocaInst *entryAlloca(llvm::Type *t, const std::string &name);
  // Tells the loop vectorizer to widen the loop whose latch branch this is; with
  // parallelAccesses (an access group), that its accesses in that group carry no
  // dependence from one iteration to another.
  void markVectorize(llvm::BranchInst *latch, llvm::MDNode *parallelAccesses = nullptr, bool maskedTail = false);
  // Whether the vector loop of `s` (Vectorize or Reduce) should run its last partial vector
  // masked instead of as scalar iterations: the target's choice (none by default).
  virtual bool maskTail(const kir::Stmt &) const { return false; }

  // for (i = start; i < end; i += step) body(i); returns the latch branch and leaves the
  // builder after the loop.
  template <class Body>
  llvm::BranchInst *forLoop(const std::string &name, llvm::Value *start, llvm::Value *end, int64_t step, Body body) {
    return forLoop(name, start, end, b_.getInt64(step), body);
  }
  template <class Body>
  llvm::BranchInst *forLoop(const std::string &name, llvm::Value *start, llvm::Value *end, llvm::Value *step, Body body) {
    llvm::BasicBlock *pre = b_.GetInsertBlock();
    auto *header = llvm::BasicBlock::Create(ctx_, name + ".head", fn_);
    auto *inner = llvm::BasicBlock::Create(ctx_, name + ".body", fn_);
    auto *exit = llvm::BasicBlock::Create(ctx_, name + ".exit", fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode *i = b_.CreatePHI(b_.getInt64Ty(), 2, name);
    i->addIncoming(start, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(i, end), inner, exit);
    b_.SetInsertPoint(inner);
    body(i);
    llvm::Value *next = b_.CreateAdd(i, step, "", true, true);
    llvm::BranchInst *latch = b_.CreateBr(header);
    i->addIncoming(next, b_.GetInsertBlock());
    b_.SetInsertPoint(exit);
    return latch;
  }
  // body(true) where cond holds, body(false) where it does not, then on after both.
  template <class Body> void eitherWay(llvm::Value *cond, Body body) {
    auto *yes = llvm::BasicBlock::Create(ctx_, "yes", fn_), *no = llvm::BasicBlock::Create(ctx_, "no", fn_),
         *done = llvm::BasicBlock::Create(ctx_, "either.done", fn_);
    b_.CreateCondBr(cond, yes, no);
    for (bool holds : {true, false}) {
      b_.SetInsertPoint(holds ? yes : no);
      body(holds);
      b_.CreateBr(done);
    }
    b_.SetInsertPoint(done);
  }
  template <class Body> void onlyIf(llvm::Value *cond, Body body) {
    auto *then = llvm::BasicBlock::Create(ctx_, "then", fn_), *done = llvm::BasicBlock::Create(ctx_, "endif", fn_);
    b_.CreateCondBr(cond, then, done);
    b_.SetInsertPoint(then);
    body();
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }

  llvm::Module &m_;
  llvm::LLVMContext &ctx_;
  llvm::IRBuilder<> b_;
  const kir::Kernel &k_;
  llvm::Function *fn_ = nullptr;
  llvm::BasicBlock *entry_ = nullptr;
  std::vector<llvm::Value *> bufs_;
  std::map<std::string, llvm::Value *> vars_;
  std::map<std::string, llvm::AllocaInst *> locals_;
  // Locals that a Reduce loop being emitted folds into, whose float sums may be
  // reassociated (Stmt::Schedule::Reduce: "in any order"; docs/semantics.md's blocked
  // sums, which a GPU's lanes split too). A target that fills it lets the vectorizer keep
  // several partial sums in vector lanes; empty, every add is applied in the loop's order.
  // Products stay serial (docs/semantics.md).
  std::set<std::string> reassociable_;
};

} // namespace dnnc::backend
