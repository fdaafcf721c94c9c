// The calling convention of compiled CPU kernels, shared by the compiler (which emits
// them) and the runtime (which calls them, from the JIT or from a built artifact).
#pragma once

#include <cstdint>

namespace dnnc::rt {

// buffers[i] points at kernel buffer i (the op's operands, then its results); dims[j] is
// the value of the kernel's j-th dim name; [begin, end) is the chunk of the kernel's
// parallel loop to run (a kernel without one ignores it).
using KernelFn = void (*)(uint8_t *const *buffers, const int64_t *dims, int64_t begin, int64_t end);

} // namespace dnnc::rt
