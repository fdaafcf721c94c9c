// The cpu, cuda and cuda-sim targets (see Target.h).
#include "backend/Target.h"

#include "backend/gpu/GpuMapping.h"
#include "backend/llvm/CpuBackend.h"
#include "backend/llvm/NvptxBackend.h"
#include "base/TensorIO.h"
#include "runtime/CpuDevice.h"
#include "runtime/CudaDevice.h"
#include "runtime/GpuSimulator.h"

#include <fmt/format.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

extern char **environ;

namespace dnnc::backend {
namespace {

namespace fs = std::filesystem;

// A scratch directory removed on every path out.
struct ScratchDir {
  fs::path path;
  ScratchDir() {
    std::string tmpl = (fs::temp_directory_path() / "dnnc-build-XXXXXX").string();
    if (!mkdtemp(tmpl.data()))
      throw DataError("cannot create a temporary directory for the build");
    path = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Links objects into a shared object with the system's compiler driver (which knows where
// libm and the C runtime live), each kernel's name defined as its code's symbol
// (--defsym, which GNU ld, gold, lld and mold all take, from a response file); its
// messages go to stderr.
std::string linkSharedObject(const HostObjects &kernels, const fs::path &dir) {
  fs::path so = dir / "kernels.so", names = dir / "kernels.rsp";
  std::vector<std::string> inputs;
  for (const std::string &object : kernels.objects) {
    inputs.push_back((dir / fmt::format("kernels{}.o", inputs.size())).string());
    rt::writeFileAtomically(inputs.back(), object);
  }
  std::string definitions;
  for (const auto &[kernel, symbol] : kernels.symbols)
    definitions += "-Wl,--defsym=" + kernel + "=" + symbol + "\n";
  rt::writeFileAtomically(names.string(), definitions);
  inputs.push_back("@" + names.string());
  for (const char *driver : {"cc", "gcc", "clang"}) {
    std::vector<std::string> args{driver, "-shared", "-o", so.string()};
    args.insert(args.end(), inputs.begin(), inputs.end());
    args.push_back("-lm");
    std::vector<char *> argv;
    for (std::string &a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid;
    if (posix_spawnp(&pid, driver, nullptr, nullptr, argv.data(), environ) != 0)
      continue; // not installed: try the next
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      throw DataError(fmt::format("linking the kernels with '{}' failed", driver));
    return rt::readFile(so.string());
  }
  throw DataError("building for the CPU needs a C compiler driver to link a shared object (cc, gcc or clang); "
                      "install gcc");
}

// This host's CPU: kernels JIT-compiled in process, or linked into a shared object.
class CpuTarget final : public Target {
public:
  std::string_view name() const override { return "cpu"; }
  const lower::ScheduleOptions &schedule() const override { return lower::kCpuSchedule; }
  // Which loops make the range the threads split (collapsed), and the work of one of its
  // iterations, from which the runtime sizes its chunks.
  std::string kernelNote(const kir::Kernel &k) const override {
    std::vector<const kir::Stmt *> nest = k.parallelNest();
    if (nest.empty())
      return fmt::format("// cpu: {} runs on one thread\n", k.name);
    std::string loops;
    for (const kir::Stmt *loop : nest)
      loops += (loops.empty() ? "" : " x ") + loop->var;
    rt::KernelInfo info = lower::kernelInfo(k);
    return fmt::format("// cpu: {} splits {} iterations (loop{} {}{}) across threads, work {} each\n", k.name,
                       info.parallelExtent->str(), nest.size() > 1 ? "s" : "", loops, nest.size() > 1 ? " collapsed" : "",
                       info.work->str());
  }
  std::unique_ptr<rt::Device> makeDevice(const lower::LoweredGraph &lowered, const TargetOptions &) const override {
    std::shared_ptr<CpuModule> module = CpuModule::compile(lowered.kernelPointers());
    return std::make_unique<rt::CpuDevice>(module->lookup(lowered.kernelPointers()), module);
  }
  std::string artifactPayload(const std::vector<const kir::Kernel *> &kernels, const TargetOptions &,
                              rt::ArtifactInfo &info) const override {
    info.arch = hostCpuName();
    unsigned width = widestHostVectorWidth(); // the instructions the code uses, whatever its tiling
    info.vectorIsa = width >= 16 ? "avx512f" : width >= 8 ? "avx2" : "sse2";
    ScratchDir scratch;
    return linkSharedObject(compileHostObjects(kernels), scratch.path);
  }
  ModuleText moduleText(const std::vector<const kir::Kernel *> &kernels, const TargetOptions &) const override {
    return {hostLLVMIR(kernels), ""};
  }
  std::string builtFor(const TargetOptions &) const override { return "this CPU"; }
};

// The PTX architecture to build for the GPU that `probe` describes: its own when dnnc
// supports it, sm_90 for newer GPUs (the driver compiles PTX forward). Throws
// DataError for GPUs older than sm_80.
std::string archFor(const rt::CudaProbe &probe) {
  const auto &archs = supportedArchs();
  if (std::find(archs.begin(), archs.end(), probe.arch()) != archs.end())
    return probe.arch();
  if (probe.major >= 9)
    return "sm_90";
  throw DataError(fmt::format("GPU '{}' is {}; dnnc's PTX needs sm_80 or newer", probe.name, probe.arch()));
}

// What the GPU and its simulator share: the GPU's schedules and grid mapping.
class GpuTarget : public Target {
public:
  const lower::ScheduleOptions &schedule() const override { return lower::kGpuSchedule; }
  std::string kernelNote(const kir::Kernel &k) const override { return "// " + gpu::describeLaunch(k) + "\n"; }
};

// An NVIDIA GPU: one PTX module for options.arch, loaded on GPU 0 by the CUDA driver.
class CudaTarget final : public GpuTarget {
public:
  std::string_view name() const override { return "cuda"; }
  std::string probe(TargetOptions &options) const override {
    rt::CudaProbe probe = rt::probeCuda();
    if (!probe.ok)
      return probe.error;
    options.arch = archFor(probe);
    return "";
  }
  std::unique_ptr<rt::Device> makeDevice(const lower::LoweredGraph &lowered, const TargetOptions &options) const override {
    PtxModule ptx = compilePtx(lowered.kernelPointers(), options.arch);
    std::vector<rt::KernelInfo> kernels = lowered.kernelInfos();
    for (rt::KernelInfo &k : kernels)
      if (auto it = ptx.entries.find(k.name); it != ptx.entries.end())
        k.entry = it->second;
    return std::make_unique<rt::CudaDevice>(ptx.ptx, kernels);
  }
  std::string artifactPayload(const std::vector<const kir::Kernel *> &kernels, const TargetOptions &options,
                              rt::ArtifactInfo &info) const override {
    info.arch = options.arch;
    PtxModule ptx = compilePtx(kernels, options.arch);
    info.entries = std::move(ptx.entries);
    return std::move(ptx.ptx);
  }
  ModuleText moduleText(const std::vector<const kir::Kernel *> &kernels, const TargetOptions &options) const override {
    PtxModule ptx = compilePtx(kernels, options.arch);
    return {ptx.llvmIR, ptx.ptx};
  }
  std::string builtFor(const TargetOptions &options) const override { return options.arch; }
};

// The GPU's kernels and work mapping compiled for this CPU and run by
// rt::SimulatedGpuDevice, so GPU schedules are tested without a GPU. It exists only inside
// dnnc: there are no artifacts for it.
class CudaSimTarget final : public GpuTarget {
public:
  std::string_view name() const override { return "cuda-sim"; }
  std::unique_ptr<rt::Device> makeDevice(const lower::LoweredGraph &lowered, const TargetOptions &) const override {
    std::shared_ptr<CpuModule> module = CpuModule::compile(lowered.kernelPointers(), true);
    return std::make_unique<rt::SimulatedGpuDevice>(module->lookup(lowered.kernelPointers()), module);
  }
  bool buildsArtifacts() const override { return false; }
  std::string artifactPayload(const std::vector<const kir::Kernel *> &, const TargetOptions &,
                              rt::ArtifactInfo &) const override {
    throw DataError("cuda-sim runs only inside dnnc: there are no artifacts for it");
  }
  ModuleText moduleText(const std::vector<const kir::Kernel *> &kernels, const TargetOptions &) const override {
    return {hostLLVMIR(kernels, true), ""};
  }
  std::string builtFor(const TargetOptions &) const override { return "the GPU simulator"; }
};

} // namespace

std::string Target::probe(TargetOptions &) const { return ""; }

std::string Target::kernelNote(const kir::Kernel &) const { return ""; }

const std::vector<const Target *> &allTargets() {
  static const CpuTarget cpu;
  static const CudaTarget cuda;
  static const CudaSimTarget cudaSim;
  static const std::vector<const Target *> targets{&cpu, &cuda, &cudaSim};
  return targets;
}

const Target *findTarget(std::string_view name) {
  for (const Target *t : allTargets())
    if (t->name() == name)
      return t;
  return nullptr;
}

std::string targetNames(bool artifactsOnly) {
  std::string names;
  for (const Target *t : allTargets())
    if (!artifactsOnly || t->buildsArtifacts())
      names += fmt::format("{}{}", names.empty() ? "" : ", ", t->name());
  return names;
}

} // namespace dnnc::backend
