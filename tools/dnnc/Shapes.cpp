// `dnnc shapes`: every named value of a model with its type and shape class.
#include "tools/dnnc/Driver.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <set>
#include <sstream>

namespace dnnc::tool {

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
    if (value < r.lo || value > r.hi)
      return fmt::format("{} = {} is outside the range of '{}': {}..{}", name, value, name, r.lo,
                         r.hi >= sym::Interval::kInf ? std::string("inf") : std::to_string(r.hi));
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

void printShapes(const ModelInfo &m, const Binding &b, bool json, std::ostream &os) {
  if (json) {
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
    os << nlohmann::json{{"model", m.name}, {"values", values}}.dump(2) << "\n";
    return;
  }
  size_t nameW = 4, typeW = 4;
  for (const NamedValue &v : m.values) {
    nameW = std::max(nameW, v.name.size());
    typeW = std::max(typeW, v.type.str(&b).size());
  }
  os << fmt::format("model {}\n", m.name);
  os << fmt::format("  {:<{}}  {:<6}  {:<{}}  {:<6}  {:<5}  {}\n", "name", nameW, "role", "type", typeW, "class", "line", "op");
  for (const NamedValue &v : m.values)
    os << fmt::format("  {:<{}}  {:<6}  {:<{}}  {:<6}  {:<5}  {}\n", v.name, nameW, v.role, v.type.str(&b), typeW,
                      ir::shapeClassName(v.shapeClass), v.loc.begin.line, v.op);
}

} // namespace dnnc::tool
