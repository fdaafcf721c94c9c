// The NVIDIA GPU back end: kernel IR to PTX through LLVM's NVPTX target, with CUDA's
// libdevice linked in for the math functions. No LLVM header leaks out.
#pragma once

#include "ir/kernel/Kernel.h"

#include <map>
#include <string>
#include <vector>

namespace dnnc::backend {

// The GPU architectures dnnc emits PTX for.
const std::vector<std::string> &supportedArchs();
// CUDA's libdevice.10.bc ($CUDA_HOME, $CUDA_PATH, then /usr/local/cuda), or "".
std::string findLibdevice();

struct PtxModule {
  std::string ptx;    // one PTX module holding every distinct kernel code
  std::string llvmIR; // the optimized LLVM IR it came from
  // Each kernel whose code an earlier kernel has: the entry it launches, that kernel's.
  std::map<std::string, std::string> entries;
};
// Throws DataError when `arch` is not supported or libdevice is missing.
PtxModule compilePtx(const std::vector<const kir::Kernel *> &kernels, const std::string &arch);

} // namespace dnnc::backend
