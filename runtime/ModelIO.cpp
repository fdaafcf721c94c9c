// Weights and random inputs (see ModelIO.h).
#include "runtime/ModelIO.h"

#include "base/TensorIO.h"

#include <fmt/format.h>

#include <random>
#include <regex>

namespace dnnc::rt {
namespace {

// What a model needs besides its inputs.
struct ParamSpec {
  std::string name;
  ir::TensorType type;
  std::string init; // initializer text, e.g. "normal(0, 0.02)"; empty means the default
};

// Every param of `g`, in program order.
std::vector<ParamSpec> paramsOf(const ir::Graph &g) {
  std::vector<ParamSpec> out;
  for (const ir::Op *op : g.body.ops)
    if (op->kind == ir::OpKind::Param)
      out.push_back({op->get<std::string>("name"), op->results[0]->type, op->has("init") ? op->get<std::string>("init") : ""});
  return out;
}

// A tensor of `type` (dims evaluated under `b`) filled by its initializer text
// ("normal(0, 0.02)", "uniform(a, b)", "zeros()", "ones()", "full(v)"; default: normal
// for floats, zeros for integers), from `seed`.
Tensor initialize(const ir::TensorType &type, const std::string &init, const Binding &b, uint64_t seed) {
  std::vector<int64_t> shape;
  for (sym::ExprRef d : type.dims) {
    auto v = sym::evaluate(d, b);
    if (!v)
      throw DataError(fmt::format("cannot make a {} tensor: dim {} is not bound", type.str(), d->str()));
    shape.push_back(*v);
  }
  Tensor t = Tensor::zeros(type.dtype, shape);
  std::string kind = init.empty() ? (isFloat(type.dtype) ? "normal" : "zeros") : init.substr(0, init.find('('));
  std::vector<double> args;
  std::smatch m;
  std::string rest = init;
  static const std::regex number(R"([-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?)");
  while (std::regex_search(rest, m, number)) {
    args.push_back(std::stod(m.str()));
    rest = m.suffix();
  }
  if (init.empty())
    args = {0.0, 0.02};
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(args.size() > 0 ? args[0] : 0, args.size() > 1 ? args[1] : 1);
  std::uniform_real_distribution<double> uniform(args.size() > 0 ? args[0] : 0, args.size() > 1 ? args[1] : 1);
  for (size_t k = 0; k < t.numel(); ++k) {
    double v = kind == "normal" ? normal(rng) : kind == "uniform" ? uniform(rng) : kind == "ones" ? 1.0
             : kind == "full" ? (args.empty() ? 0.0 : args[0]) : 0.0;
    t.set(k, v);
  }
  return t;
}

} // namespace

// A random input of `type` with every dim bound: floats N(0, 1), integers in [0, 10),
// bools fair coin flips.
Tensor randomInput(const ir::Value &arg, const Binding &b, uint64_t seed) {
  std::vector<int64_t> shape;
  auto dims = ir::expectedShape(arg.type, b);
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
  auto specs = paramsOf(g);
  std::map<std::string, Tensor> out;
  if (path.empty()) {
    for (size_t k = 0; k < specs.size(); ++k)
      out[specs[k].name] = initialize(specs[k].type, specs[k].init, b, seed * 1000003 + k);
    return out;
  }
  auto file = rt::readSafetensors(path);
  for (const auto &spec : specs) {
    auto it = file.find(spec.name);
    if (it == file.end())
      throw DataError(fmt::format("'{}' has no tensor '{}' for param {}", path, spec.name, spec.type.str()));
    const Tensor &t = it->second;
    auto want = ir::expectedShape(spec.type, b);
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
