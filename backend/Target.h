// The targets dnnc compiles for, behind one interface: cpu (this host), cuda (PTX for an
// NVIDIA GPU) and cuda-sim (the GPU's kernels on rt::SimulatedGpuDevice, for testing),
// registered by name. Drivers look a target up by name and call it; nothing above this
// compares target names.
#pragma once

#include "backend/lower/Lower.h"
#include "runtime/Artifact.h"
#include "runtime/Executable.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dnnc::backend {

struct TargetOptions {
  std::string arch = "sm_80"; // the GPU architecture (cuda): --arch, or the probed GPU's
};

class Target {
public:
  virtual ~Target() = default;
  virtual std::string_view name() const = 0;
  // The schedule choices its kernels are lowered with (backend/lower/Schedule.h).
  virtual const lower::ScheduleOptions &schedule() const = 0;
  // Whether this machine can run the target now; fills in what depends on the machine
  // (the GPU's architecture). Returns why not, or "".
  virtual std::string probe(TargetOptions &options) const;
  // Compiles the lowered kernels into a module and loads it on a new device. Throws
  // DataError for user errors (an unsupported arch, no GPU).
  virtual std::unique_ptr<rt::Device> makeDevice(const lower::LoweredGraph &lowered, const TargetOptions &options) const = 0;
  // Whether `dnnc build` writes artifacts for it (the runtime loads cpu and cuda ones).
  virtual bool buildsArtifacts() const { return true; }
  // The artifact's payload (the kernels' code) with `info` filled in. Throws DataError.
  virtual std::string artifactPayload(const std::vector<const kir::Kernel *> &kernels, const TargetOptions &options,
                                      rt::ArtifactInfo &info) const = 0;
  // The compiled module as text (`dnnc emit`): optimized LLVM IR, and the assembly made
  // from it where the target makes any (PTX).
  struct ModuleText {
    std::string llvmIR, assembly;
  };
  virtual ModuleText moduleText(const std::vector<const kir::Kernel *> &kernels, const TargetOptions &options) const = 0;
  // What `dnnc build` says it built for ("this CPU", "sm_90").
  virtual std::string builtFor(const TargetOptions &options) const = 0;
  // A line printed before each kernel by --emit=kernels (how a GPU maps it), or "".
  virtual std::string kernelNote(const kir::Kernel &k) const;
};

// Every registered target; null when `name` is none of them.
const std::vector<const Target *> &allTargets();
const Target *findTarget(std::string_view name);
// "cpu, cuda": the names of the targets, only those that build artifacts when
// artifactsOnly (the targets `dnnc build` and `dnnc emit --target` take).
std::string targetNames(bool artifactsOnly);

} // namespace dnnc::backend
