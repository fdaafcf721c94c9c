// `dnnc run`: runs a model (compiled now, or a built artifact) on .npy inputs and
// .safetensors weights (or seeded random ones) and writes its outputs as .npy files.
#include "ir/interp/Interpreter.h"
#include "runtime/Artifact.h"
#include "runtime/ModelIO.h"
#include "base/TensorIO.h"
#include "tools/dnnc/Driver.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <unistd.h>
#include <iostream>

namespace dnnc::tool {

using rt::Tensor;

namespace {

namespace fs = std::filesystem;

// Writes each output as NAME.npy (its name in the model's signature, else out0, out1, ...)
// into `dir` all or nothing: every file is written into a private folder inside `dir`
// first, and only when all of them are complete are they moved into place. Nothing else in
// `dir` is touched: outK.npy files this run did not write (an earlier run's out2.npy, or a
// file of the user's, the --input just read among them: stale outputs were once deleted)
// are named in a note instead. Returns the lines that report each output.
std::vector<std::string> writeOutputs(const ir::Graph &g, const std::vector<Tensor> &outputs, const std::string &dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw DataError(fmt::format("cannot create '{}': {}", dir, ec.message()));
  fs::path staging = fs::path(dir) / fmt::format(".dnnc-out-{}", ::getpid());
  fs::remove_all(staging, ec);
  if (!fs::create_directory(staging, ec) || ec)
    throw DataError(fmt::format("cannot write into '{}': {}", dir, ec ? ec.message() : "it exists"));
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ignored;
      fs::remove_all(p, ignored);
    }
  } cleanup{staging};
  std::vector<std::string> lines;
  std::vector<std::string> files;
  for (size_t k = 0; k < outputs.size(); ++k)
    files.push_back(ir::outputName(g, k) + ".npy");
  for (size_t k = 0; k < outputs.size(); ++k)
    rt::writeNpy((staging / files[k]).string(), outputs[k]);
  for (const std::string &file : files) { // what would stop a move, before any is made
    fs::path path = fs::path(dir) / file;
    if (fs::is_directory(path, ec))
      throw DataError(fmt::format("cannot write '{}': it is a directory", path.string()));
  }
  std::vector<std::pair<std::string, std::string>> moves;
  for (size_t k = 0; k < outputs.size(); ++k) {
    fs::path path = fs::path(dir) / files[k];
    moves.push_back({(staging / files[k]).string(), path.string()});
    lines.push_back(fmt::format("{}: {} -> {}", ir::outputName(g, k), outputs[k].typeText(), path.string()));
  }
  rt::moveAllIntoPlace(moves); // all or none: a failed move puts the earlier outputs' files back
  std::vector<std::string> others;
  for (const fs::directory_entry &e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.size() > 7 && name.rfind("out", 0) == 0 && name.substr(name.size() - 4) == ".npy" &&
        std::all_of(name.begin() + 3, name.end() - 4, [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) &&
        std::find(files.begin(), files.end(), name) == files.end())
      others.push_back(name);
  }
  std::sort(others.begin(), others.end());
  if (!others.empty())
    std::cerr << fmt::format("dnnc: note: {} in '{}' {} not written by this run\n", fmt::join(others, ", "), dir,
                             others.size() == 1 ? "was" : "were");
  return lines;
}

// Runs `g` on `compiled` (null: the reference interpreter): reads or makes the inputs and
// weights, runs, and writes the outputs only once everything has succeeded.
int execute(const ir::Graph &g, rt::Executable *compiled, const RunOptions &o) {
  try {
    for (size_t k = 0; k < g.body.yields.size(); ++k) // found before the run, not after it
      if (g.body.yields[k]->type.dtype == DType::BF16)
        throw DataError(fmt::format("output '{}' is {}, and the .npy format has no bf16 type: return cast(..., f32) instead",
                                    ir::outputName(g, k), g.body.yields[k]->type.str()));
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
    std::unique_ptr<interp::Interpreter> oracle;
    if (!compiled)
      oracle = std::make_unique<interp::Interpreter>(g);
    std::vector<const Tensor *> given;
    for (auto &t : inputs)
      given.push_back(t ? &*t : nullptr);
    // Random inputs only for a demo (no --input at all) or with --random-inputs; else every
    // missing input is named at once.
    std::vector<std::string> missing;
    for (size_t k = 0; k < inputs.size(); ++k)
      if (!inputs[k])
        missing.push_back(fmt::format("'{}' ({})", g.body.args[k]->name, g.body.args[k]->type.str()));
    if (!missing.empty() && !o.inputs.empty() && !o.randomInputs)
      throw DataError(fmt::format("no --input for {} of model '{}': {}\npass --input NAME=FILE.npy for each, or "
                                  "--random-inputs for random values",
                                  missing.size() == 1 ? "an input" : fmt::format("{} inputs", missing.size()), g.name,
                                  fmt::join(missing, ", ")));
    ir::Binding b = ir::bindInputs(g, given, o.binding);
    for (size_t k = 0; k < inputs.size(); ++k)
      if (!inputs[k]) {
        inputs[k] = rt::randomInput(*g.body.args[k], b, o.seed * 7919 + k + 1);
        std::cerr << fmt::format("dnnc: note: input '{}' ({}) filled with random values (seed {}): {}\n", g.body.args[k]->name,
                                 inputs[k]->typeText(), o.seed, o.inputs.empty() ? "no --input was given" : "with --random-inputs");
      }
    std::vector<Tensor> all;
    for (auto &t : inputs)
      all.push_back(std::move(*t));
    rt::Weights loaded = rt::loadWeights(
        g, {o.weights, o.randomParams || o.weights.empty(), true, o.strict, o.seed,
            "pass --weights for each file that holds them, or --random-params to fill them from their initializers"},
        b);
    for (const std::string &note : loaded.notes)
      std::cerr << "dnnc: note: " << note << "\n";
    const std::map<std::string, Tensor> &params = loaded.params;
    auto runOnce = [&] { return compiled ? compiled->run(all, params, o.binding) : oracle->run(all, params, o.binding); };
    if (compiled && !o.profile.empty())
      compiled->setProfiling(true);
    if (compiled)
      compiled->setCompiledLoops(!o.walkLoops);
    auto firstStart = std::chrono::steady_clock::now();
    std::vector<Tensor> outputs = runOnce();
    size_t opsRun = compiled ? compiled->opsExecuted() : oracle->opsExecuted();
    size_t launched = compiled ? compiled->kernelsLaunched() : 0;
    // --repeat: the first run above warms up, with more untimed runs until 10 ms have
    // passed (bench/peers.py warms its peers as long: a core idle a moment ago runs its
    // first milliseconds slower on a VM); then each timed run is end to end.
    std::vector<double> times;
    if (o.repeat > 0)
      while (std::chrono::steady_clock::now() - firstStart < std::chrono::milliseconds(10))
        runOnce();
    if (compiled && !o.profile.empty() && o.repeat > 0)
      compiled->setProfiling(true); // the profile covers the timed runs, not the warm-up
    for (int r = 0; r < o.repeat; ++r) {
      auto start = std::chrono::steady_clock::now();
      runOnce();
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    for (const std::string &line : writeOutputs(g, outputs, o.outDir))
      std::cout << line << "\n";
    if (o.stats) {
      std::string dims;
      for (auto &[name, v] : compiled ? compiled->binding() : oracle->binding())
        dims += fmt::format("{}{} = {}", dims.empty() ? "" : ", ", name, v);
      if (!compiled) {
        std::cout << fmt::format("device: reference interpreter\ndims: {}\nops executed: {}\n", dims, opsRun);
      } else {
        std::cout << fmt::format("device: {}\ndims: {}\nkernels compiled: {}\nkernels launched: {}\nhost ops: {}\n",
                                 compiled->device().name(), dims, o.artifact ? 0 : compiled->kernels().size(), launched,
                                 opsRun - launched);
        if (std::string copies = compiled->device().copies(); !copies.empty())
          std::cout << "device copies: " << copies << "\n";
      }
      if (compiled && compiled->arenaPlan().bytes) {
        std::cout << fmt::format("arena: {} bytes = {}\n", compiled->arenaBytes(), compiled->arenaPlan().bytes->str());
        if (compiled->arenaPlan().lateBytes)
          std::cout << fmt::format("arena after sync points: {} bytes = {}\n", std::max<int64_t>(compiled->lateArenaBytes(), 0),
                                   compiled->arenaPlan().lateBytes->str());
      } else if (compiled) {
        std::cout << "arena: none (--no-memory-plan)\n";
      }
      if (!times.empty()) {
        std::sort(times.begin(), times.end());
        std::cout << fmt::format("time per run: {:.3f} ms (median of {}; min {:.3f} ms)\n", times[times.size() / 2],
                                 times.size(), times.front());
      }
    }
    if (compiled && !o.profile.empty())
      printProfile(g, *compiled, o.profile, std::cout);
  } catch (const DataError &e) {
    std::cerr << "dnnc: error: " << e.what() << "\n";
    return kUserError;
  }
  return kOk;
}

} // namespace

int runModel(Program &p, const RunOptions &o) {
  std::string err;
  ModelInfo *m = selectModel(p, o.model, err);
  if (!m || !(err = checkBinding(*m, o.binding)).empty()) {
    std::cerr << "dnnc: error: " << err << "\n";
    return kUserError;
  }
  ir::Graph &g = *m->graph;
  // Compiled devices run every statically shaped op as a kernel; auto takes the GPU when
  // one works.
  std::unique_ptr<rt::Executable> compiled; // none: the reference interpreter
  try {
    compiled = api::compileForDevice(g, o.device, o.compile);
  } catch (const DataError &e) {
    std::cerr << "dnnc: error: " << e.what() << "\n";
    return kUserError;
  }
  return execute(g, compiled.get(), o);
}

int runArtifact(const std::string &path, const RunOptions &o) {
  std::unique_ptr<rt::Executable> exe;
  try {
    rt::ArtifactInfo info;
    if (o.device == "cuda-sim" || o.device == "ref")
      throw DataError(fmt::format("--device {} runs the model's source ({}): give it the .dnn file, not an artifact", o.device,
                                  o.device == "ref" ? "on the reference interpreter" : "compiled for the simulator"));
    exe = rt::loadArtifact(path, &info, o.device);
    if (!o.model.empty() && o.model != exe->graph().name)
      throw DataError(fmt::format("'{}' holds model '{}', not '{}'", path, exe->graph().name, o.model));
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
