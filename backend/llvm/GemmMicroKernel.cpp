// The CPU GEMM's micro-kernels (GemmMicroKernel.h): one body, emitted inline where a
// kernel needs its own stores (a convolution's epilogue in registers) and else as a
// shared function per shape.
#include "backend/llvm/GemmMicroKernel.h"

#include "backend/llvm/KernelEmitter.h"
#include "base/Error.h"

#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <fmt/format.h>

#include <map>
#include <mutex>

namespace dnnc::backend {

std::string MicroKernelShape::name() const {
  std::string s = fmt::format("r{}x{}.l{}", rows, vectors, lanes);
  if (packedRows)
    s += fmt::format(".p{}", packedRows);
  return masked ? s + ".m" : s;
}

void emitMicroKernelBody(llvm::IRBuilder<> &b, const MicroKernelShape &s, const MicroKernelOperands &o,
                         const std::vector<llvm::AllocaInst *> &acc, const StoreSums &store) {
  llvm::LLVMContext &ctx = b.getContext();
  llvm::Function *fn = b.GetInsertBlock()->getParent();
  llvm::Type *f32 = b.getFloatTy(), *i64 = b.getInt64Ty();
  const unsigned R = s.rows, V = s.vectors, vw = s.lanes;
  auto *vec = llvm::FixedVectorType::get(f32, vw);
  auto align = llvm::Align(4);
  std::vector<llvm::Value *> masks(V, nullptr);
  if (s.masked) {
    llvm::Value *remaining = b.CreateVectorSplat(vw, o.remaining);
    for (unsigned v = 0; v < V; ++v) {
      std::vector<llvm::Constant *> lanes;
      for (unsigned l = 0; l < vw; ++l)
        lanes.push_back(b.getInt64(v * vw + l));
      masks[v] = b.CreateICmpSLT(llvm::ConstantVector::get(lanes), remaining);
    }
  }
  // Row r's element at depth 0: in place lda apart, packed one apart.
  std::vector<llvm::Value *> aRows;
  for (unsigned r = 0; r < R; ++r)
    aRows.push_back(b.CreateGEP(f32, o.a, s.packedRows ? b.getInt64(r) : b.CreateMul(b.getInt64(r), o.lda)));
  llvm::Value *aStep = b.getInt64(s.packedRows ? s.packedRows : 1);
  for (unsigned k = 0; k < R * V; ++k)
    b.CreateStore(llvm::Constant::getNullValue(vec), acc[k]);

  // for (k = k0; k < kEnd; ++k)
  llvm::BasicBlock *pre = b.GetInsertBlock();
  auto *header = llvm::BasicBlock::Create(ctx, "k.head", fn), *body = llvm::BasicBlock::Create(ctx, "k.body", fn),
       *exit = llvm::BasicBlock::Create(ctx, "k.exit", fn);
  b.CreateBr(header);
  b.SetInsertPoint(header);
  llvm::PHINode *k = b.CreatePHI(i64, 2, "k");
  k->addIncoming(o.k0, pre);
  b.CreateCondBr(b.CreateICmpSLT(k, o.kEnd), body, exit);
  b.SetInsertPoint(body);
  llvm::Value *bRow = b.CreateGEP(f32, o.bRows, o.bOffsets ? b.CreateLoad(i64, b.CreateInBoundsGEP(i64, o.bOffsets, k))
                                                           : b.CreateMul(k, o.bStride));
  std::vector<llvm::Value *> bv;
  for (unsigned v = 0; v < V; ++v)
    bv.push_back(loadLanes(b, vw, b.CreateGEP(f32, bRow, b.getInt64(v * vw)), masks[v]));
  llvm::Value *aAt = b.CreateMul(k, aStep);
  for (unsigned r = 0; r < R; ++r) {
    llvm::Value *av = b.CreateVectorSplat(vw, b.CreateLoad(f32, b.CreateGEP(f32, aRows[r], aAt)));
    for (unsigned v = 0; v < V; ++v) {
      llvm::AllocaInst *slot = acc[r * V + v];
      b.CreateStore(b.CreateIntrinsic(llvm::Intrinsic::fma, {vec}, {av, bv[v], b.CreateLoad(vec, slot)}), slot);
    }
  }
  k->addIncoming(b.CreateAdd(k, b.getInt64(1), "", true, true), b.GetInsertBlock());
  b.CreateBr(header);
  b.SetInsertPoint(exit);

  for (unsigned r = 0; r < R; ++r) {
    llvm::Value *cRow = store ? nullptr : b.CreateGEP(f32, o.c, b.CreateMul(b.getInt64(r), o.ldc));
    for (unsigned v = 0; v < V; ++v) {
      llvm::Value *sum = b.CreateLoad(vec, acc[r * V + v]);
      if (store) {
        store(r, v, sum);
        continue;
      }
      llvm::Value *ptr = b.CreateGEP(f32, cRow, b.getInt64(v * vw));
      sum = b.CreateSelect(o.first, sum, b.CreateFAdd(sum, loadLanes(b, vw, ptr, masks[v])));
      if (s.masked)
        b.CreateMaskedStore(sum, ptr, align, masks[v]);
      else
        b.CreateAlignedStore(sum, ptr, align);
    }
  }
}

namespace {

// (a, lda, bRows, bStride, k0, kEnd, c, ldc, first, remaining)
llvm::FunctionType *microKernelType(llvm::LLVMContext &ctx) {
  llvm::Type *ptr = llvm::PointerType::get(ctx, 0), *i64 = llvm::Type::getInt64Ty(ctx), *i1 = llvm::Type::getInt1Ty(ctx);
  return llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr, i64, ptr, i64, i64, i64, ptr, i64, i1, i64}, false);
}

// The function `symbol` in m, declared as what a caller may assume of every micro-kernel:
// it throws nothing and touches only memory through its pointer arguments (so that a
// kernel's other memory, its packing buffers among it, stays in registers across calls).
llvm::Function *microKernelFunction(llvm::Module &m, const std::string &symbol) {
  auto *fn = llvm::cast<llvm::Function>(m.getOrInsertFunction(symbol, microKernelType(m.getContext())).getCallee());
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  fn->setMemoryEffects(llvm::MemoryEffects::argMemOnly());
  fn->setVisibility(llvm::GlobalValue::HiddenVisibility);
  return fn;
}

// The symbols of the shapes callMicroKernel has declared, both ways.
std::mutex symbolsMutex;
std::map<std::string, std::string> symbolOfShape;
std::map<std::string, MicroKernelCode> codeOfSymbol;

std::string symbolOf(const MicroKernelShape &s) {
  std::lock_guard lock(symbolsMutex);
  if (auto it = symbolOfShape.find(s.name()); it != symbolOfShape.end())
    return it->second;
  llvm::LLVMContext ctx;
  llvm::Module m("dnnc", ctx);
  defineMicroKernel(m, s, "micro-kernel");
  std::string key = "CPU micro-kernel\n";
  llvm::raw_string_ostream os(key);
  llvm::WriteBitcodeToFile(m, os);
  os.flush();
  std::string symbol = codeSymbol(key);
  symbolOfShape[s.name()] = symbol;
  codeOfSymbol[symbol] = {s, key.size()};
  return symbol;
}

} // namespace

void callMicroKernel(llvm::IRBuilder<> &b, const MicroKernelShape &s, const MicroKernelOperands &o) {
  llvm::Function *fn = microKernelFunction(*b.GetInsertBlock()->getModule(), symbolOf(s));
  llvm::Value *unused = b.getInt64(0);
  b.CreateCall(fn, {o.a, o.lda ? o.lda : unused, o.bRows, o.bStride, o.k0, o.kEnd, o.c, o.ldc, o.first,
                    o.remaining ? o.remaining : unused});
}

std::optional<MicroKernelCode> microKernelNamed(const std::string &symbol) {
  std::lock_guard lock(symbolsMutex);
  auto it = codeOfSymbol.find(symbol);
  return it == codeOfSymbol.end() ? std::nullopt : std::optional(it->second);
}

void defineMicroKernel(llvm::Module &m, const MicroKernelShape &s, const std::string &symbol) {
  llvm::LLVMContext &ctx = m.getContext();
  llvm::Function *fn = microKernelFunction(m, symbol);
  fn->addFnAttr(llvm::Attribute::NoInline); // as in the objects, where each is a module of its own
  // Without these, targets that prefer 256-bit vectors split the 512-bit ones.
  fn->addFnAttr("min-legal-vector-width", std::to_string(s.lanes * 32));
  fn->addFnAttr("prefer-vector-width", std::to_string(s.lanes * 32));
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", fn));
  std::vector<llvm::AllocaInst *> acc;
  for (unsigned i = 0; i < s.rows * s.vectors; ++i)
    acc.push_back(b.CreateAlloca(llvm::FixedVectorType::get(b.getFloatTy(), s.lanes)));
  auto arg = [&](unsigned i) { return fn->getArg(i); };
  emitMicroKernelBody(b, s, {arg(0), arg(1), arg(2), arg(3), nullptr, arg(4), arg(5), arg(6), arg(7), arg(8), arg(9)}, acc);
  b.CreateRetVoid();
  std::string problems;
  llvm::raw_string_ostream os(problems);
  if (llvm::verifyFunction(*fn, &os))
    throw InternalError("micro-kernel " + s.name() + " is invalid LLVM IR: " + os.str());
}

} // namespace dnnc::backend
