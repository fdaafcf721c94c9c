// The training loop of `dnnc train` and dnnc.train() (see Training.h): batches, checks,
// the compiled step run over them, checkpoints and resuming.
#include "api/Training.h"

#include "api/Models.h"
#include "base/TensorIO.h"
#include "ir/graph/Serialize.h"
#include "ir/interp/Interpreter.h"
#include "runtime/ModelIO.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

namespace dnnc::api {

using rt::Tensor;
namespace fs = std::filesystem;

namespace {

// Rows [begin, end) of `t` along its first axis.
Tensor rows(const Tensor &t, int64_t begin, int64_t end) {
  std::vector<int64_t> shape = t.shape;
  shape[0] = end - begin;
  Tensor out = Tensor::zeros(t.dtype, shape);
  size_t row = t.shape[0] ? t.byteSize() / static_cast<size_t>(t.shape[0]) : 0;
  std::memcpy(out.data(), t.data() + static_cast<size_t>(begin) * row, out.byteSize());
  return out;
}

// Where the batches come from: `perEpoch` batches, batch(s) the inputs (model order) of
// step s (0-based, cycling through the epoch), and where batch s was read from (for errors).
struct Batches {
  int64_t perEpoch = 0;
  std::function<std::vector<Tensor>(int64_t)> batch;
  std::function<std::string(int64_t)> origin; // a folder, or "" for sliced .npy files
  // The steps whose shapes differ enough to need checking: all of a folder's, the first
  // and last of sliced files (every other batch has the first's shape).
  std::vector<int64_t> distinct;
};

// The index of the model input `name`, or a DataError listing the inputs.
size_t inputIndex(const ir::Graph &g, const ir::TrainStep &step, const std::string &name, const std::string &where) {
  for (size_t k = 0; k < step.modelInputs; ++k)
    if (g.body.args[k]->name == name)
      return k;
  std::string names;
  for (size_t i = 0; i < step.modelInputs; ++i)
    names += (i ? ", " : "") + g.body.args[i]->name;
  throw DataError(fmt::format("{}model '{}' has no input '{}' (its inputs: {})", where, g.name, name, names));
}

// --data NAME=X.npy for every model input: the same leading (sample) axis everywhere,
// sliced into batches of --batch samples.
Batches sliceFiles(const ir::Graph &g, const ir::TrainStep &step, const TrainConfig &o) {
  auto perInput = std::make_shared<std::vector<Tensor>>();
  std::vector<std::optional<Tensor>> given(step.modelInputs);
  for (auto &[name, path] : o.data) {
    size_t k = inputIndex(g, step, name, "");
    given[k] = rt::readNpy(path);
    if (given[k]->shape.empty())
      throw DataError(fmt::format("--data {}={}: a scalar has no sample axis", name, path));
  }
  for (auto &[name, array] : o.arrays) {
    size_t k = inputIndex(g, step, name, "");
    if (given[k])
      throw DataError(fmt::format("the data for input '{}' are given twice", name));
    if (array.shape.empty())
      throw DataError(fmt::format("the data for input '{}' are a scalar, which has no sample axis", name));
    given[k] = array;
  }
  int64_t samples = 0;
  for (size_t k = 0; k < step.modelInputs; ++k) {
    const std::string &name = g.body.args[k]->name;
    if (!given[k])
      throw DataError(fmt::format("no {} for input '{}' of model '{}'", o.dataOption, name, g.name));
    int64_t n = given[k]->shape[0];
    if (k && n != samples)
      throw DataError(fmt::format("--data {} has {} samples, but {} has {}", name, n, g.body.args[0]->name, samples));
    samples = n;
    perInput->push_back(std::move(*given[k]));
  }
  if (samples == 0)
    throw DataError("the data have no samples");
  int64_t batch = std::min<int64_t>(o.batch, samples);
  Batches b;
  b.perEpoch = (samples + batch - 1) / batch;
  b.batch = [perInput, batch, samples, perEpoch = b.perEpoch](int64_t s) {
    int64_t begin = (s % perEpoch) * batch, end = std::min(begin + batch, samples);
    std::vector<Tensor> in;
    for (const Tensor &t : *perInput)
      in.push_back(rows(t, begin, end));
    return in;
  };
  b.origin = [](int64_t) { return std::string(); };
  b.distinct = {0, b.perEpoch - 1};
  return b;
}

// --data DIR: step folders 000000, 000001, ... (consecutive from 0), each with NAME.npy
// for every model input and nothing else of that kind. All are read now (and checked by
// the caller), so a bad file stops training before it starts.
Batches readFolder(const ir::Graph &g, const ir::TrainStep &step, const std::string &dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw DataError(fmt::format("--data {}: not a folder (give NAME=FILE.npy, or a folder of step folders 000000, 000001, ...)", dir));
  std::vector<std::string> names;
  for (const fs::directory_entry &e : fs::directory_iterator(dir, ec))
    if (e.is_directory())
      names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  if (names.empty())
    throw DataError(fmt::format("--data {}: no step folders (000000, 000001, ...) in it", dir));
  auto steps = std::make_shared<std::vector<std::vector<Tensor>>>();
  auto folders = std::make_shared<std::vector<std::string>>();
  for (size_t s = 0; s < names.size(); ++s) {
    std::string want = fmt::format("{:06d}", s);
    if (names[s] != want)
      throw DataError(fmt::format("--data {}: the step folders must be numbered 000000, 000001, ... without gaps; found '{}' where '{}' "
                                  "belongs",
                                  dir, names[s], want));
    std::string folder = (fs::path(dir) / want).string();
    std::vector<std::optional<Tensor>> given(step.modelInputs);
    for (const fs::directory_entry &e : fs::directory_iterator(folder, ec)) {
      if (e.path().extension() != ".npy")
        continue;
      size_t k = inputIndex(g, step, e.path().stem().string(), e.path().string() + ": ");
      given[k] = rt::readNpy(e.path().string());
    }
    std::vector<Tensor> in;
    for (size_t k = 0; k < step.modelInputs; ++k) {
      if (!given[k])
        throw DataError(fmt::format("{}: missing (every step folder has a .npy file for each input of model '{}')",
                                    (fs::path(folder) / (g.body.args[k]->name + ".npy")).string(), g.name));
      in.push_back(std::move(*given[k]));
    }
    steps->push_back(std::move(in));
    folders->push_back(folder);
  }
  Batches b;
  b.perEpoch = static_cast<int64_t>(steps->size());
  b.batch = [steps](int64_t s) { return (*steps)[static_cast<size_t>(s % static_cast<int64_t>(steps->size()))]; };
  b.origin = [folders](int64_t s) { return (*folders)[static_cast<size_t>(s % static_cast<int64_t>(folders->size()))]; };
  for (int64_t s = 0; s < b.perEpoch; ++s)
    b.distinct.push_back(s);
  return b;
}

// Binds the model's dims to batch s as `dnnc run` binds its inputs; a DataError names the
// file (the input's .npy in its step folder) when the batch came from a folder.
ir::Binding checkBatch(const ir::Graph &g, const Batches &data, int64_t s) {
  std::vector<Tensor> in = data.batch(s);
  std::vector<const Tensor *> given;
  for (const Tensor &t : in)
    given.push_back(&t);
  given.resize(g.body.args.size(), nullptr);
  try {
    return ir::bindInputs(g, given, {});
  } catch (const DataError &e) {
    std::string folder = data.origin(s);
    if (folder.empty())
      throw;
    std::string msg = e.what();
    for (size_t k = 0; k < in.size(); ++k)
      if (msg.find(fmt::format("input '{}'", g.body.args[k]->name)) != std::string::npos)
        throw DataError(fmt::format("{}: {}", (fs::path(folder) / (g.body.args[k]->name + ".npy")).string(), msg));
    throw DataError(fmt::format("{}: {}", folder, msg)); // dims that disagree across files, or out of their range
  }
}

// Why step s's loss is not finite: the batch's first non-finite input value if it has one
// (the data, not the training, is then at fault), else divergence.
std::string whyNotFinite(const ir::Graph &g, const Batches &data, int64_t s) {
  std::vector<Tensor> in = data.batch(s);
  for (size_t k = 0; k < in.size(); ++k) {
    if (!isFloat(in[k].dtype))
      continue;
    for (size_t e = 0; e < in[k].numel(); ++e)
      if (double v = in[k].get(e); !std::isfinite(v)) {
        std::string folder = data.origin(s);
        std::string where = folder.empty() ? fmt::format("input '{}'", g.body.args[k]->name)
                                           : (fs::path(folder) / (g.body.args[k]->name + ".npy")).string();
        return fmt::format("{} has {} in this step's batch (element {}): the data are not finite", where,
                           std::isnan(v) ? "nan" : fmt::format("{}", v), e);
      }
  }
  return "training diverged (try a smaller --lr)";
}

// Output k's name in the log: its name in the signature, else its value's (`let acc =
// ...; return (loss, acc)`), else outK.
std::string metricName(const ir::Graph &g, size_t k) {
  if (k < g.outputNames.size() && !g.outputNames[k].empty())
    return g.outputNames[k];
  return !g.body.yields[k]->name.empty() ? g.body.yields[k]->name : ir::outputName(g, k);
}

// DataError unless a file can be written at `path`: its folder exists and it is not a folder.
void checkWritable(const std::string &path) {
  std::error_code ec;
  fs::path parent = fs::path(path).parent_path();
  if (fs::is_directory(path, ec))
    throw DataError(fmt::format("cannot write '{}': it is a directory", path));
  if (!parent.empty() && !fs::is_directory(parent, ec))
    throw DataError(fmt::format("cannot write '{}': the folder '{}' does not exist", path, parent.string()));
}

// Both checkpoint files, complete, announced to the hooks before and after.
void writeCheckpoint(const std::string &out, const std::map<std::string, Tensor> &params, const ir::TrainStep &step,
                     const std::vector<Tensor> &states, const std::string &optimizer, int64_t done, const TrainHooks &hooks) {
  std::map<std::string, Tensor> all = params;
  size_t at = 0;
  for (const std::string &name : step.params)
    for (size_t k = 0; k < step.statesPerParam; ++k)
      all[name + "." + step.stateNames[k]] = states[at++];
  Tensor counter = Tensor::zeros(DType::I64, {});
  counter.setInt(0, done);
  all["dnnc.step"] = counter;
  Tensor kind = Tensor::zeros(DType::I64, {});
  const std::vector<std::string> &names = ir::optimizerNames();
  kind.setInt(0, std::find(names.begin(), names.end(), optimizer) - names.begin());
  all["dnnc.optimizer"] = kind;
  if (hooks.checkpoint)
    hooks.checkpoint(true, done);
  rt::writeFilesAtomically({{out + ".state", rt::encodeSafetensors(all)}, {out, rt::encodeSafetensors(params)}});
  if (hooks.checkpoint)
    hooks.checkpoint(false, done);
}

// --resume FILE: the params (each the model's dtype and shape), the optimizer state and
// the steps done. Returns the steps done.
int64_t readCheckpoint(const std::string &path, const ir::TrainStep &step, const std::string &optimizer,
                       std::map<std::string, Tensor> &params, std::vector<Tensor> &states, bool strict, const TrainHooks &hooks) {
  std::map<std::string, Tensor> all = rt::readSafetensors(path);
  std::set<std::string> taken;
  auto take = [&](const std::string &name, DType dt, const std::vector<int64_t> &shape) {
    auto it = all.find(name);
    if (it == all.end())
      throw DataError(fmt::format("--resume {}: no tensor '{}' (is it a .state file that dnnc train --save wrote?)", path, name));
    taken.insert(name);
    Tensor want = Tensor::zeros(dt, shape);
    if (it->second.dtype != dt || it->second.shape != shape)
      throw DataError(fmt::format("--resume {}: '{}' is {}, but the model needs {}", path, name, it->second.typeText(), want.typeText()));
    return it->second;
  };
  int64_t saved = take("dnnc.optimizer", DType::I64, {}).getInt(0);
  const std::vector<std::string> &names = ir::optimizerNames();
  bool known = saved >= 0 && saved < static_cast<int64_t>(names.size());
  if (!known || names[static_cast<size_t>(saved)] != optimizer)
    throw DataError(fmt::format("--resume {}: it holds the state of --optimizer {}, not {}", path,
                                known ? names[static_cast<size_t>(saved)] : "(unknown)", optimizer));
  int64_t done = take("dnnc.step", DType::I64, {}).getInt(0);
  if (done < 0)
    throw DataError(fmt::format("--resume {}: dnnc.step is {}", path, done));
  for (auto &[name, t] : params)
    t = take(name, t.dtype, t.shape);
  size_t at = 0;
  for (const std::string &name : step.params)
    for (size_t k = 0; k < step.statesPerParam; ++k, ++at)
      states[at] = take(name + "." + step.stateNames[k], states[at].dtype, states[at].shape);
  // What the step does not take (every param is taken): another model's params and state.
  std::vector<std::string> unused;
  for (const auto &[name, t] : all)
    if (!taken.count(name))
      unused.push_back(name);
  if (!unused.empty()) {
    std::string text = fmt::format("--resume {}: {} tensor{} in it {} used by no param of this training step: {}", path,
                                   unused.size(), unused.size() == 1 ? "" : "s", unused.size() == 1 ? "is" : "are",
                                   rt::someNames(unused, 5));
    if (strict)
      throw DataError(text + " (--strict)");
    if (hooks.note)
      hooks.note(text);
  }
  return done;
}

} // namespace

TrainResult train(ir::Graph &g, const TrainConfig &o, const TrainHooks &hooks) {
  // On the reference interpreter, which returns fresh outputs, in place means nothing.
  // Without in place the same step (the same kernels and order) runs through
  // Executable::run, which returns the updates as new tensors.
  bool inPlace = o.inPlace && o.device != "ref";
  ir::TrainStep step = ir::makeTrainStep(g, o.optimizer);
  if (hooks.note)
    for (const std::string &name : step.unreached)
      hooks.note(fmt::format("param '{}' is not trained: the loss does not depend on it (PyTorch's optimizers skip a parameter "
                             "without a gradient, weight decay included)", name));
  if (!o.save.empty()) // found wanting before training, not after it
    checkWritable(o.save), checkWritable(o.save + ".state");
  Batches data = o.dataDir.empty() ? sliceFiles(g, step, o) : readFolder(g, step, o.dataDir);
  for (const std::string &out : {o.save, o.save + ".state"}) // a source or the data, read by now
    if (std::optional<std::string> read = o.save.empty() ? std::nullopt : rt::readEarlier(out))
      throw DataError(fmt::format("--save {}: '{}' is a file this command reads ('{}')", o.save, out, *read));
  int64_t steps = o.steps > 0 ? o.steps : o.epochs * data.perEpoch;
  // Every batch shape is checked before anything compiles or trains.
  ir::Binding binding;
  for (int64_t s : data.distinct)
    binding = checkBatch(g, data, s);
  // Params before compiling: an initializer's stream is its param's position in the
  // graph, which the passes may change (execution order moves params; recompute decides
  // what it moves), and the initial values must not depend on them.
  // Without --weights, training starts from the initializers (no notes: that is what they are for).
  rt::Weights loaded = rt::loadWeights(g, {o.weights, o.weights.empty(), false, o.strict, o.seed, ""}, binding);
  if (hooks.note)
    for (const std::string &note : loaded.notes)
      hooks.note(note);
  std::map<std::string, Tensor> params = std::move(loaded.params);
  backend::CompileOptions options = o.compile;
  options.constantParams = false; // each step's params are the last step's updates
  size_t compiledBefore = backend::kernelsCompiled();
  // One executable per recompute version by shape (ir/transforms/Recompute.h), all
  // compiled now: each step runs its binding's, and no batch shape compiles anything.
  std::vector<std::unique_ptr<rt::Executable>> compiled;
  std::vector<std::unique_ptr<ir::Graph>> versionGraphs;
  ir::RecomputeReport decisions;
  // Compiling changes g: the other versions compile copies of it as it is now (the
  // reference interpreter has no versions, so it needs none).
  std::unique_ptr<ir::Graph> pristine = o.device == "ref" ? nullptr : ir::cloneGraph(g);
  size_t firstVersionKernels = 0; // what emit --train shows: the step of version 1
  if (auto exe = compileForDevice(g, o.device, options, "--device ", &decisions)) {
    compiled.push_back(std::move(exe));
    firstVersionKernels = backend::kernelsCompiled() - compiledBefore;
    for (size_t v = 1; v < decisions.versions.size(); ++v) {
      versionGraphs.push_back(ir::cloneGraph(*pristine));
      backend::CompileOptions version = options;
      version.passes.recompute.version = v;
      compiled.push_back(compileForDevice(*versionGraphs.back(), o.device, version));
    }
  }
  pristine.reset();
  if (hooks.compiled)
    hooks.compiled(compiled.empty() ? "ref" : compiled[0]->device().name(), firstVersionKernels);
  if (hooks.versions && compiled.size() > 1)
    hooks.versions(ir::printVersions(decisions) + fmt::format("  the other versions: {} kernels more\n",
                                                              backend::kernelsCompiled() - compiledBefore - firstVersionKernels));
  TrainResult result;
  result.stepsPerVersion.assign(compiled.size(), 0);
  std::vector<sym::ExprRef> arenas;
  for (const auto &exe : compiled)
    arenas.push_back(exe->arenaPlan().bytes);
  std::unique_ptr<interp::Interpreter> oracle;
  if (compiled.empty())
    oracle = std::make_unique<interp::Interpreter>(g);
  std::vector<Tensor> states;
  for (const std::string &name : step.params)
    for (size_t k = 0; k < step.statesPerParam; ++k)
      states.push_back(Tensor::zeros(params.at(name).dtype, params.at(name).shape));
  int64_t first = 0;
  if (!o.resume.empty())
    first = readCheckpoint(o.resume, step, o.optimizerName, params, states, o.strict, hooks);
  if (first >= steps)
    throw DataError(fmt::format("--resume {}: it is already at step {}, and this run ends at step {} (--steps and --epochs count "
                                "from the start of training, resumed steps included)",
                                o.resume, first, steps));
  const ir::Optimizer &opt = o.optimizer;
  size_t compiledAfterFirst = 0;
  // In place (each version's updates(): those its compiled order made safe): the updated
  // params and state go over the old ones, the loss and metrics into `out`, all kept from
  // step to step; on a GPU the params and state stay on it until synced for a checkpoint
  // or until another version runs. Updates an order could not make safe come out in `out`
  // as the other outputs do.
  // (one all-false entry for the reference interpreter, which updates nothing in place)
  std::vector<std::vector<bool>> updatedInPlace(std::max<size_t>(compiled.size(), 1), std::vector<bool>(g.body.yields.size(), false));
  for (size_t v = 0; v < compiled.size() && inPlace; ++v)
    for (const ir::Graph::Update &u : compiled[v]->updates())
      updatedInPlace[v][u.output] = true;
  size_t resident = SIZE_MAX; // the version whose device holds the newest params and state
  auto syncToHost = [&] {
    if (resident == SIZE_MAX)
      return;
    std::vector<const Tensor *> all;
    for (const auto &[name, t] : params)
      all.push_back(&t);
    for (const Tensor &st : states)
      all.push_back(&st);
    compiled[resident]->syncToHost(all);
  };
  std::vector<Tensor> out;
  for (int64_t s = first; s < steps; ++s) {
    auto start = std::chrono::steady_clock::now();
    std::vector<Tensor> inputs = data.batch(s);
    size_t version = 0;
    if (compiled.size() > 1) {
      std::vector<const Tensor *> given;
      for (const Tensor &x : inputs)
        given.push_back(&x);
      given.resize(g.body.args.size(), nullptr);
      version = decisions.versionAt(ir::bindInputs(g, given, {}), arenas);
    }
    double t = static_cast<double>(s + 1);
    std::vector<double> scalars{o.lr};
    if (step.scalars.size() == 3) // Adam: lr / (1 − β1^t) and sqrt(1 − β2^t), as torch computes them
      scalars.push_back(o.lr / (1 - std::pow(opt.beta1, t))), scalars.push_back(std::sqrt(1 - std::pow(opt.beta2, t)));
    for (double v : scalars) {
      Tensor x = Tensor::zeros(DType::F32, {});
      x.set(0, v);
      inputs.push_back(std::move(x));
    }
    if (step.rng) { // dropout's key: --seed and the step, so each step draws fresh masks
      Tensor key = Tensor::zeros(DType::I64, {2});
      key.setInt(0, o.seed), key.setInt(1, s + 1);
      inputs.push_back(std::move(key));
    }
    size_t firstState = inputs.size();
    for (Tensor &st : states) // moved, not copied: their memory stays where it is
      inputs.push_back(std::move(st));
    if (compiled.empty()) {
      out = oracle->run(inputs, params, {});
    } else if (inPlace) {
      if (resident != SIZE_MAX && resident != version) // another version's device has the newest values
        compiled[resident]->releaseResident();
      resident = version;
      compiled[version]->runInPlace(inputs, params, out, {});
    } else {
      out = compiled[version]->run(inputs, params, {});
    }
    if (!compiled.empty())
      ++result.stepsPerVersion[version];
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (s == first) {
      compiledAfterFirst = backend::kernelsCompiled();
      if (hooks.profiled)
        for (const auto &exe : compiled)
          exe->setProfiling(true);
    } else if (!compiled.empty()) {
      result.outputAllocationsAfterFirst += compiled[version]->outputAllocations();
    }
    double loss = out[0].get(0);
    if (!std::isfinite(loss))
      throw DataError(fmt::format("the loss is {} at step {}: {}", std::isnan(loss) ? "nan" : fmt::format("{}", loss), s + 1,
                                  whyNotFinite(g, data, s)));
    for (size_t k = 0; k < states.size(); ++k)
      states[k] = std::move(inputs[firstState + k]);
    const std::vector<bool> &inPlaceOutputs = updatedInPlace[version];
    size_t at = 1 + step.metrics;
    for (const std::string &name : step.params) {
      if (!inPlaceOutputs[at])
        params[name] = std::move(out[at]);
      ++at;
    }
    for (Tensor &st : states) {
      if (!inPlaceOutputs[at])
        st = std::move(out[at]);
      ++at;
    }
    if (hooks.step) {
      StepReport report{s + 1, steps, loss, ms, {}};
      for (size_t k = 0; k < step.metrics; ++k)
        if (out[1 + k].numel() == 1)
          report.metrics.emplace_back(metricName(g, 1 + k), out[1 + k].get(0));
      hooks.step(report);
    }
    if (!o.save.empty() && ((o.saveEvery > 0 && (s + 1) % o.saveEvery == 0) || s + 1 == steps)) {
      syncToHost();
      writeCheckpoint(o.save, params, step, states, o.optimizerName, s + 1, hooks);
    }
  }
  syncToHost();
  if (hooks.profiled)
    for (size_t v = 0; v < compiled.size(); ++v)
      if (compiled[v]->profile().runs > 0)
        hooks.profiled(v == 0 ? g : *versionGraphs[v - 1], *compiled[v]);
  if (!compiled.empty()) {
    result.updatedInPlace = inPlace ? compiled[0]->updates().size() : 0;
    result.updatable = step.params.size() * (1 + step.statesPerParam);
    result.copies = compiled[0]->device().copies();
  }
  result.params = std::move(params);
  result.steps = steps;
  result.kernelsAfterFirst = backend::kernelsCompiled() - compiledAfterFirst;
  return result;
}

} // namespace dnnc::api
