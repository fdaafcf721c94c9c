// The pass manager: runs a list of named graph passes (ir/transforms/Passes.def), checking
// the IR after each with --verify-each and printing it before or after the ones named by
// --print-before / --print-after.
//
// Contract: passes run in the order given, each on the graph the previous one left.
// With verifyEach, ir::verify runs after every pass, and a failure throws InternalError
// naming that pass. Printing writes a header line naming the pass, then the IR, then the
// memory plan when one has been made (a pass's results are part of what it prints).
#pragma once

#include "ir/graph/Graph.h"
#include "ir/transforms/MemoryPlan.h"
#include "ir/transforms/Recompute.h"

#include <functional>
#include <iosfwd>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace dnnc::ir {

// What passes leave for later passes and for whoever runs them.
struct PassState {
  // Which ops of a graph (as it stands when asked) get buffers for their results: the ops
  // the back end lowers to kernels. plan-memory needs it; whoever runs plan-memory sets
  // it (backend/Compile.h).
  std::function<std::function<bool(const Op &)>(const Graph &)> kernelOps;
  std::optional<MemoryPlan> memoryPlan; // plan-memory's result
  std::vector<const Op *> backwardStarts;   // differentiate's backward spans, for recompute
  RecomputeOptions recomputeOptions;        // the pass manager's (PassOptions::recompute)
  bool convEpilogues = false;               // the pass manager's (PassOptions::convEpilogues), for fuse
  std::optional<RecomputeReport> recompute; // recompute's decisions (when a grad was differentiated)
};

struct PassInfo {
  std::string_view name;
  void (*run)(Graph &, PassState &);
  std::string_view reason;
};

enum class PassId {
#define PASS(Id, name, entry, reason) Id,
#include "ir/transforms/Passes.def"
#undef PASS
};

// Every pass of Passes.def, in its order (indexed by PassId).
const std::vector<PassInfo> &allPasses();
const PassInfo &passInfo(PassId id);
const PassInfo *findPass(std::string_view name);
// "fuse, order, plan-memory": for usage errors and help.
std::string passNames();
// Reads "a,b,c" into passes; on an unknown name returns a message listing the known ones.
std::string parsePassList(const std::string &text, std::vector<PassInfo> &out);

struct PassOptions {
  bool fuse = true;        // --no-fuse drops fusion from the default pipeline
  bool reorder = true;     // execution-order planning in the default pipeline
  bool prepack = false;    // prepack-weights in the default pipeline: the target's choice (its schedule)
  bool attention = true;   // fuse-attention (--no-fuse-attention drops it; a target without the kernel too)
  bool convEpilogues = false; // fuse joins conv2d into its epilogues (FusionKind::ConvEpilogue): the target's choice (its schedule)
  bool verifyEach = false; // --verify-each
  RecomputeOptions recompute; // --recompute, --memory-budget
  // Pass names, or "all" for every pass (--print-before, --print-after).
  std::set<std::string> printBefore, printAfter;
  std::ostream *printTo = nullptr; // null: stderr
};
// Checks --print-before/--print-after names; "" when every one is a pass or "all".
std::string checkPrintNames(const PassOptions &options);

class PassManager {
public:
  explicit PassManager(PassOptions options) : options_(std::move(options)) {}
  void run(Graph &g, const std::vector<PassInfo> &passes, PassState &state) const;

private:
  void print(const Graph &g, const PassState &state, std::string_view when, std::string_view pass) const;
  PassOptions options_;
};

} // namespace dnnc::ir
