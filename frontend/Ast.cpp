// Printing of the AST: expressions and types as source text, modules as an indented tree.
#include "frontend/Ast.h"

#include "base/WeightNames.h"

#include <fmt/format.h>

namespace dnnc::ast {
namespace {

std::string join(const std::vector<std::string> &parts, const char *sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i)
    out += (i ? sep : "") + parts[i];
  return out;
}

std::string subscript(const Subscript &s) {
  switch (s.kind) {
  case Subscript::Kind::Ellipsis: return "...";
  case Subscript::Kind::Point: return printExpr(*s.start);
  case Subscript::Kind::Slice: {
    std::string out = (s.start ? printExpr(*s.start) : "") + ":" + (s.stop ? printExpr(*s.stop) : "");
    if (s.step)
      out += ":" + printExpr(*s.step);
    return out;
  }
  }
  return "";
}

class TreePrinter {
public:
  std::string out;

  void line(int depth, const std::string &text) { out += std::string(depth * 2, ' ') + text + "\n"; }

  void block(const Block &b, int depth) {
    for (const auto &s : b)
      stmt(*s, depth);
  }

  void stmt(const Stmt &s, int depth) {
    std::string ann = s.annotation ? ": " + printType(*s.annotation) : "";
    std::string at = fmt::format(" @{}:{}", s.range.begin.line, s.range.begin.col);
    switch (s.kind) {
    case Stmt::Kind::Let: line(depth, "Let " + join(s.names, ", ") + ann + " = " + printExpr(*s.value) + at); break;
    case Stmt::Kind::Var: line(depth, "Var " + s.names[0] + ann + " = " + printExpr(*s.value) + at); break;
    case Stmt::Kind::Assign: line(depth, "Assign " + s.names[0] + " = " + printExpr(*s.value) + at); break;
    case Stmt::Kind::Return: line(depth, "Return " + printExpr(*s.value) + at); break;
    case Stmt::Kind::Assert: line(depth, "Assert " + printExpr(*s.value) + at); break;
    case Stmt::Kind::Expr: line(depth, "Expr " + printExpr(*s.value) + at); break;
    case Stmt::Kind::If:
      line(depth, "If " + printExpr(*s.value) + at);
      block(s.body, depth + 1);
      if (!s.orelse.empty()) {
        line(depth, "Else");
        block(s.orelse, depth + 1);
      }
      break;
    case Stmt::Kind::For:
      line(depth, "For " + s.names[0] + " in " + printExpr(*s.value) + ".." + printExpr(*s.hi) + at);
      block(s.body, depth + 1);
      break;
    case Stmt::Kind::While:
      line(depth, "While " + printExpr(*s.value) + at);
      block(s.body, depth + 1);
      break;
    }
  }

  void decl(const Decl &d) {
    std::string at = fmt::format(" @{}:{}", d.range.begin.line, d.range.begin.col);
    switch (d.kind) {
    case Decl::Kind::Import: line(0, "Import " + d.name + at); break;
    case Decl::Kind::Const: line(0, "Const " + d.name + " = " + printExpr(*d.value) + at); break;
    case Decl::Kind::Dim:
      line(0, "Dim " + d.name + (d.value ? " in " + printExpr(*d.value) + ".." + printExpr(*d.hi) : "") + at);
      break;
    case Decl::Kind::Param:
      line(0, std::string(d.frozen ? "Param frozen " : "Param ") + d.name + ": " + printType(*d.type) +
                  (d.from.empty() ? "" : " from " + quoteString(d.from)) + (d.value ? " = " + printExpr(*d.value) : "") + at);
      break;
    case Decl::Kind::Fn:
    case Decl::Kind::Model: {
      std::vector<std::string> ps;
      for (const Param &p : d.params)
        ps.push_back(p.name + ": " + printType(*p.type) + (p.defaultValue ? " = " + printExpr(*p.defaultValue) : ""));
      std::string result = printType(*d.type);
      if (!d.outputNames.empty()) { // named outputs print as they were written
        std::vector<std::string> items;
        for (size_t k = 0; k < d.outputNames.size(); ++k) {
          const Type &t = d.outputNames.size() == 1 ? *d.type : *d.type->elements[k];
          items.push_back((d.outputNames[k].empty() ? "" : d.outputNames[k] + ": ") + printType(t));
        }
        result = "(" + join(items, ", ") + ")";
      }
      line(0, std::string(d.kind == Decl::Kind::Fn ? "Fn " : "Model ") + d.name + "(" + join(ps, ", ") + ") -> " + result + at);
      block(d.body, 1);
      break;
    }
    }
  }
};

} // namespace

Expr::~Expr() {
  std::vector<ExprPtr> work;
  auto detach = [&](Expr &x) {
    for (ExprPtr &i : x.items)
      if (i)
        work.push_back(std::move(i));
    if (x.callee)
      work.push_back(std::move(x.callee));
    for (Arg &a : x.args)
      if (a.value)
        work.push_back(std::move(a.value));
    for (Subscript &s : x.subs)
      for (ExprPtr *p : {&s.start, &s.stop, &s.step})
        if (*p)
          work.push_back(std::move(*p));
  };
  detach(*this);
  while (!work.empty()) {
    ExprPtr next = std::move(work.back());
    work.pop_back();
    detach(*next);
  } // `next` dies here with no children left
}

std::string printExpr(const Expr &e) {
  if (e.kind == Expr::Kind::Binary) {
    // Left-deep chains print along their spine, without recursion and in linear time.
    std::vector<const Expr *> spine{&e};
    while (spine.back()->items[0]->kind == Expr::Kind::Binary)
      spine.push_back(spine.back()->items[0].get());
    std::string out(spine.size(), '(');
    out += printExpr(*spine.back()->items[0]);
    for (auto it = spine.rbegin(); it != spine.rend(); ++it)
      out += " " + (*it)->text + " " + printExpr(*(*it)->items[1]) + ")";
    return out;
  }
  std::vector<std::string> items;
  for (const auto &i : e.items)
    items.push_back(printExpr(*i));
  switch (e.kind) {
  case Expr::Kind::Int: return std::to_string(e.intValue);
  case Expr::Kind::Float: return fmt::format("{}", e.floatValue);
  case Expr::Kind::Bool: return e.intValue ? "true" : "false";
  case Expr::Kind::String: return quoteString(e.text);
  case Expr::Kind::Name:
  case Expr::Kind::DType: return e.text;
  case Expr::Kind::Tuple: return "(" + join(items, ", ") + (items.size() == 1 ? ",)" : ")");
  case Expr::Kind::List: return "[" + join(items, ", ") + "]";
  case Expr::Kind::Unary: return e.text == "not" ? "not " + items[0] : e.text + items[0];
  case Expr::Kind::Binary: return "(" + items[0] + " " + e.text + " " + items[1] + ")";
  case Expr::Kind::Member: return items[0] + "." + e.text;
  case Expr::Kind::Call: {
    std::vector<std::string> args;
    for (const Arg &a : e.args)
      args.push_back((a.keyword.empty() ? "" : a.keyword + " = ") + printExpr(*a.value));
    return printExpr(*e.callee) + "(" + join(args, ", ") + ")";
  }
  case Expr::Kind::Index: {
    std::vector<std::string> subs;
    for (const Subscript &s : e.subs)
      subs.push_back(subscript(s));
    return printExpr(*e.callee) + "[" + join(subs, ", ") + "]";
  }
  }
  return "?";
}

std::string printType(const Type &t) {
  if (t.kind == Type::Kind::Tuple) {
    std::vector<std::string> parts;
    for (const auto &e : t.elements)
      parts.push_back(printType(*e));
    return "(" + join(parts, ", ") + ")";
  }
  if (!t.hasDims)
    return t.dtype;
  std::vector<std::string> dims;
  for (const DimItem &d : t.dims)
    dims.push_back(d.ellipsis ? "..." : printExpr(*d.expr));
  return t.dtype + "[" + join(dims, ", ") + "]";
}

std::string print(const Module &m) {
  TreePrinter p;
  p.line(0, "Module " + m.name);
  for (const auto &d : m.decls)
    p.decl(*d);
  return p.out;
}

} // namespace dnnc::ast
