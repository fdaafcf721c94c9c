// Construction and the textual form of the graph IR.
#include "ir/graph/Graph.h"

#include "ir/graph/Walk.h"
#include "ir/graph/OpRegistry.h"

#include <fmt/format.h>


namespace dnnc::ir {

Value *Graph::newValue(TensorType type, std::string name, SourceRange loc) {
  auto v = std::make_unique<Value>();
  v->id = static_cast<int>(values_.size());
  v->type = std::move(type);
  v->name = std::move(name);
  v->loc = loc;
  values_.push_back(std::move(v));
  return values_.back().get();
}

Op *Graph::newOp(OpKind kind, SourceRange loc) {
  auto op = std::make_unique<Op>();
  op->kind = kind;
  op->shapeClass = opInfo(kind).shapeClass;
  op->loc = loc;
  ops_.push_back(std::move(op));
  return ops_.back().get();
}

const Value *updateTarget(const Graph &g, const Graph::Update &u) {
  if (u.param.empty())
    return u.input < g.body.args.size() ? g.body.args[u.input] : nullptr;
  for (const Op *op : g.body.ops)
    if (op->kind == OpKind::Param && op->get<std::string>("name") == u.param)
      return op->results[0];
  return nullptr;
}

std::string outputName(const Graph &g, size_t k) {
  return k < g.outputNames.size() && !g.outputNames[k].empty() ? g.outputNames[k] : fmt::format("out{}", k);
}

std::string sourceLine(const Graph &g, const SourceRange &loc) {
  if (!loc.valid())
    return "";
  auto it = g.fileNames.find(loc.begin.file);
  if (loc.begin.file == g.mainFile || it == g.fileNames.end())
    return fmt::format("line {}", loc.begin.line);
  return fmt::format("{}:{}", it->second, loc.begin.line);
}

std::vector<const Op *> opsPostOrder(const Graph &g) {
  std::vector<const Op *> out;
  walk(g.body, [&](const Op &op) { out.push_back(&op); }, WalkOrder::Post);
  return out;
}

IndexAttrs IndexAttrs::of(const Op &op) {
  if (op.kind != OpKind::Index && op.kind != OpKind::IndexGrad)
    throw InternalError("index attributes asked of another op");
  return {op.get<DimList>("starts"), op.get<DimList>("stops"), op.get<DimList>("steps"), op.get<DimList>("points")};
}

int64_t IndexAttrs::resolvePoint(size_t axis, sym::ExprRef, int64_t value, int64_t d, const std::string &typeText) const {
  int64_t point = !starts[axis] && value < 0 ? value + d : value;
  if (point >= 0 && point < d)
    return point;
  // A dim expression as written, with its value (a literal -k reads `dim - k`, as sema
  // rewrote it: the value alone, or -k alone, misled where N - 3 was written).
  std::string written = starts[axis] && !starts[axis]->isConst() ? fmt::format("{} = {}", starts[axis]->str(), value)
                                                                  : std::to_string(value);
  throw DataError(fmt::format("index {} is out of range for dim {} of {} (size {})", written, axis, typeText, d));
}

bool IndexAttrs::isLeadingSlice(const DimList &dims) const {
  bool leading = true;
  for (size_t a = 0; a < dims.size(); ++a) {
    if (isPoint(a)) {
      if (!leading)
        return false;
      continue;
    }
    leading = false;
    if (!starts[a] || !stops[a] || starts[a]->asConst() != 0 || stops[a] != dims[a] || step(a) != 1)
      return false;
  }
  return true;
}

std::map<std::string, Attr> IndexAttrs::make(DimList starts, DimList stops, DimList steps, DimList points) {
  return {{"starts", std::move(starts)}, {"stops", std::move(stops)}, {"steps", std::move(steps)}, {"points", std::move(points)}};
}

std::string attrText(const Attr &a) {
  return std::visit(
      [](const auto &v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>)
          return std::to_string(v);
        else if constexpr (std::is_same_v<T, double>)
          return fmt::format("{}", v);
        else if constexpr (std::is_same_v<T, bool>)
          return v ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::string>)
          return "\"" + v + "\"";
        else if constexpr (std::is_same_v<T, DType>)
          return dtypeName(v);
        else if constexpr (std::is_same_v<T, sym::ExprRef>)
          return v ? v->str() : "?";
        else {
          std::string out = "[";
          for (size_t i = 0; i < v.size(); ++i)
            out += (i ? ", " : "") + (v[i] ? v[i]->str() : std::string("?"));
          return out + "]";
        }
      },
      a);
}

namespace {

std::string ref(const Value *v) { return v->name.empty() ? fmt::format("%{}", v->id) : fmt::format("%{}.{}", v->name, v->id); }

std::string refs(const std::vector<Value *> &vs) {
  std::string out;
  for (size_t i = 0; i < vs.size(); ++i)
    out += (i ? ", " : "") + ref(vs[i]);
  return out;
}

void printRegion(const Graph &g, const Region &r, int depth, std::string &out);

std::string where(const Graph &g, const SourceRange &loc) { return loc.valid() ? "  # " + sourceLine(g, loc) : ""; }

void printOp(const Graph &g, const Op &op, int depth, std::string &out) {
  std::string pad(depth * 2, ' ');
  std::string lhs = op.results.empty() ? "" : refs(op.results) + " = ";
  std::string attrs;
  for (auto &[k, v] : op.attrs)
    attrs += (attrs.empty() ? " {" : ", ") + k + " = " + attrText(v);
  if (!attrs.empty())
    attrs += "}";
  std::string types;
  for (size_t i = 0; i < op.results.size(); ++i)
    types += (i ? ", " : "") + op.results[i]->type.str();
  std::string line = where(g, op.loc);
  out += fmt::format("{}{}{}({}){}{}{}{}", pad, lhs, opInfo(op.kind).spelling, refs(op.operands), attrs,
                     types.empty() ? "" : " : " + types, op.shapeClass != opInfo(op.kind).shapeClass
                                                             ? std::string(" ") + shapeClassName(op.shapeClass)
                                                             : "",
                     op.regions.empty() ? line + "\n" : " {" + line + "\n");
  for (size_t i = 0; i < op.regions.size(); ++i) {
    if (i)
      out += pad + "} {\n";
    printRegion(g, *op.regions[i], depth + 1, out);
  }
  if (!op.regions.empty())
    out += pad + "}\n";
}

void printRegion(const Graph &g, const Region &r, int depth, std::string &out) {
  std::string pad(depth * 2, ' ');
  if (!r.args.empty()) {
    std::string args;
    for (size_t i = 0; i < r.args.size(); ++i)
      args += (i ? ", " : "") + ref(r.args[i]) + ": " + r.args[i]->type.str();
    out += pad.substr(2) + "^(" + args + "):\n";
  }
  for (const Op *op : r.ops)
    printOp(g, *op, depth, out);
  out += pad + "yield(" + refs(r.yields) + ")\n";
}

} // namespace

std::string print(const Graph &g) {
  std::string out = "model " + g.name + " {\n";
  printRegion(g, g.body, 1, out);
  return out + "}\n";
}

} // namespace dnnc::ir
