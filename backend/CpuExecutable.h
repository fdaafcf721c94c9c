// A model compiled for the host CPU: one kernel per op that has a static shape, compiled
// by the LLVM back end; value-dependent ops and control flow run on the host (the
// interpreter drives them), which is where EDO sizes are read back.
#pragma once

#include "backend/llvm/CpuBackend.h"
#include "ir/interp/Interpreter.h"

#include <map>
#include <memory>

namespace dnnc::backend {

class CpuExecutable {
public:
  explicit CpuExecutable(const ir::Graph &g);
  // The interpreter that runs the model with these kernels (control flow and host ops
  // stay with it).
  interp::Interpreter &interpreter() { return interpreter_; }
  size_t kernelCount() const { return kernels_.size(); }
  size_t kernelsLaunched() const { return launched_; }
  size_t hostOps() const { return interpreter_.opsExecuted() - launched_; }
  std::string kernelsText() const;
  const std::string &llvmIR() const { return module_->llvmIR(); }

private:
  bool runOp(const ir::Op &op, const std::vector<const rt::Tensor *> &in, std::vector<rt::Tensor> &out,
             const interp::Binding &b);
  struct Compiled {
    kir::Kernel kernel;
    std::vector<std::string> dims;
    KernelFn fn = nullptr;
  };
  const ir::Graph &graph_;
  std::map<const ir::Op *, Compiled> kernels_;
  std::vector<const ir::Op *> order_;
  std::unique_ptr<CpuModule> module_;
  interp::Interpreter interpreter_;
  size_t launched_ = 0;
};

} // namespace dnnc::backend
