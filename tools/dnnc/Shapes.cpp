// `dnnc shapes`: every named value of a model with its type and shape class.
#include "tools/dnnc/Driver.h"

#include <fmt/format.h>

namespace dnnc::tool {

void printShapes(const ModelInfo &m, const Binding &b, bool json, std::ostream &os) {
  if (json) {
    os << api::shapesJson(m, b).dump(2) << "\n";
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
