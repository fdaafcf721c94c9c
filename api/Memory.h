// A model's memory as the REPL's :mem and :solve and the Python module's memory() and
// solve_memory() report it: the arena `dnnc run` plans (made on a copy of the model, as
// the CPU target plans it), the params', inputs' and outputs' bytes, each a formula of
// the dims, and the largest value of a dim whose bytes fit a limit.
#pragma once

#include "backend/Compile.h"
#include "ir/sym/Analyzer.h"
#include "ir/transforms/MemoryPlan.h"

#include <functional>
#include <map>
#include <optional>
#include <string>

namespace dnnc::api {

// The memory plan `dnnc run` makes for `g`, made on a copy (`g` stays as it is) that the
// plan's buffers point into.
struct PlannedMemory {
  std::unique_ptr<ir::Graph> graph;
  ir::MemoryPlan plan;
};
PlannedMemory planMemory(const ir::Graph &g, const backend::CompileOptions &options);

// The bytes of a model (`g` as written, `plan` made by planMemory) as formulas of its dims.
struct MemorySummary {
  sym::ExprRef arena, lateArena; // lateArena: null when no value waits for an EDO dim
  sym::ExprRef params, inputs, outputs;
  size_t paramCount = 0;
};
MemorySummary summarizeMemory(const ir::Graph &g, const ir::MemoryPlan &plan);

// `e` under `b`: a number when every dim is bound, else the formula with the bound dims
// substituted, simplified by `analyzer` ("more than 2^63 - 1" past 64 bits).
std::string bytesText(sym::ExprRef e, const std::map<std::string, int64_t> &b, const sym::Analyzer &analyzer);

// The sum of the bytes of `values`.
template <class Values> sym::ExprRef totalBytes(const Values &values) {
  sym::ExprRef sum = sym::constant(0);
  for (const ir::Value *v : values)
    sum = sym::add(sum, v->type.bytes());
  return sum;
}

// The largest `dim` in its range (`range`, from the model) for which `bytes` (growing with
// every dim) evaluates to at most `limit` under `bound` plus the dim; found by binary
// search. Unbound when `bytes` also depends on a dim `bound` does not bind (named in
// `unbound`, for the caller to say how to bind it); DataError when the range holds no
// positive value.
struct SolveResult {
  enum Kind { Value, None, Any, Unbound } kind = Value;
  std::string unbound;
  int64_t value = 0;                 // Value: the largest that fits; None: the smallest tried; Any: the largest in range
  std::optional<int64_t> bytes;      // None/Any: the bytes at `value` (empty: past 64 bits)
  bool stoppedByOverflow = false;    // Value: value + 1 needs more than 2^63 - 1 bytes
};
// `bytesAt`, when given, sizes each binding tried instead of `bytes` (a training step's
// recompute versions by shape: each binding by its own version's formula).
SolveResult solveLargest(sym::ExprRef bytes, const std::string &dim, std::pair<int64_t, int64_t> range,
                         const std::map<std::string, int64_t> &bound, double limit,
                         const std::function<std::optional<int64_t>(const std::map<std::string, int64_t> &)> &bytesAt = nullptr);

} // namespace dnnc::api
