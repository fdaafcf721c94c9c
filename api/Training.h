// Training a model's params (spec training.md §12) as a library: `dnnc train` and the
// Python module's dnnc.train() both run this loop, so they train alike step for step.
// One compiled training step (ir/transforms/TrainStep.h) runs batch after batch, at
// whatever shapes each batch has (a short last batch, or per-step batches from a folder
// with their own B and T: the dims are symbolic, nothing recompiles).
//
// Contract: every batch is read and checked against the model's input types (dtype, rank,
// dims consistent and in range, as `dnnc run` checks inputs) before the first step, so
// nothing is trained on a bad batch. Checkpoints (`save`, every `saveEvery` steps and
// after the last) are two safetensors files, each written to a temporary file and
// renamed: SAVE holds the params (what `dnnc run --weights` reads) and SAVE.state the
// params, the optimizer's state tensors (`NAME.exp_avg`, `NAME.exp_avg_sq`,
// `NAME.momentum_buffer`, PyTorch's names), `dnnc.step` (steps done, i64) and
// `dnnc.optimizer` (its index in sgd, momentum, adam, adamw; i64). `resume` continues
// from a .state file exactly (the same batches and Adam bias corrections the
// uninterrupted run would have used). Nothing here prints: notes and step reports go to
// the caller's hooks, errors are DataErrors.
#pragma once

#include "backend/Compile.h"
#include "base/Tensor.h"
#include "ir/transforms/TrainStep.h"

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace dnnc::api {

struct TrainConfig {
  std::string save, resume, device = "auto";
  std::vector<std::string> weights; // as dnnc run's; none: each param from its initializer
  bool strict = false;
  // The data: NAME=FILE.npy files and NAME=array tensors (together one per model input,
  // the first axis the sample axis, sliced into batches of `batch`), or a folder of
  // per-step batches DIR/000000/NAME.npy, ...
  std::vector<std::pair<std::string, std::string>> data;
  std::vector<std::pair<std::string, rt::Tensor>> arrays;
  std::string dataDir;
  std::string dataOption = "--data"; // how the caller names the data in errors
  int64_t batch = 32, epochs = 1, steps = 0, saveEvery = 0;
  double lr = 1e-3;
  ir::Optimizer optimizer;
  std::string optimizerName = "sgd";
  uint64_t seed = 0;
  // Updated params and optimizer state written over the old ones in place (false: as the
  // step's outputs, copied back: --no-in-place, to compare against).
  bool inPlace = true;
  backend::CompileOptions compile;
};

// One step's report: its number (from 1), the run's last step, the loss, the step's time
// and the model's scalar metrics (its outputs after the loss, by name).
struct StepReport {
  int64_t step = 0, steps = 0;
  double loss = 0, ms = 0;
  std::vector<std::pair<std::string, double>> metrics;
};

struct TrainHooks {
  std::function<void(const std::string &)> note;              // for stderr: the weights' unused tensors
  std::function<void(const std::string &, size_t)> compiled;  // the device, and the kernels its step compiled
  std::function<void(const std::string &)> versions;          // the recompute versions by shape, when there are several
  std::function<void(const StepReport &)> step;                // after every step
  // Around each checkpoint: true before its files are written, false once both are
  // complete (with the steps they hold): the CLI holds SIGINT in between.
  std::function<void(bool, int64_t)> checkpoint;
  // Given, each compiled step's executable times its kernels from the second step on (the
  // first compiles and warms up), and after the last step this is called for each
  // recompute version that ran a timed step: its step graph and executable (`dnnc train
  // --profile` prints Executable::profile() as `dnnc run --profile` does).
  std::function<void(const ir::Graph &, rt::Executable &)> profiled;
};

struct TrainResult {
  std::map<std::string, rt::Tensor> params; // the trained params, by name
  int64_t steps = 0;                         // the last step's number
  size_t kernelsAfterFirst = 0;              // kernels compiled after the first step (none: no batch shape recompiled)
  std::vector<int64_t> stepsPerVersion;      // steps run by each recompute version by shape (ir/transforms/Recompute.h)
  // In place (compiled devices): the updates written in place of the params and state
  // tensors (the first version's), of `updatable` in all; output buffers the executor
  // allocated after the first step; the device's host-device copies ("" on the CPU).
  size_t updatedInPlace = 0, updatable = 0, outputAllocationsAfterFirst = 0;
  std::string copies;
};

// Trains `g` (rewritten in place into its training step) on the data of `config`.
TrainResult train(ir::Graph &g, const TrainConfig &config, const TrainHooks &hooks);

} // namespace dnnc::api
