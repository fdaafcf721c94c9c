// `dnnc train` (spec training.md §12): trains a model's params, one compiled training step
// (ir/transforms/TrainStep.h) run batch after batch, at whatever shapes each batch has (a
// short last batch, or per-step batches from a folder with their own B and T: the dims
// are symbolic, nothing recompiles).
//
// Contract: every batch is read and checked against the model's input types (dtype, rank,
// dims consistent and in range, as `dnnc run` checks inputs) before the first step, so
// nothing is trained on a bad batch. Checkpoints (`--save OUT`, every `--save-every K`
// steps and after the last) are two safetensors files, each written to a temporary file
// and renamed: OUT holds the params (what `dnnc run --weights` reads) and OUT.state the
// params, the optimizer's state tensors (`NAME.exp_avg`, `NAME.exp_avg_sq`,
// `NAME.momentum_buffer`, PyTorch's names), `dnnc.step` (steps done, i64) and
// `dnnc.optimizer` (its index in sgd, momentum, adam, adamw; i64). `--resume OUT.state`
// continues from there exactly (the same batches and Adam bias corrections the
// uninterrupted run would have used). SIGINT while a checkpoint is being written is
// held until both files are complete; at any other time it ends the process at once, so
// an interrupted run leaves the last complete checkpoint or none, never a partial file.
// The updated params and optimizer state are written over the old ones in place
// (Executable::runInPlace; on a GPU they stay there between steps and are synced back
// before a checkpoint); --no-in-place runs the same compiled step through
// Executable::run and moves the new tensors in, with bit-identical results.
#include "ir/interp/Interpreter.h"
#include "ir/transforms/TrainStep.h"
#include "runtime/ModelIO.h"
#include "base/TensorIO.h"
#include "tools/dnnc/Driver.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>

namespace dnnc::tool {

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
Batches sliceFiles(const ir::Graph &g, const ir::TrainStep &step, const TrainOptions &o) {
  auto perInput = std::make_shared<std::vector<Tensor>>();
  std::vector<std::optional<Tensor>> given(step.modelInputs);
  for (auto &[name, path] : o.data) {
    size_t k = inputIndex(g, step, name, "");
    given[k] = rt::readNpy(path);
    if (given[k]->shape.empty())
      throw DataError(fmt::format("--data {}={}: a scalar has no sample axis", name, path));
  }
  int64_t samples = 0;
  for (size_t k = 0; k < step.modelInputs; ++k) {
    const std::string &name = g.body.args[k]->name;
    if (!given[k])
      throw DataError(fmt::format("no --data for input '{}' of model '{}'", name, g.name));
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

// SIGINT: held while a checkpoint is written, else the end of the process with `gLast`
// (where the last complete checkpoint is) on stderr.
volatile std::sig_atomic_t gWriting = 0, gInterrupted = 0;
char gLast[512] = "dnnc: interrupted; no checkpoint was written\n";

extern "C" void onInterrupt(int) {
  if (gWriting) {
    gInterrupted = 1;
    return;
  }
  ssize_t ignored = ::write(STDERR_FILENO, gLast, std::strlen(gLast));
  (void)ignored;
  std::_Exit(130);
}

// Both checkpoint files, complete, with SIGINT held meanwhile.
void writeCheckpoint(const std::string &out, const std::map<std::string, Tensor> &params, const ir::TrainStep &step,
                     const std::vector<Tensor> &states, const std::string &optimizer, int64_t done) {
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
  gWriting = 1;
  rt::writeSafetensors(out + ".state", all);
  rt::writeSafetensors(out, params);
  std::string last = fmt::format("dnnc: interrupted; the last complete checkpoint is step {} in {} (resume with --resume {}.state)\n",
                                 done, out, out);
  std::snprintf(gLast, sizeof gLast, "%s", last.c_str());
  gWriting = 0;
  if (gInterrupted)
    onInterrupt(SIGINT);
}

// --resume FILE: the params (each the model's dtype and shape), the optimizer state and
// the steps done. Returns the steps done.
int64_t readCheckpoint(const std::string &path, const ir::TrainStep &step, const std::string &optimizer,
                       std::map<std::string, Tensor> &params, std::vector<Tensor> &states) {
  std::map<std::string, Tensor> all = rt::readSafetensors(path);
  auto take = [&](const std::string &name, DType dt, const std::vector<int64_t> &shape) {
    auto it = all.find(name);
    if (it == all.end())
      throw DataError(fmt::format("--resume {}: no tensor '{}' (is it a .state file that dnnc train --save wrote?)", path, name));
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
  return done;
}

// The progress bar on a terminal's stderr: redrawn in place, erased at the end.
void drawProgress(int64_t done, int64_t total, double loss) {
  const int width = 30;
  int filled = static_cast<int>(width * done / std::max<int64_t>(total, 1));
  std::cerr << fmt::format("\r[{}{}] {}/{}  loss {:.4f}\x1b[K", std::string(static_cast<size_t>(filled), '#'),
                           std::string(static_cast<size_t>(width - filled), '.'), done, total, loss)
            << std::flush;
}

} // namespace

int trainModel(Program &p, const TrainOptions &o) {
  std::string err;
  ModelInfo *m = selectModel(p, o.model, err);
  if (!m) {
    std::cerr << "dnnc: error: " << err << "\n";
    return kUserError;
  }
  ir::Graph &g = *m->graph;
  bool progress = !o.json && isatty(STDERR_FILENO);
  try {
    // On the reference interpreter, which returns fresh outputs, in place means nothing.
    // --no-in-place compiles the same step (the same kernels and order) and only runs it
    // with Executable::run, which returns the updates as new tensors.
    bool inPlace = o.inPlace && o.device != "ref";
    ir::TrainStep step = ir::makeTrainStep(g, o.optimizer);
    Batches data = o.dataDir.empty() ? sliceFiles(g, step, o) : readFolder(g, step, o.dataDir);
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
    for (const std::string &note : loaded.notes)
      std::cerr << "dnnc: note: " << note << "\n";
    std::map<std::string, Tensor> params = std::move(loaded.params);
    std::unique_ptr<rt::Executable> compiled;
    backend::CompileOptions options = o.compile;
    options.constantParams = false; // each step's params are the last step's updates
    size_t compiledBefore = backend::kernelsCompiled();
    if (o.device == "ref") {
      ir::optimize(g, options.passes);
    } else {
      const backend::Target *target = backend::findTarget(o.device == "auto" ? "cuda" : o.device);
      if (std::string why = target->probe(options.target); !why.empty()) {
        if (o.device != "auto")
          throw DataError(fmt::format("--device {}: {}", o.device, why));
        target = backend::findTarget("cpu");
      }
      compiled = backend::compile(g, *target, options);
    }
    if (o.verbose)
      std::cerr << fmt::format("compiled the training step for {}: {} kernels\n", compiled ? compiled->device().name() : "ref",
                               backend::kernelsCompiled() - compiledBefore);
    std::unique_ptr<interp::Interpreter> oracle;
    if (!compiled)
      oracle = std::make_unique<interp::Interpreter>(g);
    std::vector<Tensor> states;
    for (const std::string &name : step.params)
      for (size_t k = 0; k < step.statesPerParam; ++k)
        states.push_back(Tensor::zeros(params.at(name).dtype, params.at(name).shape));
    int64_t first = 0;
    if (!o.resume.empty())
      first = readCheckpoint(o.resume, step, o.optimizerName, params, states);
    if (first >= steps)
      throw DataError(fmt::format("--resume {}: it is already at step {}, and this run ends at step {} (--steps and --epochs count "
                                  "from the start of training, resumed steps included)",
                                  o.resume, first, steps));
    if (!o.save.empty())
      std::signal(SIGINT, onInterrupt);
    const ir::Optimizer &opt = o.optimizer;
    size_t compiledAfterFirst = 0, allocationsAfterFirst = 0;
    // In place (compiled->updates(): those the compiled order made safe): the updated
    // params and state go over the old ones, the loss and metrics into `out`, all kept
    // from step to step; on a GPU the params and state stay on it until synced for a
    // checkpoint. Updates the order could not make safe come out in `out` as others do.
    std::vector<bool> updatedInPlace(g.body.yields.size(), false);
    if (compiled && inPlace)
      for (const ir::Graph::Update &u : compiled->updates())
        updatedInPlace[u.output] = true;
    auto syncToHost = [&] {
      if (!compiled || !inPlace)
        return;
      std::vector<const Tensor *> all;
      for (const auto &[name, t] : params)
        all.push_back(&t);
      for (const Tensor &st : states)
        all.push_back(&st);
      compiled->syncToHost(all);
    };
    std::vector<Tensor> out;
    for (int64_t s = first; s < steps; ++s) {
      auto start = std::chrono::steady_clock::now();
      std::vector<Tensor> inputs = data.batch(s);
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
      if (!compiled)
        out = oracle->run(inputs, params, {});
      else if (inPlace)
        compiled->runInPlace(inputs, params, out, {});
      else
        out = compiled->run(inputs, params, {});
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (s == first)
        compiledAfterFirst = backend::kernelsCompiled();
      else if (compiled)
        allocationsAfterFirst += compiled->outputAllocations();
      double loss = out[0].get(0);
      if (!std::isfinite(loss))
        throw DataError(fmt::format("the loss is {} at step {}: {}", std::isnan(loss) ? "nan" : fmt::format("{}", loss), s + 1,
                                    whyNotFinite(g, data, s)));
      for (size_t k = 0; k < states.size(); ++k)
        states[k] = std::move(inputs[firstState + k]);
      size_t at = 1 + step.metrics;
      for (const std::string &name : step.params) {
        if (!updatedInPlace[at])
          params[name] = std::move(out[at]);
        ++at;
      }
      for (Tensor &st : states) {
        if (!updatedInPlace[at])
          st = std::move(out[at]);
        ++at;
      }
      if ((s + 1) % o.logEvery == 0 || s + 1 == steps) {
        std::vector<std::pair<std::string, double>> metrics;
        for (size_t k = 0; k < step.metrics; ++k)
          if (out[1 + k].numel() == 1)
            metrics.emplace_back(g.body.yields.size() > 1 + k && !g.body.yields[1 + k]->name.empty() ? g.body.yields[1 + k]->name
                                                                                                      : fmt::format("out{}", 1 + k),
                                 out[1 + k].get(0));
        std::string line;
        if (o.json) {
          for (auto &[name, v] : metrics)
            line += fmt::format(", \"{}\": {}", name, v);
          line = fmt::format("{{\"step\": {}, \"loss\": {}, \"ms\": {:.3f}{}}}\n", s + 1, loss, ms, line);
        } else {
          for (auto &[name, v] : metrics)
            line += fmt::format("  {} {:.4f}", name, v);
          line = fmt::format("step {}/{}  loss {:.4f}  {:.1f} ms/step{}\n", s + 1, steps, loss, ms, line);
        }
        if (progress)
          std::cerr << "\r\x1b[K" << std::flush; // the log line goes where the bar was
        std::cout << line << std::flush;
      }
      if (progress)
        drawProgress(s + 1, steps, loss);
      if (!o.save.empty() && ((o.saveEvery > 0 && (s + 1) % o.saveEvery == 0) || s + 1 == steps)) {
        syncToHost();
        writeCheckpoint(o.save, params, step, states, o.optimizerName, s + 1);
      }
    }
    syncToHost();
    if (progress)
      std::cerr << "\r\x1b[K" << std::flush;
    if (o.verbose) {
      std::cerr << fmt::format("kernels compiled after the first step: {}\n", backend::kernelsCompiled() - compiledAfterFirst);
      if (compiled) {
        size_t updates = inPlace ? compiled->updates().size() : 0, outputs = step.params.size() * (1 + step.statesPerParam);
        std::cerr << fmt::format("updated in place: {} of {} params and state tensors; output allocations after the first step: {}\n",
                                 updates, outputs, allocationsAfterFirst);
        if (std::string copies = compiled->device().copies(); !copies.empty())
          std::cerr << fmt::format("host-device copies: {}\n", copies);
      }
    }
    if (!o.save.empty() && !o.json)
      std::cout << fmt::format("saved {} params to {} (optimizer state and step for --resume: {}.state)\n", params.size(), o.save,
                               o.save);
  } catch (const DataError &e) {
    if (progress)
      std::cerr << "\r\x1b[K";
    std::cerr << "dnnc: error: " << e.what() << "\n";
    return kUserError;
  }
  return kOk;
}

} // namespace dnnc::tool
