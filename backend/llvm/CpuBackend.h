// The host CPU back end: kernel IR to LLVM IR, optimized for this machine (its vector
// width and features) and compiled in process by ORC's LLJIT. No LLVM header leaks out.
#pragma once

#include "ir/kernel/Kernel.h"
#include "runtime/KernelAbi.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dnnc::backend {

using rt::KernelFn; // runtime/KernelAbi.h: the calling convention

class CpuModule {
public:
  // Compiles every kernel. Kernels whose code is the same (codeKey in KernelEmitter.h)
  // compile once: in this module, or (CPU kernels) not at all while an earlier module of
  // this process that compiled it lives. The codes go into objects by a hash of their keys
  // and compile on a thread per core, each object from the object cache when it has it.
  // Throws InternalError if LLVM rejects the code.
  // simulatedGpu: with the GPU's work mapping, for rt::SimulatedGpuDevice.
  static std::unique_ptr<CpuModule> compile(const std::vector<const kir::Kernel *> &kernels, bool simulatedGpu = false);
  ~CpuModule();
  KernelFn lookup(const std::string &name) const;
  std::vector<KernelFn> lookup(const std::vector<const kir::Kernel *> &kernels) const; // in their order
  // How many distinct codes compile() has compiled in this process (for tests).
  static size_t codesCompiled();
  struct Impl; // named by CpuBackend.cpp's table of the process's compiled code

private:
  explicit CpuModule(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// The optimized LLVM IR of the kernels in one module, as text, its values named after the
// kernel IR's (`dnnc emit --emit=llvm`).
std::string hostLLVMIR(const std::vector<const kir::Kernel *> &kernels, bool simulatedGpu = false);

// The kernels as ELF objects of position-independent code for this host, as CpuModule
// compiles them (each distinct code once, under its symbol, from the object cache where it
// has them), and each kernel's code symbol: a built artifact's shared object links them
// and gives each kernel's name to its code.
struct HostObjects {
  std::vector<std::string> objects;
  std::map<std::string, std::string> symbols; // kernel name -> its code's symbol
};
HostObjects compileHostObjects(const std::vector<const kir::Kernel *> &kernels);

// LLVM's name for the host CPU ("skylake-avx512").
std::string hostCpuName();
// The host's name and vector width, as LLVM sees them (for reports and benchmarks).
std::string hostDescription();
// f32 lanes in the host's widest vector register (16 with AVX-512, 8 with AVX).
unsigned widestHostVectorWidth();
// The lanes the CPU kernels are built for: the widest, or fewer where DNNC_VECTOR_WIDTH
// says (4 or 8: the tiling and sums of an SSE or AVX2 host, for tests; the code still uses
// this host's instructions). A value that is not 4, 8 or 16, or wider than the host's, is
// a DataError.
unsigned hostVectorWidth();

} // namespace dnnc::backend
