// Kernel IR to LLVM IR (see KernelEmitter.h): loops with phis, locals as allocas that
// mem2reg promotes, the CPU GEMM micro-kernel, and the GPU's grid-stride mapping.
#include "backend/llvm/KernelEmitter.h"

#include "base/Error.h"
#include "ir/graph/OpRegistry.h"
#include "runtime/KernelAbi.h"

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace dnnc::backend {
namespace {

using ir::OpKind;

class KernelEmitter {
public:
  KernelEmitter(llvm::Module &m, const kir::Kernel &k, const Target &target)
      : m_(m), ctx_(m.getContext()), b_(ctx_), k_(k), target_(target), vectorWidth_(target.vectorWidth) {}

  void emit() {
    auto *ptr = llvm::PointerType::get(ctx_, 0);
    auto *i64 = b_.getInt64Ty();
    auto names = k_.dims();
    std::vector<llvm::Type *> params;
    if (target_.nvptx()) {
      params.assign(k_.buffers.size(), ptr);
      params.insert(params.end(), names.size(), i64);
    } else {
      params = {ptr, ptr, i64, i64};
    }
    fn_ = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), params, false), llvm::Function::ExternalLinkage,
                                 k_.name, m_);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    entry_ = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    b_.SetInsertPoint(entry_);
    if (target_.nvptx()) {
      fn_->setCallingConv(llvm::CallingConv::PTX_Kernel);
      for (size_t i = 0; i < k_.buffers.size(); ++i) {
        fn_->getArg(static_cast<unsigned>(i))->setName(k_.buffers[i].name);
        bufs_.push_back(fn_->getArg(static_cast<unsigned>(i)));
      }
      for (size_t i = 0; i < names.size(); ++i)
        vars_[names[i]] = fn_->getArg(static_cast<unsigned>(k_.buffers.size() + i));
    } else {
      llvm::Value *buffers = fn_->getArg(0), *dims = fn_->getArg(1);
      for (size_t i = 0; i < k_.buffers.size(); ++i)
        bufs_.push_back(b_.CreateLoad(ptr, b_.CreateConstGEP1_64(ptr, buffers, i), k_.buffers[i].name));
      for (size_t i = 0; i < names.size(); ++i)
        vars_[names[i]] = b_.CreateLoad(i64, b_.CreateConstGEP1_64(i64, dims, i), names[i]);
    }
    if (target_.gpuMapping()) {
      gpuBody();
    } else {
      // Without this, targets that prefer 256-bit vectors split the GEMM's 512-bit ones.
      fn_->addFnAttr("min-legal-vector-width", std::to_string(vectorWidth_ * 32));
      begin_ = fn_->getArg(2), end_ = fn_->getArg(3), step_ = b_.getInt64(1);
      stmt(*k_.body);
    }
    b_.CreateRetVoid();
    std::string err;
    llvm::raw_string_ostream os(err);
    if (llvm::verifyFunction(*fn_, &os))
      throw InternalError("LLVM rejected kernel " + k_.name + ": " + err);
  }

private:
  llvm::Type *computeType(DType t) {
    if (isFloat(t))
      return b_.getFloatTy();
    return t == DType::Bool ? b_.getInt1Ty() : b_.getInt64Ty();
  }
  llvm::Type *storageType(DType t) {
    switch (t) {
    case DType::F32: return b_.getFloatTy();
    case DType::F16: return b_.getHalfTy();
    case DType::BF16: return b_.getInt16Ty(); // converted by hand: no libcall needed
    case DType::I32: return b_.getInt32Ty();
    case DType::I64: return b_.getInt64Ty();
    case DType::Bool: return b_.getInt8Ty();
    }
    return nullptr;
  }

  llvm::Value *call(llvm::Intrinsic::ID id, std::vector<llvm::Value *> args) {
    return b_.CreateIntrinsic(id, {args[0]->getType()}, args);
  }
  // A math function: the LLVM intrinsic or libm on the host, libdevice's __nv_ form on the GPU
  // (NVPTX has no lowering for exp, log, sin, ...).
  llvm::Value *math(const char *libmName, llvm::Intrinsic::ID id, std::vector<llvm::Value *> args) {
    if (!target_.nvptx() && id != llvm::Intrinsic::not_intrinsic)
      return call(id, args);
    std::vector<llvm::Type *> types(args.size(), args[0]->getType());
    llvm::FunctionCallee f = m_.getOrInsertFunction(target_.nvptx() ? std::string("__nv_") + libmName : libmName,
                                                    llvm::FunctionType::get(args[0]->getType(), types, false));
    return b_.CreateCall(f, args);
  }
  llvm::Value *libm(const char *name, llvm::Value *x) { return math(name, llvm::Intrinsic::not_intrinsic, {x}); }

  // ---- indices (i64) ----
  llvm::Value *floorDivMod(llvm::Value *a, llvm::Value *d, bool wantMod) {
    llvm::Value *q = b_.CreateSDiv(a, d), *r = b_.CreateSRem(a, d);
    llvm::Value *adjust = b_.CreateAnd(b_.CreateICmpNE(r, b_.getInt64(0)),
                                       b_.CreateICmpSLT(b_.CreateXor(r, d), b_.getInt64(0)));
    return wantMod ? b_.CreateSelect(adjust, b_.CreateAdd(r, d), r) : b_.CreateSub(q, b_.CreateZExt(adjust, b_.getInt64Ty()));
  }
  llvm::Value *index(sym::ExprRef e) {
    llvm::Value *sum = b_.getInt64(e->constant());
    for (const sym::Term &t : e->terms()) {
      llvm::Value *p = b_.getInt64(t.coef);
      for (const sym::Atom *a : t.factors)
        p = b_.CreateMul(p, atom(a));
      sum = b_.CreateAdd(sum, p);
    }
    return sum;
  }
  llvm::Value *atom(const sym::Atom *a) {
    if (a->kind == sym::Atom::Kind::Var) {
      auto it = vars_.find(a->name);
      if (it == vars_.end())
        throw InternalError(fmt::format("kernel {} uses the unknown dim {}", k_.name, a->name));
      return it->second;
    }
    llvm::Value *l = index(a->lhs), *r = index(a->rhs);
    switch (a->kind) {
    case sym::Atom::Kind::Div: return floorDivMod(l, r, false);
    case sym::Atom::Kind::Mod: return floorDivMod(l, r, true);
    case sym::Atom::Kind::Min: return b_.CreateSelect(b_.CreateICmpSLT(l, r), l, r);
    case sym::Atom::Kind::Max: return b_.CreateSelect(b_.CreateICmpSGT(l, r), l, r);
    default: return nullptr;
    }
  }

  // ---- scalar values ----
  llvm::Value *convert(llvm::Value *v, DType from, DType to) {
    llvm::Type *target = computeType(to);
    if (v->getType() == target)
      return v;
    if (isFloat(from)) {
      if (to == DType::Bool) // NaN is true, as in NumPy
        return b_.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0));
      // Truncation that saturates at the result type's bounds (not i64's, which a store
      // to i32 would then wrap) and makes NaN 0: defined for every input, like the oracle.
      if (to == DType::I32)
        return b_.CreateSExt(b_.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {b_.getInt32Ty(), v->getType()}, {v}), target);
      return b_.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {target, v->getType()}, {v});
    }
    if (from == DType::Bool)
      return isFloat(to) ? b_.CreateUIToFP(v, target) : b_.CreateZExt(v, target);
    if (to == DType::Bool)
      return b_.CreateICmpNE(v, b_.getInt64(0));
    return b_.CreateSIToFP(v, target);
  }

  llvm::Value *loadValue(const kir::Value &v) {
    const kir::Buffer &buf = k_.buffers[v.buffer];
    llvm::Value *i = index(v.index);
    if (!v.args.empty())
      i = b_.CreateAdd(i, value(*v.args[0]));
    llvm::Type *st = storageType(buf.dtype);
    llvm::Value *x = b_.CreateLoad(st, b_.CreateInBoundsGEP(st, bufs_[v.buffer], i));
    switch (buf.dtype) {
    case DType::F16: return b_.CreateFPExt(x, b_.getFloatTy());
    case DType::BF16: return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(x, b_.getInt32Ty()), 16), b_.getFloatTy());
    case DType::I32: return b_.CreateSExt(x, b_.getInt64Ty());
    case DType::Bool: return b_.CreateICmpNE(x, b_.getInt8(0));
    default: return x;
    }
  }

  // f32 bits rounded to the nearest even bfloat16 (the upper 16 bits of the result); NaN
  // stays a (quiet) NaN instead of carrying into infinity.
  llvm::Value *bfloat16Bits(llvm::Value *v) {
    llvm::Value *bits = b_.CreateBitCast(v, b_.getInt32Ty());
    llvm::Value *lsb = b_.CreateAnd(b_.CreateLShr(bits, 16), b_.getInt32(1));
    llvm::Value *rounded = b_.CreateAdd(bits, b_.CreateAdd(b_.getInt32(0x7fff), lsb));
    llvm::Value *quiet = b_.CreateOr(bits, b_.getInt32(0x400000));
    return b_.CreateSelect(b_.CreateFCmpUNO(v, v), quiet, rounded);
  }
  // A value of dtype `t` computed in f32: f16 and bf16 results are rounded to their type
  // after every op, as the oracle (which stores each op's result) does; a fused chain of
  // f16 ops or cast(cast(x, f16), f32) must not keep f32 precision.
  // Likewise i32 results (computed in i64) wrap to 32 bits after every op, so that a fused
  // (a + b) < c compares the wrapped sum as the oracle does.
  llvm::Value *roundTo(llvm::Value *v, DType t) {
    if (t == DType::I32 && v->getType()->isIntegerTy(64))
      return b_.CreateSExt(b_.CreateTrunc(v, b_.getInt32Ty()), v->getType());
    if (t == DType::F16)
      return b_.CreateFPExt(b_.CreateFPTrunc(v, b_.getHalfTy()), b_.getFloatTy());
    if (t == DType::BF16)
      return b_.CreateBitCast(b_.CreateAnd(bfloat16Bits(v), b_.getInt32(0xffff0000u)), b_.getFloatTy());
    return v;
  }

  void storeValue(int buffer, sym::ExprRef idx, llvm::Value *v, DType from) {
    DType t = k_.buffers[buffer].dtype;
    v = convert(v, from, t);
    switch (t) {
    case DType::F16: v = b_.CreateFPTrunc(v, b_.getHalfTy()); break;
    case DType::BF16: v = b_.CreateTrunc(b_.CreateLShr(bfloat16Bits(v), 16), b_.getInt16Ty()); break;
    case DType::I32: v = b_.CreateTrunc(v, b_.getInt32Ty()); break;
    case DType::Bool: v = b_.CreateZExt(v, b_.getInt8Ty()); break;
    default: break;
    }
    llvm::Type *st = storageType(t);
    b_.CreateStore(v, b_.CreateInBoundsGEP(st, bufs_[buffer], index(idx)));
  }

  llvm::Value *floatUnary(OpKind k, llvm::Value *x) {
    llvm::Type *f = b_.getFloatTy();
    auto one = llvm::ConstantFP::get(f, 1.0), zero = llvm::ConstantFP::get(f, 0.0);
    auto sigmoid = [&](llvm::Value *v) { return b_.CreateFDiv(one, b_.CreateFAdd(one, math("expf", llvm::Intrinsic::exp, {b_.CreateFNeg(v)}))); };
    switch (k) {
    case OpKind::Neg: return b_.CreateFNeg(x);
    case OpKind::Abs: return call(llvm::Intrinsic::fabs, {x});
    case OpKind::Exp: return math("expf", llvm::Intrinsic::exp, {x});
    case OpKind::Log: return math("logf", llvm::Intrinsic::log, {x});
    case OpKind::Sqrt: return call(llvm::Intrinsic::sqrt, {x});
    case OpKind::Rsqrt: return b_.CreateFDiv(one, call(llvm::Intrinsic::sqrt, {x}));
    case OpKind::Tanh: return libm("tanhf", x);
    case OpKind::Sigmoid: return sigmoid(x);
    case OpKind::Relu: return b_.CreateSelect(b_.CreateFCmpUGT(x, zero), x, zero); // NaN propagates
    case OpKind::Gelu: // x/2 * erfc(-x/sqrt 2): 1 + erf(x/sqrt 2) cancels to 0 for x below about -6
      return b_.CreateFMul(b_.CreateFMul(llvm::ConstantFP::get(f, 0.5), x),
                           libm("erfcf", b_.CreateFMul(x, llvm::ConstantFP::get(f, -M_SQRT1_2))));
    case OpKind::Silu: return b_.CreateFMul(x, sigmoid(x));
    case OpKind::Erf: return libm("erff", x);
    case OpKind::Sin: return math("sinf", llvm::Intrinsic::sin, {x});
    case OpKind::Cos: return math("cosf", llvm::Intrinsic::cos, {x});
    case OpKind::Floor: return call(llvm::Intrinsic::floor, {x});
    case OpKind::Ceil: return call(llvm::Intrinsic::ceil, {x});
    case OpKind::Round: return call(llvm::Intrinsic::roundeven, {x});
    case OpKind::Sign:
      return b_.CreateSelect(b_.CreateFCmpOGT(x, zero), one,
                             b_.CreateSelect(b_.CreateFCmpOLT(x, zero), llvm::ConstantFP::get(f, -1.0),
                                             b_.CreateSelect(b_.CreateFCmpUNO(x, x), x, zero))); // sign(NaN) is NaN
    default: throw InternalError(std::string("no float form of ") + ir::opInfo(k).spelling);
    }
  }

  llvm::Value *intUnary(OpKind k, llvm::Value *x) {
    llvm::Value *zero = llvm::ConstantInt::get(x->getType(), 0);
    switch (k) {
    case OpKind::Neg: return b_.CreateSub(zero, x);
    case OpKind::Abs: return b_.CreateSelect(b_.CreateICmpSLT(x, zero), b_.CreateSub(zero, x), x);
    case OpKind::Relu: // a bool is its own relu (i1 true is -1 when signed)
      return x->getType()->isIntegerTy(1) ? x : b_.CreateSelect(b_.CreateICmpSGT(x, zero), x, zero);
    case OpKind::Sign:
      return b_.CreateSub(b_.CreateZExt(b_.CreateICmpSGT(x, zero), x->getType()), b_.CreateZExt(b_.CreateICmpSLT(x, zero), x->getType()));
    case OpKind::Not: return b_.CreateICmpEQ(x, zero); // x == 0, for bools and integers
    default: throw InternalError(std::string("no integer form of ") + ir::opInfo(k).spelling);
    }
  }

  // a ** e on i64, exact with wrapping (square and multiply over e's 63 bits); a negative
  // exponent gives the truncated 1 / a^-e: 1 for a = 1, +-1 for a = -1, else 0.
  llvm::Value *intPow(llvm::Value *a, llvm::Value *e) {
    llvm::Type *t = a->getType();
    llvm::Value *one = llvm::ConstantInt::get(t, 1), *zero = llvm::ConstantInt::get(t, 0);
    llvm::Value *p = one, *base = a;
    for (int bit = 0; bit < 63; ++bit) {
      llvm::Value *set = b_.CreateICmpNE(b_.CreateAnd(b_.CreateLShr(e, bit), one), zero);
      p = b_.CreateSelect(set, b_.CreateMul(p, base), p);
      base = b_.CreateMul(base, base);
    }
    llvm::Value *odd = b_.CreateICmpNE(b_.CreateAnd(e, one), zero);
    llvm::Value *minusOne = llvm::ConstantInt::get(t, -1, true);
    llvm::Value *negative = b_.CreateSelect(b_.CreateICmpEQ(a, one), one,
                                            b_.CreateSelect(b_.CreateICmpEQ(a, minusOne), b_.CreateSelect(odd, minusOne, one), zero));
    return b_.CreateSelect(b_.CreateICmpSLT(e, zero), negative, p);
  }

  llvm::Value *binaryOp(OpKind k, llvm::Value *a, llvm::Value *c, bool fp) {
    if (fp) {
      switch (k) {
      case OpKind::Add: return b_.CreateFAdd(a, c);
      case OpKind::Sub: return b_.CreateFSub(a, c);
      case OpKind::Mul: return b_.CreateFMul(a, c);
      case OpKind::Div: return b_.CreateFDiv(a, c);
      case OpKind::Mod: {
        llvm::Value *r = b_.CreateFRem(a, c);
        auto zero = llvm::ConstantFP::get(a->getType(), 0.0);
        llvm::Value *fix = b_.CreateAnd(b_.CreateFCmpUNE(r, zero), b_.CreateXor(b_.CreateFCmpOLT(r, zero), b_.CreateFCmpOLT(c, zero)));
        return b_.CreateSelect(fix, b_.CreateFAdd(r, c), r);
      }
      case OpKind::Pow: return math("powf", llvm::Intrinsic::pow, {a, c});
      case OpKind::Maximum: return call(llvm::Intrinsic::maximum, {a, c});
      case OpKind::Minimum: return call(llvm::Intrinsic::minimum, {a, c});
      case OpKind::Eq: return b_.CreateFCmpOEQ(a, c);
      case OpKind::Ne: return b_.CreateFCmpUNE(a, c);
      case OpKind::Lt: return b_.CreateFCmpOLT(a, c);
      case OpKind::Le: return b_.CreateFCmpOLE(a, c);
      case OpKind::Gt: return b_.CreateFCmpOGT(a, c);
      case OpKind::Ge: return b_.CreateFCmpOGE(a, c);
      default: break;
      }
    } else {
      llvm::Value *zero = llvm::ConstantInt::get(a->getType(), 0);
      if (a->getType()->isIntegerTy(1)) { // bools: false < true (i1 is signed: true is -1)
        switch (k) {
        case OpKind::Add: case OpKind::Maximum: return b_.CreateOr(a, c);
        case OpKind::Mul: case OpKind::Minimum: return b_.CreateAnd(a, c);
        case OpKind::Sub: return b_.CreateXor(a, c);
        case OpKind::Lt: return b_.CreateICmpULT(a, c);
        case OpKind::Le: return b_.CreateICmpULE(a, c);
        case OpKind::Gt: return b_.CreateICmpUGT(a, c);
        case OpKind::Ge: return b_.CreateICmpUGE(a, c);
        default: break;
        }
      }
      // Divisors 0 and -1 are answered apart (x / 0 = x % 0 = 0, x / -1 = -x wrapping,
      // x % -1 = 0), so that sdiv never traps on them (INT64_MIN / -1 raises SIGFPE).
      llvm::Value *minusOne = llvm::ConstantInt::get(a->getType(), -1, true);
      auto special = [&](llvm::Value *d) { return b_.CreateOr(b_.CreateICmpEQ(d, zero), b_.CreateICmpEQ(d, minusOne)); };
      auto safe = [&](llvm::Value *d) { return b_.CreateSelect(special(d), llvm::ConstantInt::get(d->getType(), 1), d); };
      switch (k) {
      case OpKind::Add: return b_.CreateAdd(a, c);
      case OpKind::Sub: return b_.CreateSub(a, c);
      case OpKind::Mul: return b_.CreateMul(a, c);
      case OpKind::Div: // floor division, as the oracle (docs/semantics.md)
        return b_.CreateSelect(b_.CreateICmpEQ(c, zero), zero,
                               b_.CreateSelect(b_.CreateICmpEQ(c, minusOne), b_.CreateSub(zero, a), floorDivMod(a, safe(c), false)));
      case OpKind::Mod: return b_.CreateSelect(special(c), zero, floorDivMod(a, safe(c), true));
      case OpKind::Maximum: return b_.CreateSelect(b_.CreateICmpSGT(a, c), a, c);
      case OpKind::Minimum: return b_.CreateSelect(b_.CreateICmpSLT(a, c), a, c);
      case OpKind::Pow: return intPow(a, c);
      case OpKind::Eq: return b_.CreateICmpEQ(a, c);
      case OpKind::Ne: return b_.CreateICmpNE(a, c);
      case OpKind::Lt: return b_.CreateICmpSLT(a, c);
      case OpKind::Le: return b_.CreateICmpSLE(a, c);
      case OpKind::Gt: return b_.CreateICmpSGT(a, c);
      case OpKind::Ge: return b_.CreateICmpSGE(a, c);
      case OpKind::And: return b_.CreateAnd(a, c);
      case OpKind::Or: return b_.CreateOr(a, c);
      default: break;
      }
    }
    throw InternalError(std::string("no scalar form of ") + ir::opInfo(k).spelling);
  }

  llvm::Value *value(const kir::Value &v) {
    switch (v.kind) {
    case kir::Value::Kind::Const:
      if (isFloat(v.dtype))
        return roundTo(llvm::ConstantFP::get(b_.getFloatTy(), v.number), v.dtype);
      if (v.dtype == DType::Bool)
        return b_.getInt1(v.number != 0);
      // saturated as a cast (the largest i64, a min reduction's start, is 2^63 as a double)
      return b_.getInt64(saturatingInt(v.number, v.dtype));
    case kir::Value::Kind::Load: return loadValue(v);
    case kir::Value::Kind::Index: return index(v.index);
    case kir::Value::Kind::Local: return b_.CreateLoad(computeType(v.dtype), locals_.at(v.local));
    case kir::Value::Kind::Unary: {
      const kir::Value &a = *v.args[0];
      llvm::Value *x = value(a);
      return roundTo(isFloat(a.dtype) ? floatUnary(v.op, x) : intUnary(v.op, x), v.dtype);
    }
    case kir::Value::Kind::Binary: {
      const kir::Value &a = *v.args[0], &c = *v.args[1];
      // Both sides compute in the wider of their types.
      DType t = isFloat(a.dtype) || isFloat(c.dtype) ? DType::F32 : (a.dtype == DType::Bool && c.dtype == DType::Bool ? DType::Bool : DType::I64);
      return roundTo(binaryOp(v.op, convert(value(a), a.dtype, t), convert(value(c), c.dtype, t), isFloat(t)), v.dtype);
    }
    case kir::Value::Kind::Select: {
      llvm::Value *cond = convert(value(*v.args[0]), v.args[0]->dtype, DType::Bool);
      return b_.CreateSelect(cond, convert(value(*v.args[1]), v.args[1]->dtype, v.dtype),
                             convert(value(*v.args[2]), v.args[2]->dtype, v.dtype));
    }
    case kir::Value::Kind::Cast: {
      llvm::Value *x = convert(value(*v.args[0]), v.args[0]->dtype, v.dtype);
      return v.args[0]->dtype == v.dtype ? x : roundTo(x, v.dtype);
    }
    }
    return nullptr;
  }

  // ---- statements ----
  void stmt(const kir::Stmt &s) {
    switch (s.kind) {
    case kir::Stmt::Kind::Block:
      for (const auto &c : s.body)
        stmt(*c);
      return;
    case kir::Stmt::Kind::Store:
      if (mapping_ == kir::GpuMapping::Warps && !laneSplit_) // every lane holds the value: lane 0 stores it
        return onlyIf(b_.CreateICmpEQ(lane_, b_.getInt64(0)), [&] { storeValue(s.buffer, s.index, value(*s.value), s.value->dtype); });
      return storeValue(s.buffer, s.index, value(*s.value), s.value->dtype);
    case kir::Stmt::Kind::Let: {
      llvm::AllocaInst *slot = entryAlloca(computeType(s.value->dtype), s.var);
      locals_[s.var] = slot;
      b_.CreateStore(value(*s.value), slot);
      return;
    }
    case kir::Stmt::Kind::Assign: b_.CreateStore(value(*s.value), locals_.at(s.var)); return;
    case kir::Stmt::Kind::If:
      return onlyIf(convert(value(*s.value), s.value->dtype, DType::Bool), [&] {
        for (const auto &c : s.body)
          stmt(*c);
      });
    case kir::Stmt::Kind::Gemm:
      if (mapping_ == kir::GpuMapping::Blocks)
        return tiledGemm(s.gemm);
      if (mapping_ == kir::GpuMapping::Warps)
        throw InternalError("kernel " + k_.name + " has a GEMM among reductions");
      return target_.gpuMapping() ? gemmLoops(s.gemm) : gemm(s.gemm);
    case kir::Stmt::Kind::For: {
      // The parallel loop runs the chunk [begin, end) the runtime hands this call (on the
      // GPU: this thread's, warp's or block's share of the grid).
      bool chunked = &s == k_.parallelLoop();
      if (chunked && target_.gpuMapping() && mapping_ != kir::GpuMapping::Blocks)
        return collapsedParallelLoop(s);
      llvm::Value *start = chunked ? begin_ : b_.getInt64(0);
      llvm::Value *extent = chunked && !target_.gpuMapping() ? end_ : index(s.extent);
      llvm::Value *step = chunked ? step_ : b_.getInt64(1);
      // A warp's lanes split its reductions and its independent (vectorizable) loops.
      bool splitLanes = mapping_ == kir::GpuMapping::Warps && !laneSplit_ && !chunked &&
                        (s.schedule == kir::Stmt::Schedule::Reduce || s.schedule == kir::Stmt::Schedule::Vectorize);
      if (splitLanes)
        start = lane_, step = b_.getInt64(32), laneSplit_ = true;
      llvm::BranchInst *latch = forLoop(s.var, start, extent, step, [&](llvm::Value *i) {
        llvm::Value *saved = vars_.count(s.var) ? vars_[s.var] : nullptr;
        vars_[s.var] = i;
        for (const auto &c : s.body)
          stmt(*c);
        vars_[s.var] = saved;
      });
      if (splitLanes) {
        laneSplit_ = false;
        for (const kir::Reduction &r : s.reductions)
          combineAcrossLanes(r);
      }
      bool straight = std::none_of(s.body.begin(), s.body.end(), [](const kir::StmtPtr &c) { return c->kind == kir::Stmt::Kind::For; });
      if (s.schedule == kir::Stmt::Schedule::Vectorize || (s.schedule == kir::Stmt::Schedule::Parallel && straight)) {
        llvm::Metadata *enable[] = {llvm::MDString::get(ctx_, "llvm.loop.vectorize.enable"),
                                    llvm::ConstantAsMetadata::get(b_.getTrue())};
        llvm::Metadata *ops[] = {nullptr, llvm::MDNode::get(ctx_, enable)};
        llvm::MDNode *loopId = llvm::MDNode::getDistinct(ctx_, ops);
        loopId->replaceOperandWith(0, loopId);
        latch->setMetadata(llvm::LLVMContext::MD_loop, loopId);
      }
      return;
    }
    }
  }

  // for (i = start; i < end; i += step) body(i); returns the latch branch and leaves the
  // builder after the loop.
  template <class Body> llvm::BranchInst *forLoop(const std::string &name, llvm::Value *start, llvm::Value *end, int64_t step, Body body) {
    return forLoop(name, start, end, b_.getInt64(step), body);
  }
  template <class Body> llvm::BranchInst *forLoop(const std::string &name, llvm::Value *start, llvm::Value *end, llvm::Value *step, Body body) {
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

  // The GEMM as plain loops: one dot product per element of the row block.
  void gemmLoops(const kir::Gemm &g) {
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

  llvm::AllocaInst *entryAlloca(llvm::Type *t, const std::string &name) {
    llvm::IRBuilder<> atEntry(entry_, entry_->begin());
    return atEntry.CreateAlloca(t, nullptr, name);
  }

  // The GEMM schedule: blocks of kDepthBlock along k, panels of two vectors of columns
  // (packed, so the panel stays in L1), and a micro-kernel of kRows x 2 vector accumulators that
  // broadcasts one A element per row and multiplies it into two B vectors with FMAs.
  // Column tails use masked loads and stores; row tails compute on a repeated valid row
  // and skip its stores.
  void gemm(const kir::Gemm &g) {
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

  // ---- GPU mapping (NVPTX and the simulator) ----
  llvm::Value *sreg(rt::SimRegister r) {
    static const llvm::Intrinsic::ID ids[] = {
        llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x,   llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x,
        llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x,
        llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_y, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_y};
    llvm::Value *v = target_.nvptx() ? b_.CreateIntrinsic(ids[r], {}, {})
                                                           : b_.CreateCall(simHook("dnnc_sim_sreg", b_.getInt32Ty(), {b_.getInt32Ty()}),
                                                                           {b_.getInt32(r)});
    return b_.CreateZExt(v, b_.getInt64Ty());
  }
  llvm::FunctionCallee simHook(const char *name, llvm::Type *ret, std::vector<llvm::Type *> args) {
    llvm::FunctionCallee f = m_.getOrInsertFunction(name, llvm::FunctionType::get(ret, args, false));
    if (auto *fn = llvm::dyn_cast<llvm::Function>(f.getCallee()))
      fn->addFnAttr(llvm::Attribute::Convergent);
    return f;
  }
  void barrier() {
    if (target_.nvptx())
      b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
    else
      b_.CreateCall(simHook("dnnc_sim_barrier", b_.getVoidTy(), {}));
  }
  // __shfl_xor_sync over the full warp, for any scalar the kernels compute in.
  llvm::Value *shuffleXor(llvm::Value *v, unsigned laneMask) {
    llvm::Type *i32 = b_.getInt32Ty(), *t = v->getType();
    auto word = [&](llvm::Value *x) -> llvm::Value * {
      if (target_.nvptx())
        return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, {},
                                  {b_.getInt32(0xffffffffu), x, b_.getInt32(laneMask), b_.getInt32(31)});
      return b_.CreateCall(simHook("dnnc_sim_shfl_bfly", i32, {i32, i32}), {x, b_.getInt32(laneMask)});
    };
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
  void combineAcrossLanes(const kir::Reduction &r) {
    llvm::AllocaInst *slot = locals_.at(r.local), *atSlot = r.argLocal.empty() ? nullptr : locals_.at(r.argLocal);
    bool fp = slot->getAllocatedType()->isFloatTy();
    for (unsigned mask = 16; mask >= 1; mask /= 2) {
      llvm::Value *mine = b_.CreateLoad(slot->getAllocatedType(), slot), *theirs = shuffleXor(mine, mask);
      if (!atSlot) {
        b_.CreateStore(binaryOp(r.combine, mine, theirs, fp), slot);
        continue;
      }
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
  template <class Body> void onlyIf(llvm::Value *cond, Body body) {
    auto *then = llvm::BasicBlock::Create(ctx_, "then", fn_), *done = llvm::BasicBlock::Create(ctx_, "endif", fn_);
    b_.CreateCondBr(cond, then, done);
    b_.SetInsertPoint(then);
    body();
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }

  // Sets up the kernel's share of the grid (see kir::GpuMapping) and emits its body.
  void gpuBody() {
    mapping_ = kir::gpuMapping(k_);
    llvm::Value *tid = sreg(rt::kSimTidX), *width = sreg(rt::kSimNtidX);
    llvm::Value *block = sreg(rt::kSimCtaidX), *blocks = sreg(rt::kSimNctaidX);
    llvm::Value *thread = b_.CreateAdd(b_.CreateMul(block, width), tid), *threads = b_.CreateMul(width, blocks);
    switch (mapping_) {
    case kir::GpuMapping::Threads: begin_ = thread, step_ = threads; break;
    case kir::GpuMapping::Warps:
      lane_ = b_.CreateAnd(tid, b_.getInt64(31));
      begin_ = b_.CreateLShr(thread, 5), step_ = b_.CreateLShr(threads, 5);
      break;
    case kir::GpuMapping::Blocks: begin_ = block, step_ = blocks; break;
    }
    if (k_.parallelLoop())
      stmt(*k_.body);
    else if (std::vector<const kir::Stmt *> loops = kir::gpuGridLoops(k_); !loops.empty())
      for (const kir::Stmt *loop : loops) // independent: no barrier between them
        collapsedParallelLoop(*loop);
    else // the first thread (or warp) does all of it
      onlyIf(b_.CreateICmpEQ(begin_, b_.getInt64(0)), [&] { stmt(*k_.body); });
  }

  // kir::gpuLoopNest of grid loop `s` as one grid-stride loop over the product of its extents.
  void collapsedParallelLoop(const kir::Stmt &s) {
    std::vector<const kir::Stmt *> chain = kir::gpuLoopNest(s, mapping_);
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

  // A zero-filled float array in the block's shared memory (a plain global for the
  // simulator, which runs one block at a time).
  llvm::Value *sharedArray(const std::string &name, int64_t elements) {
    unsigned space = target_.nvptx() ? 3 : 0;
    auto *type = llvm::ArrayType::get(b_.getFloatTy(), static_cast<uint64_t>(elements));
    llvm::Constant *init = space == 3 ? llvm::UndefValue::get(type) : llvm::Constant::getNullValue(type);
    auto *g = new llvm::GlobalVariable(m_, type, false, llvm::GlobalValue::InternalLinkage, init, k_.name + "." + name, nullptr,
                                       llvm::GlobalValue::NotThreadLocal, space);
    g->setAlignment(llvm::Align(16));
    return g;
  }

  // The GEMM by one thread block: output tiles of kGpuGemmTile x kGpuGemmTile (the block's
  // rows, columns strided over the grid's y), each thread accumulating 4 x 4 of them in
  // registers from kGpuGemmDepth-deep stages of A and B staged in shared memory. Rows of a
  // stage are padded by one float so that neither the staging stores nor the reads conflict
  // on banks. Out-of-range elements stage as zeros; out-of-range outputs are not stored.
  void tiledGemm(const kir::Gemm &g) {
    constexpr int64_t tile = kir::kGpuGemmTile, depthStage = kir::kGpuGemmDepth, pitch = tile + 1;
    constexpr int64_t threads = kir::kGpuBlockThreads, perThread = tile / 16; // a 16 x 16 grid of threads
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

  llvm::Module &m_;
  llvm::LLVMContext &ctx_;
  llvm::IRBuilder<> b_;
  const kir::Kernel &k_;
  const Target &target_;
  unsigned vectorWidth_; // f32 lanes of the widest vector the target has
  llvm::Function *fn_ = nullptr;
  llvm::Value *begin_ = nullptr, *end_ = nullptr, *step_ = nullptr; // the parallel loop's range
  llvm::BasicBlock *entry_ = nullptr;
  kir::GpuMapping mapping_ = kir::GpuMapping::Threads; // on GPU targets
  llvm::Value *lane_ = nullptr; // Warps: the thread's lane
  bool laneSplit_ = false;      // Warps: inside a loop whose iterations the lanes split
  int gemms_ = 0;               // Blocks: GEMMs emitted (names their shared arrays)
  std::vector<llvm::Value *> bufs_;
  std::map<std::string, llvm::Value *> vars_;
  std::map<std::string, llvm::AllocaInst *> locals_;
};

// libmvec's name for the `lanes`-wide variant of `fn` for ISA `isa` (b: SSE, d: AVX2,
// e: AVX-512), kept alive for the TargetLibraryInfo that refers to it.
llvm::StringRef vectorName(const char *fn, char isa, unsigned lanes) {
  static std::set<std::string> names;
  return *names.insert(fmt::format("_ZGV{}N{}v_{}", isa, lanes, fn)).first;
}

} // namespace

void emitKernel(llvm::Module &m, const kir::Kernel &k, const Target &target) { KernelEmitter(m, k, target).emit(); }

void optimize(llvm::Module &m, llvm::TargetMachine &tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  // On x86-64 the vectorizer calls glibc's vector math (libmvec) for exp, log, sin, cos,
  // pow, and here also erf, erfc and tanh (GELU, tanh), instead of one libm call per element.
  llvm::TargetLibraryInfoImpl libraryInfo(tm.getTargetTriple());
  if (tm.getTargetTriple().isX86() && tm.getTargetTriple().isOSLinux()) {
    libraryInfo.addVectorizableFunctionsFromVecLib(llvm::TargetLibraryInfoImpl::LIBMVEC_X86, tm.getTargetTriple());
    std::vector<llvm::VecDesc> more;
    for (const char *fn : {"erff", "erfcf", "tanhf"}) {
      more.emplace_back(fn, vectorName(fn, 'b', 4), llvm::ElementCount::getFixed(4), false, "_ZGV_LLVM_N4v");
      more.emplace_back(fn, vectorName(fn, 'd', 8), llvm::ElementCount::getFixed(8), false, "_ZGV_LLVM_N8v");
      more.emplace_back(fn, vectorName(fn, 'e', 16), llvm::ElementCount::getFixed(16), false, "_ZGV_LLVM_N16v");
    }
    libraryInfo.addVectorizableFunctions(more);
  }
  fam.registerPass([&] { return llvm::TargetLibraryAnalysis(libraryInfo); });
  llvm::PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, mam);
}

std::string errorText(llvm::Error e) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << e;
  return s;
}

} // namespace dnnc::backend
