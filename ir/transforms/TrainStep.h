// One training step made from a model (what `dnnc train` compiles).
//
// Contract: the model's first output is the loss (a float scalar), the others are
// metrics. Every float param is trained: a `grad` op takes the loss's gradient with
// respect to all of them, and the optimizer's update (PyTorch's semantics) follows as
// ordinary ops, so the step is one graph that fuses, plans and compiles like any model.
// The step's inputs are the model's, then the optimizer's scalars (`inputs` names them),
// then `rng` where the model has a dropout, then its state tensors, param by param; its outputs are the loss, the metrics, the
// updated params (in `params` order) and the updated states (same order as the inputs).
// The params stay params: the caller passes the current values with each step. The graph
// declares each updated param and state the update of its param or state input
// (Graph::updates), so that Executable::runInPlace writes it over the old value in place
// (Executable::run still returns it as an output: `dnnc train --no-in-place`).
#pragma once

#include "ir/graph/Graph.h"

#include <optional>
#include <string>
#include <vector>

namespace dnnc::ir {

struct Optimizer {
  enum class Kind { Sgd, Momentum, Adam, AdamW } kind = Kind::Sgd;
  double weightDecay = 0, momentum = 0.9, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};

// The optimizers' names (--optimizer, --train=, :mem train), in the order a checkpoint's
// dnnc.optimizer index counts them.
const std::vector<std::string> &optimizerNames();
// An optimizer by its name, with the default hyperparameters; nullopt for any other name.
std::optional<Optimizer> parseOptimizer(const std::string &name);
std::string unknownOptimizer(const std::string &name); // the error for one

struct TrainStep {
  size_t modelInputs = 0, metrics = 0;
  std::vector<std::string> scalars; // the optimizer's scalar inputs: lr, and for Adam step_size = lr / (1 - β1^t), bc2_sqrt = sqrt(1 - β2^t)
  std::vector<std::string> params;  // the trained params
  // Float params, not frozen, that the loss does not depend on: not trained (PyTorch's
  // optimizers skip a parameter whose gradient is None, weight decay included).
  std::vector<std::string> unreached;
  size_t statesPerParam = 0;        // 0 (SGD), 1 (momentum), 2 (Adam: m, v)
  bool rng = false;                 // an input `rng` (i64[2]: --seed, the step from 1) follows the scalars (a dropout trains)
  std::vector<std::string> stateNames; // PyTorch's names of those: momentum_buffer; exp_avg, exp_avg_sq
};

// Rewrites `g` into its training step; DataError when the first output is not a float
// scalar or the model has no float param.
TrainStep makeTrainStep(Graph &g, const Optimizer &opt);

} // namespace dnnc::ir
