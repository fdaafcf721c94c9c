// `dnnc run`: runs a model (compiled now, or a built artifact) on .npy inputs and
// .safetensors weights (or seeded random ones) and writes its outputs as .npy files.
#include "backend/CpuExecutable.h"
#include "backend/CudaExecutable.h"
#include "ir/interp/Interpreter.h"
#include "runtime/Artifact.h"
#include "runtime/TensorIO.h"
#include "runtime/ThreadPool.h"
#include "tools/dnnc/Driver.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <random>

namespace dnnc::tool {
namespace {

using rt::DataError;
using rt::Tensor;

// A random input of `type` with every dim bound: floats N(0, 1), integers in [0, 10),
// bools fair coin flips.
Tensor randomInput(const ir::Value &arg, const interp::Binding &b, uint64_t seed) {
  std::vector<int64_t> shape;
  auto dims = interp::expectedShape(arg.type, b);
  for (size_t k = 0; k < dims.size(); ++k) {
    if (!dims[k])
      throw DataError(fmt::format("input '{}' ({}) is not given and dim {} is unknown: pass --input {}=FILE.npy or bind "
                                  "its dims with --bind", arg.name, arg.type.str(), arg.type.dims[k]->str(), arg.name));
    shape.push_back(*dims[k]);
  }
  Tensor t = Tensor::zeros(arg.type.dtype, shape);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::uniform_int_distribution<int64_t> ints(0, 9);
  for (size_t k = 0; k < t.numel(); ++k)
    isFloat(t.dtype) ? t.set(k, normal(rng)) : t.setInt(k, t.dtype == DType::Bool ? ints(rng) % 2 : ints(rng));
  return t;
}

std::map<std::string, Tensor> loadWeights(const ir::Graph &g, const std::string &path, const interp::Binding &b,
                                          uint64_t seed) {
  auto specs = interp::paramsOf(g);
  std::map<std::string, Tensor> out;
  if (path.empty()) {
    for (size_t k = 0; k < specs.size(); ++k)
      out[specs[k].name] = interp::initialize(specs[k].type, specs[k].init, b, seed * 1000003 + k);
    return out;
  }
  auto file = rt::readSafetensors(path);
  for (const auto &spec : specs) {
    auto it = file.find(spec.name);
    if (it == file.end())
      throw DataError(fmt::format("'{}' has no tensor '{}' for param {}", path, spec.name, spec.type.str()));
    const Tensor &t = it->second;
    auto want = interp::expectedShape(spec.type, b);
    bool same = t.dtype == spec.type.dtype && t.shape.size() == want.size();
    for (size_t k = 0; same && k < want.size(); ++k)
      same = !want[k] || *want[k] == t.shape[k];
    if (!same)
      throw DataError(fmt::format("tensor '{}' in '{}' is {} but param '{}' is {}", spec.name, path, t.typeText(),
                                  spec.name, spec.type.str()));
    out[spec.name] = t;
  }
  for (auto &[name, t] : file)
    if (!out.count(name))
      throw DataError(fmt::format("'{}' has a tensor '{}' ({}) that matches no param of model '{}'", path, name,
                                  t.typeText(), g.name));
  return out;
}

} // namespace

namespace {

bool knownDevice(const std::string &d) { return d == "auto" || d == "ref" || d == "cpu" || d == "cuda"; }

// Runs `g` on `compiled` (null: the reference interpreter): reads or makes the inputs and
// weights, runs, and writes the outputs only once everything has succeeded.
int execute(const ir::Graph &g, rt::Executable *compiled, const RunOptions &o) {
  try {
    std::vector<std::optional<Tensor>> inputs(g.body.args.size());
    for (auto &[name, path] : o.inputs) {
      auto it = std::find_if(g.body.args.begin(), g.body.args.end(), [&](const ir::Value *a) { return a->name == name; });
      if (it == g.body.args.end()) {
        std::string names;
        for (const ir::Value *a : g.body.args)
          names += (names.empty() ? "" : ", ") + a->name;
        throw DataError(fmt::format("model '{}' has no input '{}' (its inputs: {})", g.name, name, names));
      }
      inputs[static_cast<size_t>(it - g.body.args.begin())] = rt::readNpy(path);
    }
    std::unique_ptr<interp::Interpreter> plain;
    if (!compiled)
      plain = std::make_unique<interp::Interpreter>(g);
    interp::Interpreter &interpreter = compiled ? compiled->interpreter() : *plain;
    std::vector<const Tensor *> given;
    for (auto &t : inputs)
      given.push_back(t ? &*t : nullptr);
    interp::Binding b = interpreter.bindInputs(given, o.binding);
    for (size_t k = 0; k < inputs.size(); ++k)
      if (!inputs[k])
        inputs[k] = randomInput(*g.body.args[k], b, o.seed * 7919 + k + 1);
    std::vector<Tensor> all;
    for (auto &t : inputs)
      all.push_back(std::move(*t));
    auto params = loadWeights(g, o.weights, b, o.seed);
    std::vector<Tensor> outputs = interpreter.run(all, params, o.binding);
    std::error_code ec;
    std::filesystem::create_directories(o.outDir, ec);
    if (ec)
      throw DataError(fmt::format("cannot create '{}': {}", o.outDir, ec.message()));
    for (size_t k = 0; k < outputs.size(); ++k) {
      std::string path = (std::filesystem::path(o.outDir) / fmt::format("out{}.npy", k)).string();
      rt::writeNpy(path, outputs[k]);
      std::cout << fmt::format("out{}: {} -> {}\n", k, outputs[k].typeText(), path);
    }
    if (o.stats) {
      std::string dims;
      for (auto &[name, v] : interpreter.binding())
        dims += fmt::format("{}{} = {}", dims.empty() ? "" : ", ", name, v);
      if (!compiled)
        std::cout << fmt::format("device: reference interpreter\ndims: {}\nops executed: {}\n", dims, interpreter.opsExecuted());
      else
        std::cout << fmt::format("device: {}\ndims: {}\nkernels compiled: {}\nkernels launched: {}\nhost ops: {}\n",
                                 compiled->device().name(), dims, o.artifact ? 0 : compiled->kernels().size(),
                                 compiled->kernelsLaunched(), compiled->hostOps());
    }
  } catch (const DataError &e) {
    std::cerr << "dnnc: error: " << e.what() << "\n";
    return kUserError;
  }
  return kOk;
}

} // namespace

int runModel(Program &p, const RunOptions &o) {
  if (!knownDevice(o.device)) {
    std::cerr << "dnnc: error: unknown device '" << o.device << "' (devices: auto, cpu, cuda, ref)\n";
    return kUsage;
  }
  std::string err;
  ModelInfo *m = selectModel(p, o.model, err);
  if (!m || !(err = checkBinding(*m, o.binding)).empty()) {
    std::cerr << "dnnc: error: " << err << "\n";
    return kUserError;
  }
  const ir::Graph &g = *m->graph;
  if (o.threads > 0)
    rt::ThreadPool::setGlobalThreads(static_cast<unsigned>(o.threads));
  // Compiled devices run every statically shaped op as a kernel; auto takes the GPU when
  // one works.
  std::unique_ptr<backend::CpuExecutable> cpu;
  std::unique_ptr<rt::Executable> gpu;
  rt::Executable *compiled = nullptr;
  try {
    if (o.device != "ref") {
      rt::CudaProbe probe;
      if (o.device != "cpu")
        probe = rt::probeCuda();
      if (o.device == "cuda" && !probe.ok)
        throw DataError("--device cuda: " + probe.error);
      if (probe.ok) {
        gpu = backend::compileForCuda(g, backend::archFor(probe));
        compiled = gpu.get();
      } else {
        cpu = std::make_unique<backend::CpuExecutable>(g);
        compiled = &cpu->executable();
      }
    }
  } catch (const DataError &e) {
    std::cerr << "dnnc: error: " << e.what() << "\n";
    return kUserError;
  }
  return execute(g, compiled, o);
}

int runArtifact(const std::string &path, const RunOptions &o) {
  if (!knownDevice(o.device)) {
    std::cerr << "dnnc: error: unknown device '" << o.device << "' (devices: auto, cpu, cuda, ref)\n";
    return kUsage;
  }
  if (o.threads > 0)
    rt::ThreadPool::setGlobalThreads(static_cast<unsigned>(o.threads));
  std::unique_ptr<rt::Executable> exe;
  try {
    rt::ArtifactInfo info;
    exe = rt::loadArtifact(path, &info);
    if (o.device != "auto" && o.device != info.target)
      throw DataError(fmt::format("'{}' was built for {}, not for --device {} (rebuild it with --target {})", path,
                                  info.target, o.device, o.device == "ref" ? "cpu" : o.device));
    for (auto &[name, value] : o.binding)
      if (!exe->graph().dimRanges.count(name))
        throw DataError(fmt::format("model '{}' has no dim '{}'", exe->graph().name, name));
  } catch (const DataError &e) {
    std::cerr << "dnnc: error: " << e.what() << "\n";
    return kUserError;
  }
  RunOptions withArtifact = o;
  withArtifact.artifact = true;
  return execute(exe->graph(), exe.get(), withArtifact);
}

} // namespace dnnc::tool
