// The CPU GEMM's micro-kernels, each a function of its own that every GEMM kernel calls:
// the register tiles are almost all of a GEMM kernel's code (each of the transformer's
// GEMM kernels inlined about 45 of them and took 0.37-0.8 s of LLVM's time), and they
// depend only on their shape, so a model's kernels share one compiled copy of each (and
// the object cache keeps it across runs). Private to backend/llvm.
//
// A micro-kernel holds R rows x V vectors of C in registers and, for each k in
// [k0, kEnd), broadcasts one A element per row and multiplies it into V vectors of B's row
// k with FMAs, then stores the sums into C (or adds them to it), masking the lanes at or
// past `remaining` columns when masked.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dnnc::backend {

struct MicroKernelShape {
  unsigned rows = 0, vectors = 0; // R x V vectors of C
  unsigned lanes = 0;             // f32 lanes per vector
  // A's element (r, k): 0 for rows in place, at a + r lda + k; else packed micro-panels
  // of that many rows, at a + r + k packedRows.
  unsigned packedRows = 0;
  bool masked = false; // lanes of the columns at or past `remaining` neither read nor stored
  // "r14x2.l16.p14.m": the shape in words (the function's symbol is a hash of its code).
  std::string name() const;
};

// Pointers are to f32; every index counts f32 elements.
struct MicroKernelOperands {
  llvm::Value *a, *lda;          // A's element (0, 0); lda unused for packed A
  llvm::Value *bRows, *bStride;  // B's row k at bRows + k bStride ...
  llvm::Value *bOffsets;         // ... or, when not null, at bRows + bOffsets[k] (i64)
  llvm::Value *k0, *kEnd;        // the depths summed
  llvm::Value *c, *ldc;          // C's element (0, 0); row r at c + r ldc
  llvm::Value *first;            // i1: store the sums (else add them to C)
  llvm::Value *remaining;        // the columns from C's first on that exist (masked only)
};

// Stores the sums of row r, vector v in place of the plain store into C.
using StoreSums = std::function<void(unsigned r, unsigned v, llvm::Value *sums)>;

// Emits micro-kernel `s` at b's insert point inline (its loop in new blocks of b's
// function, leaving b after it), its accumulators in `acc` (at least rows x vectors
// allocas of a vector each).
void emitMicroKernelBody(llvm::IRBuilder<> &b, const MicroKernelShape &s, const MicroKernelOperands &o,
                         const std::vector<llvm::AllocaInst *> &acc, const StoreSums &store = nullptr);

// Calls micro-kernel `s` (no bOffsets, plain stores) from b's insert point: its function
// declared in b's module under its symbol, "dnnc_" and a hash of its code, so that a
// kernel's key changes with the micro-kernels it calls.
void callMicroKernel(llvm::IRBuilder<> &b, const MicroKernelShape &s, const MicroKernelOperands &o);

// A micro-kernel whose symbol callMicroKernel declared in this process: its shape, and its
// key's bytes (a measure of its work, as a kernel's).
struct MicroKernelCode {
  MicroKernelShape shape;
  size_t keyBytes;
};
std::optional<MicroKernelCode> microKernelNamed(const std::string &symbol);

// Defines micro-kernel `s` in `m` under `symbol` (filling its declaration, if m has one).
// Hidden: an artifact's calls go straight to it, not through the PLT.
void defineMicroKernel(llvm::Module &m, const MicroKernelShape &s, const std::string &symbol);

} // namespace dnnc::backend
