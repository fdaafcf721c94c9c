// A model compiled for the host CPU: one kernel per op that has a static shape, compiled
// by the LLVM back end and run by the runtime's CPU device; value-dependent ops and
// control flow run on the host (the interpreter drives them), which is where EDO sizes
// are read back.
#pragma once

#include "backend/llvm/CpuBackend.h"
#include "runtime/Executable.h"

#include <memory>

namespace dnnc::backend {

class CpuExecutable {
public:
  // memoryPlan: intermediates in one planned arena (else each allocated on its own).
  explicit CpuExecutable(const ir::Graph &g, bool memoryPlan = true);
  rt::Executable &executable() { return *exe_; }
  // The interpreter that runs the model with these kernels.
  interp::Interpreter &interpreter() { return exe_->interpreter(); }
  size_t kernelCount() const { return exe_->kernels().size(); }
  size_t kernelsLaunched() const { return exe_->kernelsLaunched(); }
  std::string kernelsText() const { return kernelsText_; }
  const std::string &llvmIR() const { return module_->llvmIR(); }

private:
  std::string kernelsText_;
  std::shared_ptr<CpuModule> module_;
  std::unique_ptr<rt::Executable> exe_;
};

} // namespace dnnc::backend
