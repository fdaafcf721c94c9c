// Graph IR <-> JSON (see Serialize.h).
#include "ir/graph/Serialize.h"

#include "base/Diagnostics.h"
#include "ir/graph/OpRegistry.h"
#include "ir/graph/Walk.h"
#include "ir/sym/Analyzer.h"
#include "base/Tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <nlohmann/json.hpp>

#include <type_traits>
#include <vector>

namespace dnnc::ir {

using nlohmann::json;

// A dim expression as its canonical sum of products: {"c": constant, "t": [[coef, atom...]]},
// an atom being a dim's name or ["div"|"mod"|"min"|"max", lhs, rhs].
json exprToJson(sym::ExprRef e) {
  if (!e)
    return nullptr;
  json terms = json::array();
  for (const sym::Term &t : e->terms()) {
    json term = json::array({t.coef});
    for (const sym::Atom *a : t.factors) {
      static const char *ops[] = {"", "div", "mod", "min", "max"};
      if (a->kind == sym::Atom::Kind::Var)
        term.push_back(a->name);
      else
        term.push_back(json::array({ops[static_cast<int>(a->kind)], exprToJson(a->lhs), exprToJson(a->rhs)}));
    }
    terms.push_back(std::move(term));
  }
  return {{"c", e->constant()}, {"t", std::move(terms)}};
}

namespace {

[[noreturn]] void bad(const std::string &what) { throw DataError("malformed model in artifact: " + what); }

// Checked access: a missing key or a wrong JSON type is a DataError, not an exception from
// the JSON library.
const json &at(const json &j, const char *key) {
  if (!j.is_object() || !j.contains(key))
    bad(fmt::format("missing '{}'", key));
  return j.at(key);
}
template <class T> T get(const json &j, const char *what) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // Integers only, in range: nlohmann converts a float such as 1e300 with undefined behaviour.
    if (!j.is_number_integer())
      bad(fmt::format("'{}' has the wrong type", what));
    if (j.is_number_unsigned() ? j.template get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max())
                               : j.template get<int64_t>() < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
                                     j.template get<int64_t>() > static_cast<int64_t>(std::numeric_limits<T>::max()))
      bad(fmt::format("'{}' is out of range", what));
    return static_cast<T>(j.template get<int64_t>());
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    if (!j.is_array())
      bad(fmt::format("'{}' has the wrong type", what));
    std::vector<int64_t> out;
    for (const json &e : j)
      out.push_back(get<int64_t>(e, what));
    return out;
  } else {
    try {
      return j.get<T>();
    } catch (const json::exception &) {
      bad(fmt::format("'{}' has the wrong type", what));
    }
  }
}

} // namespace

sym::ExprRef exprFromJson(const json &j) {
  if (j.is_null())
    return nullptr;
  sym::ExprRef sum = sym::constant(get<int64_t>(at(j, "c"), "c"));
  const json &terms = at(j, "t");
  if (!terms.is_array())
    bad("a dim expression's terms are not a list");
  for (const json &t : terms) {
    if (!t.is_array() || t.empty())
      bad("an empty term in a dim expression");
    sym::ExprRef p = sym::constant(get<int64_t>(t[0], "coef"));
    for (size_t k = 1; k < t.size(); ++k) {
      const json &a = t[k];
      if (a.is_string()) {
        p = sym::mul(p, sym::var(a.get<std::string>()));
        continue;
      }
      if (!a.is_array() || a.size() != 3 || !a[0].is_string())
        bad("a malformed atom in a dim expression");
      std::string op = a[0].get<std::string>();
      sym::ExprRef l = exprFromJson(a[1]), r = exprFromJson(a[2]);
      if (!l || !r)
        bad("an atom without operands");
      sym::ExprRef v = op == "div"   ? sym::floorDiv(l, r)
                       : op == "mod" ? sym::mod(l, r)
                       : op == "min" ? sym::min(l, r)
                       : op == "max" ? sym::max(l, r)
                                     : nullptr;
      if (!v)
        bad("unknown atom '" + op + "'");
      p = sym::mul(p, v);
    }
    sum = sym::add(sum, p);
  }
  return sum;
}

namespace {

json attrToJson(const Attr &a) {
  return std::visit(
      [](const auto &v) -> json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>)
          return {{"int", v}};
        else if constexpr (std::is_same_v<T, double>) // JSON has no inf or NaN: they are strings
          return std::isfinite(v) ? json{{"float", v}} : json{{"float", std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"}};
        else if constexpr (std::is_same_v<T, bool>)
          return {{"bool", v}};
        else if constexpr (std::is_same_v<T, std::string>)
          return {{"str", v}};
        else if constexpr (std::is_same_v<T, DType>)
          return {{"dtype", dtypeName(v)}};
        else if constexpr (std::is_same_v<T, sym::ExprRef>)
          return {{"dim", exprToJson(v)}};
        else {
          json list = json::array();
          for (sym::ExprRef e : v)
            list.push_back(exprToJson(e));
          return {{"dims", list}};
        }
      },
      a);
}

Attr attrFromJson(const json &j) {
  if (!j.is_object() || j.size() != 1)
    bad("an attribute is not a one-key object");
  const std::string &kind = j.begin().key();
  const json &v = j.begin().value();
  if (kind == "int")
    return get<int64_t>(v, "int");
  if (kind == "float") {
    if (v.is_string()) {
      const std::string &text = v.get_ref<const std::string &>();
      if (text == "nan")
        return std::numeric_limits<double>::quiet_NaN();
      if (text == "inf" || text == "-inf")
        return text == "inf" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
    }
    return get<double>(v, "float");
  }
  if (kind == "bool")
    return get<bool>(v, "bool");
  if (kind == "str")
    return get<std::string>(v, "str");
  if (kind == "dtype") {
    auto d = parseDType(get<std::string>(v, "dtype"));
    if (!d)
      bad("unknown dtype");
    return *d;
  }
  if (kind == "dim")
    return exprFromJson(v);
  if (kind == "dims") {
    if (!v.is_array())
      bad("a dim list is not a list");
    DimList list;
    for (const json &e : v)
      list.push_back(exprFromJson(e));
    return list;
  }
  bad("unknown attribute kind '" + kind + "'");
}

json locToJson(const SourceRange &r) { return json::array({r.begin.file, r.begin.line, r.begin.col}); }
SourceRange locFromJson(const json &j) {
  SourceRange r;
  if (j.is_array() && j.size() == 3) {
    r.begin = {get<int>(j[0], "loc"), get<int>(j[1], "loc"), get<int>(j[2], "loc")};
    r.end = r.caret = r.begin;
  }
  return r;
}

json valueIds(const std::vector<Value *> &vs) {
  json out = json::array();
  for (const Value *v : vs)
    out.push_back(v->id);
  return out;
}

json regionToJson(const Region &r) {
  json ops = json::array();
  for (const Op *op : r.ops) {
    json attrs = json::object();
    for (const auto &[k, a] : op->attrs)
      attrs[k] = attrToJson(a);
    json regions = json::array();
    for (const auto &sub : op->regions)
      regions.push_back(regionToJson(*sub));
    ops.push_back({{"op", opInfo(op->kind).spelling},
                   {"class", static_cast<int>(op->shapeClass)},
                   {"operands", valueIds(op->operands)},
                   {"results", valueIds(op->results)},
                   {"attrs", std::move(attrs)},
                   {"regions", std::move(regions)},
                   {"loc", locToJson(op->loc)}});
  }
  return {{"args", valueIds(r.args)}, {"ops", std::move(ops)}, {"yields", valueIds(r.yields)}};
}

class Reader {
public:
  explicit Reader(Graph &g) : g_(g) {}

  Value *value(const json &id) {
    int64_t k = get<int64_t>(id, "value id");
    if (k < 0 || k >= static_cast<int64_t>(g_.values().size()))
      bad(fmt::format("value id {} is out of range", k));
    return g_.values()[static_cast<size_t>(k)].get();
  }
  std::vector<Value *> values(const json &ids) {
    if (!ids.is_array())
      bad("a value list is not a list");
    std::vector<Value *> out;
    for (const json &id : ids)
      out.push_back(value(id));
    return out;
  }

  void region(const json &j, Region &r) {
    r.args = values(at(j, "args"));
    for (Value *a : r.args)
      a->owner = &r;
    const json &ops = at(j, "ops");
    if (!ops.is_array())
      bad("'ops' is not a list");
    for (const json &o : ops) {
      std::string spelling = get<std::string>(at(o, "op"), "op");
      const OpInfo *info = nullptr;
      for (const OpInfo &i : allOps())
        if (spelling == i.spelling)
          info = &i;
      if (!info)
        bad("unknown op '" + spelling + "'");
      Op *op = g_.newOp(info->kind, locFromJson(at(o, "loc")));
      int cls = get<int>(at(o, "class"), "class");
      if (cls < 0 || cls > static_cast<int>(ShapeClass::EDO))
        bad("unknown shape class");
      op->shapeClass = static_cast<ShapeClass>(cls);
      op->operands = values(at(o, "operands"));
      op->results = values(at(o, "results"));
      for (Value *v : op->results)
        v->def = op;
      const json &attrs = at(o, "attrs");
      if (!attrs.is_object())
        bad("'attrs' is not an object");
      for (auto it = attrs.begin(); it != attrs.end(); ++it)
        op->attrs[it.key()] = attrFromJson(it.value());
      const json &regions = at(o, "regions");
      if (!regions.is_array())
        bad("'regions' is not a list");
      for (const json &sub : regions) {
        op->regions.push_back(std::make_unique<Region>());
        region(sub, *op->regions.back());
      }
      r.ops.push_back(op);
    }
    r.yields = values(at(j, "yields"));
  }

private:
  Graph &g_;
};

} // namespace

json toJson(const Graph &g) {
  json values = json::array();
  for (const auto &v : g.values()) {
    json dims = json::array();
    for (sym::ExprRef d : v->type.dims)
      dims.push_back(exprToJson(d));
    values.push_back({{"name", v->name}, {"dtype", dtypeName(v->type.dtype)}, {"dims", std::move(dims)}, {"loc", locToJson(v->loc)}});
  }
  json ranges = json::object();
  for (const auto &[name, r] : g.dimRanges)
    ranges[name] = json::array({r.first, r.second});
  json files = json::object();
  for (const auto &[id, name] : g.fileNames)
    files[std::to_string(id)] = name;
  json out = {{"name", g.name}, {"main_file", g.mainFile}, {"files", std::move(files)}, {"dim_ranges", std::move(ranges)},
              {"values", std::move(values)}, {"body", regionToJson(g.body)}};
  if (!g.outputNames.empty()) // only models with named outputs carry the key
    out["output_names"] = g.outputNames;
  if (!g.updates.empty()) {
    json updates = json::array();
    for (const Graph::Update &u : g.updates)
      updates.push_back({{"output", u.output}, {"param", u.param}, {"input", u.input}});
    out["updates"] = std::move(updates);
  }
  return out;
}

namespace {
// Every phase after sema reads axes as non-negative and in range. A graph from an older
// dnnc (JSON or an artifact) may hold negative ones, and a foreign one anything: each op's
// rule checks its axes and gives their normalized form, written back here; an axis out
// of range (or a missing attribute) is a DataError. Other rule complaints are not
// re-judged: without the model's asserts as facts, an equality sema proved may not be
// provable here.
void normalizeAxes(Graph &g) {
  sym::Analyzer analyzer;
  for (const auto &[name, range] : g.dimRanges)
    analyzer.declare(name, range.first, range.second);
  walk(g.body, [&](Op &op) {
    if (!opInfo(op.kind).shapeRule)
      return;
    RuleContext rc{op, analyzer, [](const std::string &) { return sym::var("$fresh"); }};
    auto malformed = [&](const std::string &what) {
      bad(fmt::format("op '{}' at line {}: {}", opInfo(op.kind).spelling, op.loc.begin.line, what));
    };
    try {
      inferResultTypes(rc);
    } catch (const RuleError &e) {
      if (e.kind == DiagKind::Range)
        malformed(e.message);
    } catch (const std::exception &e) { // a missing or mistyped attribute of a foreign graph
      malformed(e.what());
    }
    for (auto &[name, normalized] : rc.normalizedAxes)
      op.attrs[name] = std::move(normalized);
  });
}
} // namespace

std::unique_ptr<Graph> fromJson(const json &j) {
  auto g = std::make_unique<Graph>();
  g->name = get<std::string>(at(j, "name"), "name");
  g->mainFile = get<int>(at(j, "main_file"), "main_file");
  const json &files = at(j, "files");
  if (!files.is_object())
    bad("'files' is not an object");
  for (auto it = files.begin(); it != files.end(); ++it) {
    try {
      g->fileNames[std::stoi(it.key())] = get<std::string>(it.value(), "file name");
    } catch (const std::logic_error &) {
      bad("a file id is not a number");
    }
  }
  const json &ranges = at(j, "dim_ranges");
  if (!ranges.is_object())
    bad("'dim_ranges' is not an object");
  for (auto it = ranges.begin(); it != ranges.end(); ++it) {
    auto r = get<std::vector<int64_t>>(it.value(), "dim range");
    if (r.size() != 2)
      bad("a dim range is not [lo, hi]");
    g->dimRanges[it.key()] = {r[0], r[1]};
  }
  const json &values = at(j, "values");
  if (!values.is_array())
    bad("'values' is not a list");
  for (const json &v : values) {
    TensorType t;
    auto d = parseDType(get<std::string>(at(v, "dtype"), "dtype"));
    if (!d)
      bad("unknown dtype");
    t.dtype = *d;
    const json &dims = at(v, "dims");
    if (!dims.is_array())
      bad("a value's dims are not a list");
    for (const json &e : dims) {
      sym::ExprRef dim = exprFromJson(e);
      if (!dim)
        bad("a value has an unknown dim");
      t.dims.push_back(dim);
    }
    try { // constant dims whose product no 64-bit size holds (a source file's are a located error)
      (void)t.bytes();
    } catch (const std::overflow_error &) {
      bad("a value's size overflows 64 bits");
    }
    g->newValue(std::move(t), get<std::string>(at(v, "name"), "name"), locFromJson(at(v, "loc")));
  }
  Reader(*g).region(at(j, "body"), g->body);
  if (j.contains("output_names")) {
    g->outputNames = get<std::vector<std::string>>(j["output_names"], "output_names");
    if (g->outputNames.size() != g->body.yields.size())
      bad("'output_names' does not name every output");
    for (const std::string &name : g->outputNames) // they become file names: identifiers only
      if (!name.empty() && (std::isdigit(static_cast<unsigned char>(name[0])) ||
                            !std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; })))
        bad("an output name is not an identifier");
  }
  if (j.contains("updates"))
    for (const json &u : j["updates"]) {
      Graph::Update up{get<size_t>(at(u, "output"), "output"), get<std::string>(at(u, "param"), "param"),
                       get<size_t>(at(u, "input"), "input")};
      if (up.output >= g->body.yields.size() || !updateTarget(*g, up))
        bad("an update names no output, param or input of the model");
      g->updates.push_back(std::move(up));
    }
  try {
    verify(*g);
  } catch (const InternalError &e) {
    bad(e.what());
  }
  normalizeAxes(*g);
  return g;
}

std::unique_ptr<Graph> cloneGraph(const Graph &g) { return fromJson(toJson(g)); }

} // namespace dnnc::ir
