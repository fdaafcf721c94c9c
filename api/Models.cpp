// Model selection, dim bindings, compiling by device name and the shapes listing, shared
// by the driver's subcommands and the Python module (see Models.h).
#include "api/Models.h"

#include "ir/graph/Binding.h"
#include "ir/transforms/Pipeline.h"

#include <fmt/format.h>

#include <set>
#include <sstream>

namespace dnnc::api {

std::string parseBinding(const std::string &text, Binding &out) {
  std::set<std::string> named; // in this text: `B=2,B=3` is a mistake, not a rebinding
  std::string s = text;
  for (char &c : s)
    if (c == ',')
      c = ' ';
  std::istringstream in(s);
  std::string item;
  while (in >> item) {
    size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      return fmt::format("cannot read the binding '{}': expected NAME=VALUE", item);
    std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    if (value.find_first_not_of("0123456789") != std::string::npos)
      return fmt::format("the value of '{}' must be a non-negative integer, not '{}'", name, value);
    int64_t v = 0;
    for (char c : value)
      if (__builtin_mul_overflow(v, int64_t{10}, &v) || __builtin_add_overflow(v, int64_t{c - '0'}, &v))
        return fmt::format("the value of '{}' is too large: {} does not fit in 64 bits", name,
                           value.size() > 40 ? value.substr(0, 40) + "..." : value);
    if (!named.insert(name).second)
      return fmt::format("'{}' is bound twice in '{}'", name, text);
    out[name] = v;
  }
  return "";
}

std::string checkBinding(const ModelInfo &m, const Binding &b) {
  for (auto &[name, value] : b) {
    const DimInfo *info = nullptr;
    for (const DimInfo &d : m.dims)
      if (d.name == name)
        info = &d;
    if (!info) {
      std::string known;
      for (const DimInfo &d : m.dims)
        known += (known.empty() ? "" : ", ") + d.name;
      return fmt::format("model '{}' has no dim '{}' (its dims: {})", m.name, name, known.empty() ? "none" : known);
    }
    sym::Interval r = m.analyzer.range(name);
    if (value > r.hi && r.hi >= sym::Interval::kInf) // an unbounded dim's values stop short of 2^63, for sums of them
      return fmt::format("{} = {} is past the largest value dnnc gives a dim, {}", name, value, sym::Interval::kInf);
    if (value < r.lo || value > r.hi)
      return fmt::format("{} = {} is outside the range of '{}': {}..{}", name, value, name, r.lo,
                         r.hi >= sym::Interval::kInf ? std::string("inf") : std::to_string(r.hi));
  }
  // The model's asserts and pins over dims all bound here: a binding that breaks one would
  // fail every run (detect.dnn's N pinned to M, bound to 3 and 5).
  if (std::optional<std::string> failed = ir::failedAssertOf(*m.graph, b))
    return *failed;
  // The values every call makes: a dim the binding makes negative, or an operand their op
  // cannot take (ir::checkBeforeRunning), fails every run (shapes and the REPL showed
  // f32[-2]). Sizes past 64 bits or a limit are left to the run, and so are values in
  // branches or loops: they may not be made.
  try {
    for (const ir::Op *op : m.graph->body.ops)
      if (op->kind != ir::OpKind::Param) {
        for (auto [maker, v] : ir::madeValues(*op))
          ir::checkDimsNotNegative(*maker, *v, b);
        ir::checkBeforeRunning(*op, b);
      }
  } catch (const DataError &e) {
    return e.what();
  }
  return "";
}

ModelInfo *selectModel(Program &p, const std::string &name, std::string &error) {
  if (!name.empty()) {
    if (ModelInfo *m = p.model(name))
      return m;
    error = fmt::format("no model named '{}'", name);
    return nullptr;
  }
  if (p.models().empty()) {
    error = "the file declares no model";
    return nullptr;
  }
  if (ModelInfo *m = p.model("main"))
    return m;
  return &p.models().front();
}

std::string checkDeviceName(const std::string &device) {
  if (device == "auto" || device == "ref" || backend::findTarget(device))
    return "";
  return fmt::format("unknown device '{}' (devices: auto, cpu, cuda, ref, cuda-sim)", device);
}

std::unique_ptr<rt::Executable> compileForDevice(ir::Graph &g, const std::string &device, const backend::CompileOptions &options,
                                                 const std::string &flag, ir::RecomputeReport *recompute) {
  const backend::Target *target = backend::findTarget(device == "auto" ? "cuda" : device);
  if (!target) {
    ir::optimize(g, options.passes); // the interpreter runs the optimized graph too
    return nullptr;
  }
  backend::CompileOptions probed = options;
  if (std::string why = target->probe(probed.target); !why.empty()) {
    if (device != "auto")
      throw DataError(fmt::format("{}{}: {}", flag, device, why));
    target = backend::findTarget("cpu");
  }
  return backend::compile(g, *target, probed, recompute);
}

nlohmann::json shapesJson(const ModelInfo &m, const Binding &b) {
  nlohmann::json values = nlohmann::json::array();
  for (const NamedValue &v : m.values) {
    nlohmann::json dims = nlohmann::json::array();
    for (sym::ExprRef d : v.type.dims) {
      std::string text = ir::dimText(d, &b);
      sym::ExprRef bound = d;
      if (!b.empty())
        if (auto c = sym::evaluate(d, b))
          bound = sym::constant(*c);
      if (auto c = bound->asConst())
        dims.push_back(*c);
      else
        dims.push_back(text);
    }
    values.push_back({{"name", v.name},
                      {"line", v.loc.begin.line},
                      {"type", v.type.str(&b)},
                      {"dtype", ir::dtypeName(v.type.dtype)},
                      {"dims", dims},
                      {"class", ir::shapeClassName(v.shapeClass)}});
  }
  return nlohmann::json{{"model", m.name}, {"values", values}};
}

} // namespace dnnc::api
