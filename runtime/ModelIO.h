// A model's inputs and weights on the host: .safetensors weights matched to the model's
// params by name (dtype and shape checked), or seeded random ones, and seeded random inputs.
#pragma once

#include "base/Tensor.h"
#include "ir/graph/Binding.h"

#include <map>
#include <string>

namespace dnnc::rt {

using ir::Binding;

// A random input for `arg` with every dim bound by `b` (floats N(0, 1), integers in
// [0, 10), bools fair coin flips); DataError naming the unbound dim otherwise.
Tensor randomInput(const ir::Value &arg, const Binding &b, uint64_t seed);
// Every param of `g`: from the .safetensors file `path` (DataError for a missing, extra,
// misshaped or corrupt tensor), or, when `path` is empty, from each param's initializer.
std::map<std::string, Tensor> loadWeights(const ir::Graph &g, const std::string &path, const Binding &b, uint64_t seed);

} // namespace dnnc::rt
