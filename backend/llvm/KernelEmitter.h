// Kernel IR to LLVM IR, shared by the host and NVPTX back ends. Private to backend/llvm:
// it names LLVM types only by forward declaration.
//
// Contract: emitKernel adds one function named after the kernel to `m`, verified. On the
// host its signature is rt::KernelFn (runtime/KernelAbi.h). On the GPU it is a PTX kernel
// taking each buffer pointer, then each dim (i64), by value, whose work maps onto the grid
// as kir::gpuMapping says (grid-stride threads, warps with shuffle reductions, or blocks
// with shared-memory GEMM tiles); it must be launched with kir::gpuGrid's block size. The
// simulated GPU gets the GPU's mapping behind rt::KernelFn's signature, with the
// simulator's hooks in place of special registers, barriers and shuffles.
#pragma once

#include "ir/kernel/Kernel.h"

#include <string>

namespace llvm {
class Module;
class TargetMachine;
class Error;
} // namespace llvm

namespace dnnc::backend {

struct Target {
  enum class Kind { Host, Nvptx, SimulatedGpu };
  Kind kind = Kind::Host;
  unsigned vectorWidth = 4; // f32 lanes of the widest vector register (the CPU GEMM's tiles)
  bool gpuMapping() const { return kind != Kind::Host; }
  bool nvptx() const { return kind == Kind::Nvptx; }
};

void emitKernel(llvm::Module &m, const kir::Kernel &k, const Target &target);
// The O3 module pipeline for `tm`'s target.
void optimize(llvm::Module &m, llvm::TargetMachine &tm);
std::string errorText(llvm::Error e);

} // namespace dnnc::backend
