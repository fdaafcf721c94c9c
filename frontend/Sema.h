// Semantic analysis: imports, consts, dims, fn instantiation, dtype rules and the
// construction of one typed graph IR per model, with shapes from RDP.
#pragma once

#include "base/Diagnostics.h"
#include "ir/graph/Graph.h"
#include "ir/sym/Analyzer.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dnnc {

// A named value of a model, as `dnnc shapes` and the REPL list it.
struct NamedValue {
  std::string name;
  std::string role; // param, input, let, var, output
  SourceRange loc;
  ir::TensorType type;
  ir::ShapeClass shapeClass;
  std::string op; // spelling of the op that made it ("input", "param", "add", ...)
};

struct DimInfo {
  std::string name;
  SourceRange loc;
  std::string origin; // "declared", "implicit in the signature of model main", "fresh: nonzero", ...
  bool generated = false;
};

struct ModelInfo {
  std::string name;
  SourceRange loc;
  std::unique_ptr<ir::Graph> graph;
  sym::Analyzer analyzer; // global ranges plus this model's asserts
  std::vector<NamedValue> values;
  std::vector<DimInfo> dims;
  std::shared_ptr<void> scope; // the model body's final scope, for typing REPL input
};

// The answer to "what is the type of this expression" in a model's scope.
struct ExprType {
  std::string kind; // tensor, int, float, bool, ...
  std::optional<ir::TensorType> tensor;
  std::optional<sym::ExprRef> dim; // a compile-time integer (dim expression)
  std::string text;                // other compile-time values, printed
  ir::ShapeClass shapeClass = ir::ShapeClass::ISDO;
  std::string op;
};

class Program {
public:
  Program();
  ~Program();
  SourceManager &sources() { return sources_; }
  void addIncludePath(std::string dir) { includePaths_.push_back(std::move(dir)); }
  // Loads FILE (and its imports) and checks every model in it. False on any error, with
  // the diagnostics in `diags`. Internal errors propagate as InternalError.
  bool load(const std::string &path, DiagnosticEngine &diags);
  bool loadText(const std::string &path, std::string text, DiagnosticEngine &diags);
  std::vector<ModelInfo> &models() { return models_; }
  ModelInfo *model(const std::string &name);
  // Types REPL input in the final scope of `model` (nothing runs).
  std::optional<ExprType> typeExpression(ModelInfo &model, const std::string &text, DiagnosticEngine &diags);

private:
  class Sema;
  SourceManager sources_;
  std::vector<std::string> includePaths_;
  std::vector<ModelInfo> models_;
  std::unique_ptr<Sema> sema_;
};

// Where `import nn;` finds the standard library (DNNC_STDLIB overrides).
std::string stdlibDir();

} // namespace dnnc
