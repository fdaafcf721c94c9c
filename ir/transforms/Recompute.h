// Recomputation (the `recompute` pass, spec training.md §13, after Echo): for every forward
// value the backward pass reads, keep it (a stash, alive from the forward op that makes it
// to its last backward use) or rematerialize it in the backward pass from values that are
// alive there anyway.
//
// Contract:
// - Runs after `differentiate`, whose backward spans it is given (differentiate's result):
//   in each region holding one, the ops before the span's first op are the forward, the
//   span the backward (the top-level step; the body of a backward loop, whose forward is
//   its per-iteration replay of the loop body).
// - A stashed value is a result of a forward op (not a param) that a backward op reads
//   (as an operand, or inside its regions). It can be recomputed when its op is cheap —
//   elementwise, a cast, a reduction (layer-norm statistics, softmax), an injective view
//   (reshape, transpose, slice, split), a fill, a gather (index, take, embedding), one_hot
//   — or an expanding matmul (its result larger than
//   its operands: attention scores from the stashed q and k), and each operand is alive in
//   the backward pass anyway (kept, outside the forward, a param) or is itself
//   recomputable the same way. Never recomputed: control flow, random ops (dropout), host
//   ops, results with fresh dims; a general matmul or convolution only when a memory
//   budget cannot be met otherwise.
// - Cost model: bytes saved are the value's size (a dim polynomial, as the memory plan's);
//   the time cost of its chain is its FLOPs (the registry's; one per element for other ops)
//   and the bytes it moves, against the same for the whole step, evaluated at the dims'
//   lower bounds and at the planner's reference binding (upper bounds): a decision is
//   taken only when it holds at both ends of the dims' ranges.
// - Modes: none keeps every stash; all recomputes every recomputable value; auto
//   recomputes each value whose chain costs under 1% of the step at both ends of the
//   dims' ranges, then, with a budget, the next cheapest per byte saved (general GEMMs
//   last) until the step's estimated memory (params, gradients, inputs and state, kept
//   stashes; at options.budgetAt) fits.
// - Versions by shape (auto without a budget): then, largest first, each value that holds
//   at least a quarter of the bytes the rule above leaves stashed is recomputed too, while these chains
//   together cost under 5% of the step; that depends on the binding (the T x T attention probabilities are
//   a small stash at T = 128 and most of it at T = 512). The pass evaluates this rule over
//   a grid of bindings across the dims' ranges (each dim from a 64th of its reference
//   value up); version 1 is the rule above alone, and each distinct set of decisions on
//   the grid is another (at most kMaxRecomputeVersions, in the grid's order); the report carries
//   the rule as dim polynomials so that a runtime picks a binding's version with
//   versionAt (no compiling: the caller compiles each version once, with
//   options.version). Every version computes the same values; they differ in memory
//   and time only.
// - Rewrite: each recomputed value gets a clone of its chain placed right before the first
//   backward op that reads it (so fusion can fuse the clone into that consumer), and every
//   backward read of it reads the clone; the forward ops stay for the forward pass. No
//   value changes: the clones compute the forward ops' values again.
#pragma once

#include "ir/graph/Graph.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dnnc::ir {

enum class RecomputeMode { None, Auto, All };

struct RecomputeOptions {
  RecomputeMode mode = RecomputeMode::Auto; // spec §13: auto is the default
  std::optional<int64_t> budget;            // --memory-budget, bytes
  // Where the budget is checked: these dims as given (the REPL's :bind), the others at
  // the planner's reference binding (upper bounds; ir::kUnboundedDim without one).
  std::map<std::string, int64_t> budgetAt;
  // Which of the versions by shape the rewrite applies (RecomputeReport::versions).
  size_t version = 0;
};

constexpr size_t kMaxRecomputeVersions = 3;

// "none", "auto", "all"; nullopt otherwise.
std::optional<RecomputeMode> parseRecomputeMode(const std::string &text);
const char *recomputeModeName(RecomputeMode mode);
// "8GiB", "512MiB", "1.5GiB", "1000000" (bytes; units B, KiB, MiB, GiB, TiB): nullopt for
// anything else, zero or negative.
std::optional<int64_t> parseByteSize(const std::string &text);
// The bytes one unit of a memory size stands for ("" and B: 1, KiB ... TiB: powers of
// 1024); nullopt for any other unit. parseByteSize's units, and the REPL's :solve's.
std::optional<double> byteUnit(const std::string &unit);
// The diagnostics of the flags and :set commands (tested by their text).
std::string badRecomputeMode(const std::string &text);
std::string badMemoryBudget(const std::string &text);

struct StashDecision {
  const Value *value = nullptr; // the forward value (still in the graph)
  bool recomputed = false;
  int chainOps = 0;              // ops cloned for it (recomputed only)
  double costShare = 0;          // its chain's time cost over the step's, the larger of the two ends
  std::string why;               // one phrase: the op kind, or what blocks it
  // The rule by shape: whether it applies (a candidate the binding-independent rule left
  // stashed), and its chain's time cost (the step's units: RecomputeReport::stepCost).
  bool byShape = false;
  sym::ExprRef chainCost;
};

// One set of decisions by shape, and the first grid binding that chose it.
struct RecomputeVersion {
  std::vector<bool> recomputed; // per decision
  std::map<std::string, int64_t> firstAt;
};

struct RecomputeReport {
  RecomputeMode mode = RecomputeMode::None;
  std::optional<int64_t> budget;
  std::vector<StashDecision> decisions; // forward order, regions in walk order
  bool budgetMet = true;
  // auto without a budget: the versions by shape (one when the decisions do not depend on
  // the binding; empty for none, all and budgets), the one applied, and the step's cost.
  std::vector<RecomputeVersion> versions;
  size_t version = 0;
  sym::ExprRef stepCost;
  // Every result of an op the rewrite cloned into the backward pass (`dnnc profile` counts
  // their buffers as recomputed); fusion keeps a fused group's root result as its own.
  std::vector<const Value *> recomputedValues;
  sym::ExprRef keptBytes() const;       // stashed activations still stashed
  sym::ExprRef recomputedBytes() const; // those the backward pass recomputes
  // The decisions by shape at `binding` (every dim bound), and the version a binding
  // runs: given each version's planned arena bytes (the memory plans' formulas), the
  // smallest at the binding where it is smaller by more than 1%, and among near-equals (or
  // without arenas) the version closest to the decisions (the same ones; else the fewest
  // that differ). The plan has the last
  // word because a stash is not always what sets the peak: in a layer loop whose backward
  // replays one layer at a time, recomputing the probabilities saves no peak bytes and
  // costs time.
  std::vector<bool> decideAt(const std::map<std::string, int64_t> &binding) const;
  size_t versionAt(const std::map<std::string, int64_t> &binding, const std::vector<sym::ExprRef> &arenas = {}) const;
};

// The pass; `backwardStarts` is what differentiate returned for this graph.
RecomputeReport recompute(Graph &g, const std::vector<const Op *> &backwardStarts, const RecomputeOptions &options);
// `--emit=plan` and the REPL: one line per stashed value.
std::string print(const RecomputeReport &report, const Graph &g);
// The versions by shape, one line each (part of print when there are several).
std::string printVersions(const RecomputeReport &report);

} // namespace dnnc::ir
