// The calling convention of compiled CPU kernels, shared by the compiler (which emits
// them) and the runtime (which calls them, from the JIT or from a built artifact).
#pragma once

#include <cstdint>

namespace dnnc::rt {

// buffers[i] points at kernel buffer i (the op's operands, then its results); dims[j] is
// the value of the kernel's j-th dim name; [begin, end) is the chunk of the kernel's
// parallel loop to run (a kernel without one ignores it).
using KernelFn = void (*)(uint8_t *const *buffers, const int64_t *dims, int64_t begin, int64_t end);

// Kernels compiled for the GPU simulator (`--device cuda-sim`) take KernelFn's arguments
// (ignoring begin and end) but map their work as GPU kernels do, reading the thread's
// position and synchronizing through these hooks, which the simulator defines:
//   int32_t dnnc_sim_sreg(int32_t which)      a SimRegister of the calling thread
//   void dnnc_sim_barrier()                   __syncthreads()
//   int32_t dnnc_sim_shfl_bfly(int32_t v, int32_t laneMask)
//                                             __shfl_xor_sync(0xffffffff, v, laneMask)
enum SimRegister : int32_t { kSimTidX, kSimNtidX, kSimCtaidX, kSimNctaidX, kSimCtaidY, kSimNctaidY };

} // namespace dnnc::rt
