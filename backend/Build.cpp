// Ahead-of-time compilation into an artifact (see Build.h).
#include "backend/Build.h"

#include "backend/llvm/CpuBackend.h"
#include "backend/llvm/NvptxBackend.h"
#include "backend/lower/Lower.h"
#include "runtime/Artifact.h"
#include "base/TensorIO.h"

#include <fmt/format.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

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

// Links an object into a shared object with the system's compiler driver (which knows
// where libm and the C runtime live); its messages go to stderr.
std::string linkSharedObject(const std::string &object, const fs::path &dir) {
  fs::path obj = dir / "kernels.o", so = dir / "kernels.so";
  rt::writeFileAtomically(obj.string(), object);
  for (const char *driver : {"cc", "gcc", "clang"}) {
    std::vector<std::string> args{driver, "-shared", "-o", so.string(), obj.string(), "-lmvec", "-lm"};
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

} // namespace

void buildArtifact(const ir::Graph &g, const std::string &target, const std::string &arch, const std::string &path,
                   bool memoryPlan) {
  lower::LoweredGraph lowered = lower::lowerGraph(g, target == "cuda" ? lower::kGpuSchedule : lower::kCpuSchedule);
  std::vector<const kir::Kernel *> kernels = lowered.kernelPointers();
  rt::ArtifactInfo info;
  info.target = target;
  std::string payload;
  if (target == "cuda") {
    info.arch = arch;
    payload = compilePtx(kernels, arch).ptx;
  } else {
    info.arch = hostCpuName();
    unsigned width = hostVectorWidth();
    info.vectorIsa = width >= 16 ? "avx512f" : width >= 8 ? "avx2" : "sse2";
    ScratchDir scratch;
    payload = linkSharedObject(compileHostObject(kernels), scratch.path);
  }
  rt::writeArtifact(path, g, lowered.kernelOf(), lowered.kernelInfos(), memoryPlan ? lower::arenaPlan(g, lowered) : rt::ArenaPlan{}, info,
                    payload);
}

} // namespace dnnc::backend
