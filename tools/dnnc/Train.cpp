// `dnnc train` (spec training.md §12): trains a model's params on .npy data, one compiled
// training step (ir/transforms/TrainStep.h) run batch after batch, at whatever batch size
// each batch has (the last one may be short: B is a dim, nothing recompiles).
#include "ir/interp/Interpreter.h"
#include "ir/transforms/TrainStep.h"
#include "runtime/ModelIO.h"
#include "base/TensorIO.h"
#include "tools/dnnc/Driver.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>

namespace dnnc::tool {

using rt::Tensor;

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

struct Data {
  std::vector<Tensor> perInput; // by the model's input order
  int64_t samples = 0;
};

// Reads --data for every model input: same leading (sample) axis everywhere.
Data readData(const ir::Graph &g, const ir::TrainStep &step, const TrainOptions &o) {
  Data d;
  std::vector<std::optional<Tensor>> given(step.modelInputs);
  for (auto &[name, path] : o.data) {
    size_t k = 0;
    while (k < step.modelInputs && g.body.args[k]->name != name)
      ++k;
    if (k == step.modelInputs) {
      std::string names;
      for (size_t i = 0; i < step.modelInputs; ++i)
        names += (i ? ", " : "") + g.body.args[i]->name;
      throw DataError(fmt::format("model '{}' has no input '{}' (its inputs: {})", g.name, name, names));
    }
    given[k] = rt::readNpy(path);
    if (given[k]->shape.empty())
      throw DataError(fmt::format("--data {}={}: a scalar has no sample axis", name, path));
  }
  for (size_t k = 0; k < step.modelInputs; ++k) {
    const std::string &name = g.body.args[k]->name;
    if (!given[k])
      throw DataError(fmt::format("no --data for input '{}' of model '{}'", name, g.name));
    int64_t n = given[k]->shape[0];
    if (k && n != d.samples)
      throw DataError(fmt::format("--data {} has {} samples, but {} has {}", name, n, g.body.args[0]->name, d.samples));
    d.samples = n;
    d.perInput.push_back(std::move(*given[k]));
  }
  if (d.samples == 0)
    throw DataError("the data have no samples");
  return d;
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
  try {
    ir::TrainStep step = ir::makeTrainStep(g, o.optimizer);
    Data data = readData(g, step, o);
    int64_t batch = std::min<int64_t>(o.batch, data.samples);
    int64_t perEpoch = (data.samples + batch - 1) / batch;
    int64_t steps = o.steps > 0 ? o.steps : o.epochs * perEpoch;
    std::unique_ptr<rt::Executable> compiled;
    backend::CompileOptions options = o.compile;
    options.constantParams = false; // each step's params are the last step's updates
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
    std::unique_ptr<interp::Interpreter> oracle;
    if (!compiled)
      oracle = std::make_unique<interp::Interpreter>(g);
    // Every batch shape (the full one and a short last one) is checked before the first step.
    auto batchInputs = [&](int64_t s) {
      int64_t begin = (s % perEpoch) * batch, end = std::min(begin + batch, data.samples);
      std::vector<Tensor> in;
      for (const Tensor &t : data.perInput)
        in.push_back(rows(t, begin, end));
      return in;
    };
    ir::Binding binding;
    for (int64_t s : {int64_t{0}, perEpoch - 1}) {
      std::vector<Tensor> in = batchInputs(s);
      std::vector<const Tensor *> given;
      for (const Tensor &t : in)
        given.push_back(&t);
      given.resize(g.body.args.size(), nullptr);
      binding = ir::bindInputs(g, given, {});
    }
    std::map<std::string, Tensor> params = rt::loadWeights(g, o.weights, binding, o.seed);
    std::vector<Tensor> states;
    for (const std::string &name : step.params)
      for (size_t k = 0; k < step.statesPerParam; ++k)
        states.push_back(Tensor::zeros(params.at(name).dtype, params.at(name).shape));
    const ir::Optimizer &opt = o.optimizer;
    for (int64_t s = 0; s < steps; ++s) {
      auto start = std::chrono::steady_clock::now();
      std::vector<Tensor> inputs = batchInputs(s);
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
      for (Tensor &st : states) // the step's outputs replace them below
        inputs.push_back(std::move(st));
      std::vector<Tensor> out = compiled ? compiled->run(inputs, params, {}) : oracle->run(inputs, params, {});
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      double loss = out[0].get(0);
      if (!std::isfinite(loss))
        throw DataError(fmt::format("the loss is {} at step {}: training diverged (try a smaller --lr)", loss, s + 1));
      size_t at = 1 + step.metrics;
      for (const std::string &name : step.params)
        params[name] = std::move(out[at++]);
      for (Tensor &st : states)
        st = std::move(out[at++]);
      if ((s + 1) % o.logEvery == 0 || s + 1 == steps) {
        if (o.json) {
          std::string metrics;
          for (size_t k = 0; k < step.metrics; ++k)
            if (out[1 + k].numel() == 1)
              metrics += fmt::format(", \"{}\": {}", g.body.yields.size() > 1 + k && !g.body.yields[1 + k]->name.empty()
                                                          ? g.body.yields[1 + k]->name
                                                          : fmt::format("out{}", 1 + k),
                                     out[1 + k].get(0));
          std::cout << fmt::format("{{\"step\": {}, \"loss\": {}, \"ms\": {:.3f}{}}}\n", s + 1, loss, ms, metrics);
        } else {
          std::cout << fmt::format("step {}/{}  loss {:.6g}  {:.1f} ms/step\n", s + 1, steps, loss, ms);
        }
        std::cout.flush();
      }
    }
    if (!o.save.empty()) {
      rt::writeSafetensors(o.save, params);
      if (!o.json)
        std::cout << fmt::format("saved {} params to {}\n", params.size(), o.save);
    }
  } catch (const DataError &e) {
    std::cerr << "dnnc: error: " << e.what() << "\n";
    return kUserError;
  }
  return kOk;
}

} // namespace dnnc::tool
