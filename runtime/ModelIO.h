// A model's inputs and weights on the host (interop.md §15): params loaded by name from
// .safetensors files and Hugging Face shard indexes (`from "layer.{l}.w"` names stacked on
// leading axes, float tensors converted to the param's dtype), or filled from their
// initializers when the caller allows it; and seeded random inputs.
#pragma once

#include "base/Tensor.h"
#include "ir/graph/Binding.h"

#include <map>
#include <string>
#include <vector>

namespace dnnc::rt {

using ir::Binding;

// A random input for `arg` with every dim bound by `b` (floats N(0, 1), integers in
// [0, 10), bools fair coin flips); DataError naming the unbound dim otherwise.
Tensor randomInput(const ir::Value &arg, const Binding &b, uint64_t seed);

// Where a model's params come from.
struct WeightsSource {
  // .safetensors files and `*.index.json` shard indexes (their shards are read from the
  // index's folder); a tensor may be in only one of them.
  std::vector<std::string> files;
  bool fillMissing = false; // a param no file has comes from its initializer (every param, with no files)
  bool noteFilled = true;   // ... and is named in a note
  bool strict = false;      // a tensor no param uses is an error, not a note
  uint64_t seed = 0;        // for the initializers
  std::string missingHint;  // the error's last line when params are missing (how to fill them instead)
};

struct Weights {
  std::map<std::string, Tensor> params;
  std::vector<std::string> notes; // for stderr: each param filled, the tensors no param used
};

// Every param of `g` (dims evaluated under `b`). A param reads the tensor its `from` name
// gives (else its own name); placeholders stack one tensor per index on its leading axes;
// a param with a `from` name also reads a whole tensor under its own name (what `dnnc
// train --save` writes). DataError for a dtype or shape that does not fit, a corrupt file,
// and for every missing param at once (each with the files' closest names) unless
// `fillMissing`.
Weights loadWeights(const ir::Graph &g, const WeightsSource &source, const Binding &b);

// "'a', 'b', 'c' and 4 more": the first `shown` of `names`, quoted.
std::string someNames(const std::vector<std::string> &names, size_t shown);

} // namespace dnnc::rt
