// Weights and random inputs (see ModelIO.h).
#include "runtime/ModelIO.h"

#include "runtime/TensorIO.h"

#include <fmt/format.h>

#include <random>

namespace dnnc::rt {

// A random input of `type` with every dim bound: floats N(0, 1), integers in [0, 10),
// bools fair coin flips.
Tensor randomInput(const ir::Value &arg, const Binding &b, uint64_t seed) {
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

std::map<std::string, Tensor> loadWeights(const ir::Graph &g, const std::string &path, const Binding &b,
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

} // namespace dnnc::rt
