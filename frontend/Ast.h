// The AST: the project's own nodes with source ranges, built from the ANTLR parse tree.
#pragma once

#include "base/Source.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dnnc::ast {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Arg {
  std::string keyword; // empty when positional
  ExprPtr value;
  SourceRange range;
};

struct Subscript {
  enum class Kind { Ellipsis, Slice, Point } kind;
  ExprPtr start, stop, step; // Point uses start; any may be null in a Slice
  SourceRange range;
};

// Operators, resolved from their spelling once by the parser (`Expr::text` keeps the
// spelling for printing and messages).
enum class UnaryOp { Plus, Minus, Not };
enum class BinaryOp { Add, Sub, Mul, Div, Mod, Pow, Matmul, Eq, Ne, Lt, Le, Gt, Ge, And, Or };

struct Expr {
  enum class Kind { Int, Float, Bool, String, Name, DType, Tuple, List, Unary, Binary, Call, Index, Member };
  Kind kind;
  SourceRange range;
  std::string text;            // Name/Member/DType/String spelling, operator for Unary/Binary
  UnaryOp unaryOp = UnaryOp::Plus;    // Unary
  BinaryOp binaryOp = BinaryOp::Add;  // Binary
  int64_t intValue = 0;        // Int and Bool
  double floatValue = 0;       // Float
  std::vector<ExprPtr> items;  // Tuple/List elements; Unary/Binary operands; Member base
  ExprPtr callee;              // Call callee, Index base
  std::vector<Arg> args;       // Call
  std::vector<Subscript> subs; // Index

  Expr() = default;
  Expr(const Expr &) = delete;
  Expr &operator=(const Expr &) = delete;
  // Takes the tree apart without recursion (a 10,000-term sum is a left-deep tree).
  ~Expr();
};

struct DimItem {
  bool ellipsis = false;
  ExprPtr expr;
  SourceRange range;
};

struct Type {
  enum class Kind { Tensor, Tuple } kind = Kind::Tensor;
  std::string dtype;
  bool hasDims = false; // `f32` alone names a scalar, like `f32[]`
  std::vector<DimItem> dims;
  std::vector<std::unique_ptr<Type>> elements;
  SourceRange range;
};
using TypePtr = std::unique_ptr<Type>;

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Block = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind { Let, Var, Assign, Return, If, For, While, Assert, Expr };
  Kind kind;
  SourceRange range;
  std::vector<std::string> names;    // Let pattern / Var / Assign target / For variable
  std::vector<SourceRange> nameRanges;
  TypePtr annotation;                // Let/Var, optional
  ExprPtr value;                     // the expression, condition, or loop start
  ExprPtr hi;                        // For: loop end
  Block body, orelse;                // If: then/else; For/While: body
};

struct Param {
  std::string name;
  TypePtr type;
  ExprPtr defaultValue;
  SourceRange range;
};

struct Decl {
  enum class Kind { Import, Const, Dim, Param, Fn, Model };
  Kind kind;
  std::string name;
  SourceRange range, nameRange;
  ExprPtr value;      // Const value, Param initializer, Dim range start
  ExprPtr hi;         // Dim range end
  TypePtr type;       // Param type, Fn/Model result type
  bool frozen = false; // Param: `param frozen` (dnnc train leaves it as it is)
  std::string from;    // Param: the tensor name `from "..."` gives, placeholders and all (empty: its own name)
  SourceRange fromRange;
  // Model: each output's name from `-> (emb: f32[B, D], ...)`, "" where unnamed; empty when
  // the result type is a plain type.
  std::vector<std::string> outputNames;
  std::vector<SourceRange> outputNameRanges;
  std::vector<Param> params;
  Block body;
};

struct Module {
  std::string name;
  int file = -1;
  std::vector<std::unique_ptr<Decl>> decls;
};

// Renders the AST as an indented tree (`dnnc emit --emit=ast`).
std::string print(const Module &m);
std::string printExpr(const Expr &e);
std::string printType(const Type &t);

} // namespace dnnc::ast
