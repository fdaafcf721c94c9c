// Kernel IR to LLVM IR, the part every target shares (see KernelEmitter.h): loops with
// phis, locals as allocas that mem2reg promotes, and the scalar semantics of
// ir/graph/ScalarOps.def, switched over with no default.
#include "backend/llvm/KernelEmitter.h"

#include "base/Error.h"
#include "ir/graph/OpRegistry.h"

#include <llvm/ADT/StringExtras.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/SHA256.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <fmt/format.h>

#include <array>
#include <mutex>


namespace dnnc::backend {

using ir::BinaryOp;
using ir::OpKind;
using ir::UnaryOp;

namespace {
// The scalar op a kernel value names (kir::Value::op), which lowering only ever sets to one.
template <class ScalarOp> ScalarOp scalar(std::optional<ScalarOp> op, OpKind k) {
  if (!op)
    throw InternalError(std::string("no scalar form of ") + ir::opInfo(k).spelling);
  return *op;
}
} // namespace

void KernelEmitter::emit() {
  createFunction();
  // Local arrays live in the frame of each running instance (a CPU task, a GPU thread).
  for (size_t i = k_.argumentBuffers(); i < k_.buffers.size(); ++i) {
    const kir::Buffer &b = k_.buffers[i];
    int64_t elements = 1;
    for (sym::ExprRef d : b.dims)
      elements *= d->asConst().value();
    bufs_.push_back(entryAlloca(llvm::ArrayType::get(storageType(b.dtype), static_cast<uint64_t>(elements)), b.name));
  }
  emitBody();
  b_.CreateRetVoid();
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyFunction(*fn_, &os))
    throw InternalError("LLVM rejected kernel " + k_.name + ": " + err);
}

void KernelEmitter::beginFunction(const std::vector<llvm::Type *> &params) {
  fn_ = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), params, false), llvm::Function::ExternalLinkage,
                               k_.name, m_);
  fn_->addFnAttr(llvm::Attribute::NoUnwind);
  entry_ = llvm::BasicBlock::Create(ctx_, "entry", fn_);
  b_.SetInsertPoint(entry_);
}

void KernelEmitter::createHostFunction() {
  auto *ptr = llvm::PointerType::get(ctx_, 0);
  auto *i64 = b_.getInt64Ty();
  auto names = k_.dims();
  beginFunction({ptr, ptr, i64, i64});
  llvm::Value *buffers = fn_->getArg(0), *dims = fn_->getArg(1);
  for (size_t i = 0; i < k_.argumentBuffers(); ++i)
    bufs_.push_back(b_.CreateLoad(ptr, b_.CreateConstGEP1_64(ptr, buffers, i), k_.buffers[i].name));
  for (size_t i = 0; i < names.size(); ++i)
    vars_[names[i]] = b_.CreateLoad(i64, b_.CreateConstGEP1_64(i64, dims, i), names[i]);
}

llvm::Type *KernelEmitter::computeType(DType t) {
  if (isFloat(t))
    return b_.getFloatTy();
  return t == DType::Bool ? b_.getInt1Ty() : b_.getInt64Ty();
}
llvm::Type *KernelEmitter::storageType(DType t) {
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

llvm::Value *KernelEmitter::call(llvm::Intrinsic::ID id, std::vector<llvm::Value *> args) {
  return b_.CreateIntrinsic(id, {args[0]->getType()}, args);
}

llvm::Value *KernelEmitter::math(MathFn fn, std::vector<llvm::Value *> args) {
  auto *vector = llvm::dyn_cast<llvm::FixedVectorType>(args[0]->getType());
  return b_.CreateCall(vectorMathFunction(m_, fn, vector ? vector->getNumElements() : 0), args);
}
llvm::Value *KernelEmitter::callExternal(const std::string &name, std::vector<llvm::Value *> args) {
  std::vector<llvm::Type *> types(args.size(), args[0]->getType());
  llvm::FunctionCallee f = m_.getOrInsertFunction(name, llvm::FunctionType::get(args[0]->getType(), types, false));
  return b_.CreateCall(f, args);
}

// ---- indices (i64) ----
llvm::Value *KernelEmitter::floorDivMod(llvm::Value *a, llvm::Value *d, bool wantMod) {
  llvm::Value *q = b_.CreateSDiv(a, d), *r = b_.CreateSRem(a, d);
  llvm::Value *adjust = b_.CreateAnd(b_.CreateICmpNE(r, b_.getInt64(0)),
                                     b_.CreateICmpSLT(b_.CreateXor(r, d), b_.getInt64(0)));
  return wantMod ? b_.CreateSelect(adjust, b_.CreateAdd(r, d), r) : b_.CreateSub(q, b_.CreateZExt(adjust, b_.getInt64Ty()));
}
llvm::Value *KernelEmitter::index(sym::ExprRef e) {
  llvm::Value *sum = b_.getInt64(e->constant());
  for (const sym::Term &t : e->terms()) {
    llvm::Value *p = b_.getInt64(t.coef);
    for (const sym::Atom *a : t.factors)
      p = b_.CreateMul(p, atom(a));
    sum = b_.CreateAdd(sum, p);
  }
  return sum;
}
llvm::Value *KernelEmitter::atom(const sym::Atom *a) {
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
llvm::Value *KernelEmitter::convert(llvm::Value *v, DType from, DType to) {
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

llvm::Value *KernelEmitter::loadValue(const kir::Value &v) {
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
llvm::Value *KernelEmitter::bfloat16Bits(llvm::Value *v) {
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
llvm::Value *KernelEmitter::roundTo(llvm::Value *v, DType t) {
  if (t == DType::I32 && v->getType()->isIntegerTy(64))
    return b_.CreateSExt(b_.CreateTrunc(v, b_.getInt32Ty()), v->getType());
  if (t == DType::F16)
    return b_.CreateFPExt(b_.CreateFPTrunc(v, b_.getHalfTy()), b_.getFloatTy());
  if (t == DType::BF16)
    return b_.CreateBitCast(b_.CreateAnd(bfloat16Bits(v), b_.getInt32(0xffff0000u)), b_.getFloatTy());
  return v;
}

void KernelEmitter::storeValue(int buffer, sym::ExprRef idx, llvm::Value *v, DType from) {
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

llvm::Value *KernelEmitter::floatUnary(UnaryOp k, llvm::Value *x) {
  llvm::Type *f = x->getType(); // f32, or a vector of f32 (a CPU conv's epilogue on its sums)
  auto one = llvm::ConstantFP::get(f, 1.0), zero = llvm::ConstantFP::get(f, 0.0);
  // 1/(1 + e^-x) for x >= 0, e^x/(1 + e^x) below: e^-x would overflow for x < -88 where
  // the result is still representable.
  auto sigmoid = [&](llvm::Value *v) {
    llvm::Value *e = math(MathFn::Exp, {b_.CreateFNeg(call(llvm::Intrinsic::fabs, {v}))});
    llvm::Value *s = b_.CreateFDiv(one, b_.CreateFAdd(one, e));
    return b_.CreateSelect(b_.CreateFCmpOLT(v, zero), b_.CreateFMul(e, s), s);
  };
  switch (k) {
  case UnaryOp::Neg: return b_.CreateFNeg(x);
  case UnaryOp::Abs: return call(llvm::Intrinsic::fabs, {x});
  case UnaryOp::Exp: return math(MathFn::Exp, {x});
  case UnaryOp::Log: return math(MathFn::Log, {x});
  case UnaryOp::Sqrt: return call(llvm::Intrinsic::sqrt, {x});
  case UnaryOp::Rsqrt: return b_.CreateFDiv(one, call(llvm::Intrinsic::sqrt, {x}));
  case UnaryOp::Tanh: return math(MathFn::Tanh, {x});
  case UnaryOp::Sigmoid: return sigmoid(x);
  case UnaryOp::Relu: return b_.CreateSelect(b_.CreateFCmpUGT(x, zero), x, zero); // NaN propagates
  case UnaryOp::Gelu: return math(MathFn::Gelu, {x});
  case UnaryOp::Silu: return math(MathFn::Silu, {x});
  case UnaryOp::Erf: return math(MathFn::Erf, {x});
  case UnaryOp::Sin: return math(MathFn::Sin, {x});
  case UnaryOp::Cos: return math(MathFn::Cos, {x});
  case UnaryOp::Floor: return call(llvm::Intrinsic::floor, {x});
  case UnaryOp::Ceil: return call(llvm::Intrinsic::ceil, {x});
  case UnaryOp::Round: return call(llvm::Intrinsic::roundeven, {x});
  case UnaryOp::Sign:
    return b_.CreateSelect(b_.CreateFCmpOGT(x, zero), one,
                           b_.CreateSelect(b_.CreateFCmpOLT(x, zero), llvm::ConstantFP::get(f, -1.0),
                                           b_.CreateSelect(b_.CreateFCmpUNO(x, x), x, zero))); // sign(NaN) is NaN
  case UnaryOp::Not: throw InternalError("no float form of not");
  }
  ir::unreachableScalarOp();
}

llvm::Value *KernelEmitter::intUnary(UnaryOp k, llvm::Value *x) {
  llvm::Value *zero = llvm::ConstantInt::get(x->getType(), 0);
  switch (k) {
  case UnaryOp::Neg: return b_.CreateSub(zero, x);
  case UnaryOp::Abs: return b_.CreateSelect(b_.CreateICmpSLT(x, zero), b_.CreateSub(zero, x), x);
  case UnaryOp::Relu: // a bool is its own relu (i1 true is -1 when signed)
    return x->getType()->isIntegerTy(1) ? x : b_.CreateSelect(b_.CreateICmpSGT(x, zero), x, zero);
  case UnaryOp::Sign:
    return b_.CreateSub(b_.CreateZExt(b_.CreateICmpSGT(x, zero), x->getType()), b_.CreateZExt(b_.CreateICmpSLT(x, zero), x->getType()));
  case UnaryOp::Not: return b_.CreateICmpEQ(x, zero); // x == 0, for bools and integers
  case UnaryOp::Exp: case UnaryOp::Log: case UnaryOp::Sqrt: case UnaryOp::Rsqrt: case UnaryOp::Tanh:
  case UnaryOp::Sigmoid: case UnaryOp::Gelu: case UnaryOp::Silu: case UnaryOp::Erf: case UnaryOp::Sin:
  case UnaryOp::Cos: case UnaryOp::Floor: case UnaryOp::Ceil: case UnaryOp::Round:
    throw InternalError("no integer form of a float function");
  }
  ir::unreachableScalarOp();
}

// a ** e on i64, exact with wrapping (square and multiply over e's 63 bits); a negative
// exponent gives the truncated 1 / a^-e: 1 for a = 1, +-1 for a = -1, else 0.
llvm::Value *KernelEmitter::intPow(llvm::Value *a, llvm::Value *e) {
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

llvm::Value *KernelEmitter::floatBinary(BinaryOp k, llvm::Value *a, llvm::Value *c) {
  switch (k) {
  case BinaryOp::Add: return b_.CreateFAdd(a, c);
  case BinaryOp::Sub: return b_.CreateFSub(a, c);
  case BinaryOp::Mul: return b_.CreateFMul(a, c);
  case BinaryOp::Div: return b_.CreateFDiv(a, c);
  case BinaryOp::Mod: {
    llvm::Value *r = b_.CreateFRem(a, c);
    auto zero = llvm::ConstantFP::get(a->getType(), 0.0);
    llvm::Value *fix = b_.CreateAnd(b_.CreateFCmpUNE(r, zero), b_.CreateXor(b_.CreateFCmpOLT(r, zero), b_.CreateFCmpOLT(c, zero)));
    // (ir::floorMod: a zero remainder takes the divisor's sign, as np.mod's does)
    llvm::Value *signedZero = call(llvm::Intrinsic::copysign, {zero, c});
    return b_.CreateSelect(b_.CreateFCmpOEQ(r, zero), signedZero, b_.CreateSelect(fix, b_.CreateFAdd(r, c), r));
  }
  case BinaryOp::Pow: return math(MathFn::Pow, {a, c});
  case BinaryOp::Maximum: return call(llvm::Intrinsic::maximum, {a, c});
  case BinaryOp::Minimum: return call(llvm::Intrinsic::minimum, {a, c});
  case BinaryOp::Eq: return b_.CreateFCmpOEQ(a, c);
  case BinaryOp::Ne: return b_.CreateFCmpUNE(a, c);
  case BinaryOp::Lt: return b_.CreateFCmpOLT(a, c);
  case BinaryOp::Le: return b_.CreateFCmpOLE(a, c);
  case BinaryOp::Gt: return b_.CreateFCmpOGT(a, c);
  case BinaryOp::Ge: return b_.CreateFCmpOGE(a, c);
  case BinaryOp::And: case BinaryOp::Or: throw InternalError("no float form of and, or");
  }
  ir::unreachableScalarOp();
}

// Bools (i1) where they differ from integers: false < true (i1 is signed: true is -1).
// Null where the integer form holds.
llvm::Value *KernelEmitter::boolBinary(BinaryOp k, llvm::Value *a, llvm::Value *c) {
  switch (k) {
  case BinaryOp::Add: case BinaryOp::Maximum: return b_.CreateOr(a, c);
  case BinaryOp::Mul: case BinaryOp::Minimum: return b_.CreateAnd(a, c);
  case BinaryOp::Sub: return b_.CreateXor(a, c);
  case BinaryOp::Lt: return b_.CreateICmpULT(a, c);
  case BinaryOp::Le: return b_.CreateICmpULE(a, c);
  case BinaryOp::Gt: return b_.CreateICmpUGT(a, c);
  case BinaryOp::Ge: return b_.CreateICmpUGE(a, c);
  case BinaryOp::Div: case BinaryOp::Mod: case BinaryOp::Pow: case BinaryOp::Eq: case BinaryOp::Ne: case BinaryOp::And:
  case BinaryOp::Or: return nullptr;
  }
  ir::unreachableScalarOp();
}

llvm::Value *KernelEmitter::intBinary(BinaryOp k, llvm::Value *a, llvm::Value *c) {
  llvm::Value *zero = llvm::ConstantInt::get(a->getType(), 0);
  // Divisors 0 and -1 are answered apart (x / 0 = x % 0 = 0, x / -1 = -x wrapping,
  // x % -1 = 0), so that sdiv never traps on them (INT64_MIN / -1 raises SIGFPE).
  llvm::Value *minusOne = llvm::ConstantInt::get(a->getType(), -1, true);
  auto special = [&](llvm::Value *d) { return b_.CreateOr(b_.CreateICmpEQ(d, zero), b_.CreateICmpEQ(d, minusOne)); };
  auto safe = [&](llvm::Value *d) { return b_.CreateSelect(special(d), llvm::ConstantInt::get(d->getType(), 1), d); };
  switch (k) {
  case BinaryOp::Add: return b_.CreateAdd(a, c);
  case BinaryOp::Sub: return b_.CreateSub(a, c);
  case BinaryOp::Mul: return b_.CreateMul(a, c);
  case BinaryOp::Div: // floor division, as the oracle (docs/semantics.md)
    return b_.CreateSelect(b_.CreateICmpEQ(c, zero), zero,
                           b_.CreateSelect(b_.CreateICmpEQ(c, minusOne), b_.CreateSub(zero, a), floorDivMod(a, safe(c), false)));
  case BinaryOp::Mod: return b_.CreateSelect(special(c), zero, floorDivMod(a, safe(c), true));
  case BinaryOp::Maximum: return b_.CreateSelect(b_.CreateICmpSGT(a, c), a, c);
  case BinaryOp::Minimum: return b_.CreateSelect(b_.CreateICmpSLT(a, c), a, c);
  case BinaryOp::Pow: return intPow(a, c);
  case BinaryOp::Eq: return b_.CreateICmpEQ(a, c);
  case BinaryOp::Ne: return b_.CreateICmpNE(a, c);
  case BinaryOp::Lt: return b_.CreateICmpSLT(a, c);
  case BinaryOp::Le: return b_.CreateICmpSLE(a, c);
  case BinaryOp::Gt: return b_.CreateICmpSGT(a, c);
  case BinaryOp::Ge: return b_.CreateICmpSGE(a, c);
  case BinaryOp::And: return b_.CreateAnd(a, c);
  case BinaryOp::Or: return b_.CreateOr(a, c);
  }
  ir::unreachableScalarOp();
}

// `k` on two operands of one compute type (f32 when fp, else i64 or i1).
llvm::Value *KernelEmitter::binaryOp(ir::OpKind k, llvm::Value *a, llvm::Value *c, bool fp) {
  BinaryOp op = scalar(ir::asBinaryOp(k), k);
  if (fp)
    return floatBinary(op, a, c);
  if (a->getType()->isIntegerTy(1))
    if (llvm::Value *v = boolBinary(op, a, c))
      return v;
  return intBinary(op, a, c);
}

llvm::Value *KernelEmitter::value(const kir::Value &v) {
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
    UnaryOp op = scalar(ir::asUnaryOp(v.op), v.op);
    return roundTo(isFloat(a.dtype) ? floatUnary(op, x) : intUnary(op, x), v.dtype);
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
void KernelEmitter::stmt(const kir::Stmt &s) {
  switch (s.kind) {
  case kir::Stmt::Kind::Block:
    for (const auto &c : s.body)
      stmt(*c);
    return;
  case kir::Stmt::Kind::Store: return storeStmt(s);
  case kir::Stmt::Kind::Let: {
    llvm::AllocaInst *slot = entryAlloca(computeType(s.value->dtype), s.var);
    locals_[s.var] = slot;
    b_.CreateStore(value(*s.value), slot);
    return;
  }
  case kir::Stmt::Kind::Assign: {
    llvm::Value *v = value(*s.value);
    if (reassociable_.count(s.var))
      if (auto *update = llvm::dyn_cast<llvm::Instruction>(v);
          update && update->getOpcode() == llvm::Instruction::FAdd)
        update->setHasAllowReassoc(true);
    b_.CreateStore(v, locals_.at(s.var));
    return;
  }
  case kir::Stmt::Kind::If:
    return onlyIf(convert(value(*s.value), s.value->dtype, DType::Bool), [&] {
      for (const auto &c : s.body)
        stmt(*c);
    });
  case kir::Stmt::Kind::Gemm: return gemmStmt(s.gemm);
  case kir::Stmt::Kind::Attention: return attentionStmt(s.attention);
  case kir::Stmt::Kind::For: return forStmt(s);
  }
}

void KernelEmitter::storeStmt(const kir::Stmt &s) { storeValue(s.buffer, s.index, value(*s.value), s.value->dtype); }

void KernelEmitter::forStmt(const kir::Stmt &s) { loopOver(s, b_.getInt64(0), index(s.extent), b_.getInt64(1)); }

void KernelEmitter::loopOver(const kir::Stmt &s, llvm::Value *start, llvm::Value *end, llvm::Value *step) {
  llvm::BasicBlock *before = &fn_->back(); // the loop's blocks are the ones created after it
  llvm::BranchInst *latch = forLoop(s.var, start, end, step, [&](llvm::Value *i) {
    llvm::Value *saved = vars_.count(s.var) ? vars_[s.var] : nullptr;
    vars_[s.var] = i;
    for (const auto &c : s.body)
      stmt(*c);
    vars_[s.var] = saved;
  });
  bool straight = std::none_of(s.body.begin(), s.body.end(), [](const kir::StmtPtr &c) { return c->kind == kir::Stmt::Kind::For; });
  bool maskedTail = maskTail(s);
  if (s.schedule != kir::Stmt::Schedule::Vectorize && !(s.schedule == kir::Stmt::Schedule::Parallel && straight) && !maskedTail)
    return;
  // Independent iterations are told to the vectorizer (llvm.loop.parallel_accesses):
  // else it guards the vector loop with run-time overlap checks of every stored buffer
  // against every read one, and an elementwise kernel written in place (c2 over the
  // LSTM's gate i) fails them and runs scalar: 13x slower.
  llvm::MDNode *accesses = nullptr;
  if (kir::independentIterations(s)) {
    accesses = llvm::MDNode::getDistinct(ctx_, {});
    for (auto block = std::next(before->getIterator()); block != fn_->end(); ++block)
      for (llvm::Instruction &inst : *block) {
        llvm::Value *ptr = llvm::getLoadStorePointerOperand(&inst);
        if (ptr && !llvm::isa<llvm::AllocaInst>(ptr->stripInBoundsOffsets())) // locals are mem2reg's
          inst.setMetadata(llvm::LLVMContext::MD_access_group, accesses);
      }
  }
  markVectorize(latch, accesses, maskedTail);
}

void KernelEmitter::markVectorize(llvm::BranchInst *latch, llvm::MDNode *parallelAccesses, bool maskedTail) {
  llvm::Metadata *enable[] = {llvm::MDString::get(ctx_, "llvm.loop.vectorize.enable"), llvm::ConstantAsMetadata::get(b_.getTrue())};
  std::vector<llvm::Metadata *> ops{nullptr, llvm::MDNode::get(ctx_, enable)};
  if (maskedTail) {
    llvm::Metadata *predicate[] = {llvm::MDString::get(ctx_, "llvm.loop.vectorize.predicate.enable"), llvm::ConstantAsMetadata::get(b_.getTrue())};
    ops.push_back(llvm::MDNode::get(ctx_, predicate));
  }
  if (parallelAccesses) {
    llvm::Metadata *parallel[] = {llvm::MDString::get(ctx_, "llvm.loop.parallel_accesses"), parallelAccesses};
    ops.push_back(llvm::MDNode::get(ctx_, parallel));
  }
  llvm::MDNode *loopId = llvm::MDNode::getDistinct(ctx_, ops);
  loopId->replaceOperandWith(0, loopId);
  latch->setMetadata(llvm::LLVMContext::MD_loop, loopId);
}

void KernelEmitter::attentionStmt(const kir::Attention &) {
  throw InternalError("kernel " + k_.name + ": this target has no attention kernel (its schedule keeps the unfused ops)");
}

llvm::AllocaInst *KernelEmitter::entryAlloca(llvm::Type *t, const std::string &name) {
  llvm::IRBuilder<> atEntry(entry_, entry_->begin());
  return atEntry.CreateAlloca(t, nullptr, name);
}

// What decides a kernel's code: a module holding it alone (the function, the helpers and
// constants it uses, their attributes and metadata) as bitcode, its values unnamed and the
// names made from the kernel's (the function, a GPU kernel's shared memory) the same for
// every kernel. (Bitcode, not the module's text: the printer costs 4x more.)
std::string codeKey(llvm::Module &m, const std::string &kernel, std::string_view device) {
  std::vector<std::pair<llvm::GlobalValue *, std::string>> renamed;
  for (llvm::GlobalValue &g : m.global_values())
    if (g.getName() == kernel || g.getName().starts_with(kernel + "."))
      renamed.emplace_back(&g, g.getName().str());
  for (const auto &[g, name] : renamed)
    g->setName("kernel" + name.substr(kernel.size()));
  std::string key = std::string(device) + "\n";
  llvm::raw_string_ostream os(key);
  llvm::WriteBitcodeToFile(m, os);
  os.flush();
  for (const auto &[g, name] : renamed)
    g->setName(name);
  return key;
}

llvm::Value *loadLanes(llvm::IRBuilder<> &b, unsigned lanes, llvm::Value *ptr, llvm::Value *mask) {
  auto *vec = llvm::FixedVectorType::get(b.getFloatTy(), lanes);
  if (mask)
    return b.CreateMaskedLoad(vec, ptr, llvm::Align(4), mask, llvm::Constant::getNullValue(vec));
  return b.CreateAlignedLoad(vec, ptr, llvm::Align(4));
}

std::string codeSymbol(const std::string &key) {
  std::array<uint8_t, 32> digest = llvm::SHA256::hash(llvm::arrayRefFromStringRef(key));
  return "dnnc_" + llvm::toHex(llvm::ArrayRef<uint8_t>(digest).take_front(16), true);
}

void optimize(llvm::Module &m, llvm::TargetMachine &tm) {
  // A reduce loop's f32 sum is serial (docs/semantics.md), so the vectorizer leaves it,
  // and the exp of softmax's and logsumexp's sums with it, scalar unless ordered
  // reductions are on (AArch64's default, not x86's): each vector of terms is then added
  // to the sum lane by lane, in the serial order (the same sum, bit for bit), while the
  // terms are computed on whole vectors. LLVM offers no other switch than its option.
  static std::once_flag orderedReductions;
  std::call_once(orderedReductions, [] {
    const char *args[] = {"dnnc", "-force-ordered-reductions"};
    llvm::cl::ParseCommandLineOptions(2, args);
  });
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
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
