// Weights and random inputs (see ModelIO.h).
#include "runtime/ModelIO.h"

#include "base/Size.h"
#include "base/TensorIO.h"
#include "base/WeightNames.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <random>
#include <regex>
#include <set>

namespace dnnc::rt {
namespace {

// What a model needs besides its inputs.
struct ParamSpec {
  std::string name;
  ir::TensorType type;
  std::string init; // initializer text, e.g. "normal(0, 0.02)"; empty means the default
  std::optional<std::string> from; // the `from "..."` name
};

// Every param of `g`, in program order.
std::vector<ParamSpec> paramsOf(const ir::Graph &g) {
  std::vector<ParamSpec> out;
  for (const ir::Op *op : g.body.ops)
    if (op->kind == ir::OpKind::Param)
      out.push_back({op->get<std::string>("name"), op->results[0]->type, op->has("init") ? op->get<std::string>("init") : "",
                     op->has("from") ? std::optional(op->get<std::string>("from")) : std::nullopt});
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

// "'a', 'b', 'c' and 4 more"
std::string someNames(const std::vector<std::string> &names, size_t shown) {
  std::vector<std::string> quoted;
  for (size_t k = 0; k < names.size() && k < shown; ++k)
    quoted.push_back("'" + names[k] + "'");
  std::string out = fmt::format("{}", fmt::join(quoted, ", "));
  return names.size() > shown ? fmt::format("{} and {} more", out, names.size() - shown) : out;
}

namespace {

namespace fs = std::filesystem;

// The opened weights files and which of them holds each tensor.
struct Checkpoint {
  std::vector<SafetensorsFile> files;
  std::map<std::string, size_t> where; // tensor name -> its file

  void add(SafetensorsFile f) {
    for (const auto &[name, e] : f.entries)
      if (auto [it, fresh] = where.emplace(name, files.size()); !fresh)
        throw DataError(fmt::format("tensor '{}' is in both '{}' and '{}': a param could read either", name,
                                    files[it->second].path, f.path));
    files.push_back(std::move(f));
  }
  const SafetensorsFile &fileOf(const std::string &name) const { return files[where.at(name)]; }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto &[name, file] : where)
      out.push_back(name);
    return out;
  }
};

// A Hugging Face shard index, {"metadata": {...}, "weight_map": {TENSOR: SHARD, ...}}: its
// shards, files beside it, each opened once and checked to hold what the index says.
void addIndex(Checkpoint &c, const std::string &path) {
  auto bad = [&](const std::string &why) { return DataError(fmt::format("'{}' is not a safetensors index: {}", path, why)); };
  std::string text = readFile(path);
  // JSON has no raw NUL byte; the parser took one for the end of the text.
  bool nul = text.find('\0') != std::string::npos;
  nlohmann::json j = nul ? nlohmann::json(nlohmann::json::value_t::discarded) : nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded())
    throw bad("it does not parse as JSON");
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw bad("it has no \"weight_map\" object");
  std::map<std::string, std::vector<std::string>> byShard;
  for (const auto &[name, shard] : j["weight_map"].items()) {
    if (!shard.is_string())
      throw bad(fmt::format("the shard of tensor '{}' is not a file name", name));
    std::string file = shard.get<std::string>();
    if (file.find('\0') != std::string::npos) // a file name ends at one: another file would open
      throw bad(fmt::format("the shard of tensor '{}' has a NUL character in its name", name));
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      throw bad(fmt::format("the shard of tensor '{}' is '{}', not the name of a file beside the index", name, file));
    byShard[file].push_back(name);
  }
  for (const auto &[file, names] : byShard) {
    SafetensorsFile f;
    try {
      f = openSafetensors((fs::path(path).parent_path() / file).string());
    } catch (const DataError &e) { // a shard the index names
      throw DataError(fmt::format("{} (a shard '{}' names)", e.what(), path));
    }
    for (const std::string &name : names)
      if (!f.entries.count(name))
        throw bad(fmt::format("it puts tensor '{}' in '{}', which has no such tensor", name, f.path));
    c.add(std::move(f));
  }
}

// "f32[L, D, D]", or with the dims `b` binds, "f32[2, 4, 4]".
std::string boundType(const ir::TensorType &t, const Binding &b) {
  std::vector<std::string> dims;
  auto shape = ir::expectedShape(t, b);
  for (size_t k = 0; k < shape.size(); ++k)
    dims.push_back(shape[k] ? std::to_string(*shape[k]) : t.dims[k]->str());
  return fmt::format("{}[{}]", dtypeName(t.dtype), fmt::join(dims, ", "));
}

// Reads param `spec` from `c`: the tensors its name gives, converted and stacked. Returns
// nullopt when one is absent, with `missing` set to its name and `why` to a line that says so.
std::optional<Tensor> readParam(const Checkpoint &c, const ParamSpec &spec, const Binding &b, std::set<std::string> &used,
                                std::string &missing, std::string &why) {
  const std::string pattern = spec.from.value_or(spec.name);
  FromName from;
  size_t at = 0;
  if (std::string err = parseFromName(pattern, from, at); !err.empty())
    throw DataError(fmt::format("param '{}' reads the tensors {}: {}", spec.name, quoteString(pattern), err));
  auto want = ir::expectedShape(spec.type, b);
  const size_t stacked = from.placeholders.size();
  if (stacked > want.size())
    throw DataError(fmt::format("param '{}' ({}) has fewer axes than {} has placeholders", spec.name, spec.type.str(), quoteString(pattern)));
  std::string described = fmt::format("param '{}' ({}{})", spec.name, boundType(spec.type, b),
                                      spec.from ? " from " + quoteString(pattern) : "");
  // The tensor `name` (whole: the param's own name, or one index of a stacked param),
  // checked against the param's dims from axis `first` on and converted to its dtype.
  auto read = [&](const std::string &name, size_t first) {
    const SafetensorsFile &file = c.fileOf(name);
    const SafetensorsFile::Entry &e = file.entries.at(name);
    bool floats = file.isFloat(e) && isFloat(spec.type.dtype);
    if (!floats && (e.f64 || e.dtype != spec.type.dtype))
      throw DataError(fmt::format("tensor '{}' in '{}' is {} but {} is {}: only float tensors (f16, bf16, f32, f64) convert, "
                                  "to a float param", name, file.path, file.typeText(e), described, dtypeName(spec.type.dtype)));
    bool fits = e.shape.size() + first == want.size();
    for (size_t k = 0; fits && k < e.shape.size(); ++k)
      fits = !want[first + k] || *want[first + k] == e.shape[k];
    if (!fits) {
      ir::TensorType each{spec.type.dtype, {spec.type.dims.begin() + static_cast<long>(first), spec.type.dims.end()}};
      throw DataError(first ? fmt::format("tensor '{}' in '{}' is {} but {} stacks tensors of {}", name, file.path,
                                          file.typeText(e), described, boundType(each, b))
                            : fmt::format("tensor '{}' in '{}' is {} but {} is {}", name, file.path, file.typeText(e), described,
                                          boundType(spec.type, b)));
    }
    used.insert(name);
    return file.tensorAs(name, spec.type.dtype);
  };
  // The leading axes the placeholders index, and how many tensors that makes.
  std::vector<int64_t> lead;
  int64_t count = 1;
  for (size_t k = 0; k < stacked; ++k) {
    if (!want[k])
      throw DataError(fmt::format("{} stacks tensors on axis {}, whose dim {} is not bound: bind it with --bind", described, k,
                                  spec.type.dims[k]->str()));
    lead.push_back(*want[k]);
    if (__builtin_mul_overflow(count, *want[k], &count))
      throw DataError(fmt::format("{} stacks more tensors than 64 bits count", described));
  }
  if (count == 0) { // an empty stack: no tensor to read, the shape from the declaration
    std::vector<int64_t> shape;
    for (size_t k = 0; k < want.size(); ++k) {
      if (!want[k])
        throw DataError(fmt::format("{} stacks no tensors and its dim {} is not bound: bind it with --bind", described,
                                    spec.type.dims[k]->str()));
      shape.push_back(*want[k]);
    }
    requireMemory(checkedBytes(spec.type.dtype, shape, described), described);
    return Tensor::zeros(spec.type.dtype, shape);
  }
  std::vector<std::string> names;
  std::vector<int64_t> index(stacked, 0);
  for (int64_t n = 0; n < count && missing.empty(); ++n) {
    names.push_back(from.expand(index));
    if (!c.where.count(names.back()))
      missing = names.back();
    for (size_t k = stacked; k-- > 0 && ++index[k] == lead[k];) // the next index, the last axis fastest
      index[k] = 0;
  }
  if (!missing.empty()) {
    if (spec.from && c.where.count(spec.name)) { // written under the param's own name (dnnc train --save)
      missing.clear();
      return read(spec.name, 0);
    }
    why = fmt::format("{}: no tensor '{}'{}", described, missing, stacked ? fmt::format(" (one of the {} it stacks)", count) : "");
    return std::nullopt;
  }
  if (!stacked)
    return read(names[0], 0);
  // Each slice is copied into place as it is read: one slice converted at a time.
  Tensor first = read(names[0], stacked);
  std::vector<int64_t> shape = lead;
  shape.insert(shape.end(), first.shape.begin(), first.shape.end());
  requireMemory(checkedBytes(spec.type.dtype, shape, described), described);
  Tensor out = Tensor::zeros(spec.type.dtype, shape);
  for (size_t k = 0; k < names.size(); ++k) {
    Tensor slice = k ? read(names[k], stacked) : std::move(first);
    if (slice.shape != std::vector<int64_t>(shape.begin() + static_cast<long>(stacked), shape.end()))
      throw DataError(fmt::format("tensor '{}' is {} but '{}' is {}: {} stacks tensors of one shape", names[k],
                                  slice.typeText(), names[0], shapeText(spec.type.dtype, {shape.begin() + static_cast<long>(stacked), shape.end()}),
                                  described));
    if (slice.byteSize())
      std::memcpy(out.data() + k * slice.byteSize(), slice.data(), slice.byteSize());
  }
  return out;
}


} // namespace

Weights loadWeights(const ir::Graph &g, const WeightsSource &source, const Binding &b) {
  Checkpoint c;
  for (const std::string &path : source.files) {
    if (path.size() > 5 && path.substr(path.size() - 5) == ".json")
      addIndex(c, path);
    else
      c.add(openSafetensors(path));
  }
  auto specs = paramsOf(g);
  Weights out;
  std::set<std::string> used;
  std::vector<std::string> missing;
  for (size_t k = 0; k < specs.size(); ++k) {
    const ParamSpec &spec = specs[k];
    std::string absent, why = fmt::format("param '{}' ({})", spec.name, boundType(spec.type, b));
    if (!c.files.empty())
      if (auto t = readParam(c, spec, b, used, absent, why)) {
        out.params[spec.name] = std::move(*t);
        continue;
      }
    if (!source.fillMissing) {
      std::vector<std::string> close;
      for (const std::string &n : closestNames(absent, c.names(), 3))
        close.push_back("'" + n + "'");
      missing.push_back(why + (close.empty() ? "" : fmt::format("; closest: {}", fmt::join(close, ", "))));
      continue;
    }
    out.params[spec.name] = initialize(spec.type, spec.init, b, source.seed * 1000003 + k);
    if (source.noteFilled)
      out.notes.push_back(fmt::format("param '{}' ({}) filled from its initializer {}: {}", spec.name,
                                      out.params[spec.name].typeText(),
                                      !spec.init.empty() ? spec.init : isFloat(spec.type.dtype) ? "normal(0.0, 0.02)" : "zeros()",
                                      c.files.empty() ? "no weights were given" : "it is in no weights file"));
  }
  if (!missing.empty()) {
    std::vector<std::string> paths;
    for (const SafetensorsFile &f : c.files)
      paths.push_back("'" + f.path + "'");
    if (paths.empty())
      paths.push_back("none was given");
    throw DataError(fmt::format("{} of model '{}' {} in no weights file ({}):\n  {}{}", missing.size() == 1 ? "a param" : fmt::format("{} params", missing.size()),
                                g.name, missing.size() == 1 ? "is" : "are", fmt::join(paths, ", "), fmt::join(missing, "\n  "),
                                source.missingHint.empty() ? "" : "\n" + source.missingHint));
  }
  std::vector<std::string> unused;
  for (const auto &[name, file] : c.where)
    if (!used.count(name))
      unused.push_back(name);
  if (!unused.empty()) {
    std::string text = fmt::format("{} tensor{} in the weights {} used by no param of model '{}': {}", unused.size(),
                                   unused.size() == 1 ? "" : "s", unused.size() == 1 ? "is" : "are", g.name, someNames(unused, 5));
    if (source.strict)
      throw DataError(text + " (--strict)");
    out.notes.push_back(text);
  }
  return out;
}
} // namespace dnnc::rt
