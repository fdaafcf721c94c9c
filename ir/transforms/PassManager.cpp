// The pass registry and the pass manager (see PassManager.h).
#include "ir/transforms/PassManager.h"

#include "base/Error.h"
#include "ir/transforms/Autodiff.h"
#include "ir/transforms/Dropout.h"
#include "ir/transforms/ExecutionOrder.h"
#include "ir/transforms/FuseAttention.h"
#include "ir/transforms/Fusion.h"
#include "ir/transforms/Prepack.h"
#include "ir/transforms/Recompute.h"

#include <fmt/format.h>

#include <iostream>
#include <sstream>

namespace dnnc::ir {
namespace {

// The entry points Passes.def names: each adapts a pass's own function to PassInfo::run.
void runDropoutMode(Graph &g, PassState &) { resolveDropout(g); }
void runDifferentiate(Graph &g, PassState &state) {
  std::vector<const Op *> starts = differentiate(g);
  state.backwardStarts.insert(state.backwardStarts.end(), starts.begin(), starts.end());
}
void runRecompute(Graph &g, PassState &state) {
  if (!state.backwardStarts.empty())
    state.recompute = recompute(g, state.backwardStarts, state.recomputeOptions);
  state.backwardStarts.clear(); // the spans are this graph's as differentiate left it
}
void runFuseAttention(Graph &g, PassState &) { fuseAttention(g); }
void runPrepack(Graph &g, PassState &) { prepackWeights(g); }
void runFuse(Graph &g, PassState &state) { fuseAll(g, state.convEpilogues); }
void runOrder(Graph &g, PassState &) { planExecutionOrder(g); }
void runPlanMemory(Graph &g, PassState &state) {
  if (!state.kernelOps)
    throw InternalError("plan-memory ran without knowing which ops the back end makes kernels of");
  state.memoryPlan = planMemory(g, state.kernelOps(g));
}

} // namespace

const std::vector<PassInfo> &allPasses() {
  static const std::vector<PassInfo> passes{
#define PASS(Id, name, entry, reason) {name, &entry, reason},
#include "ir/transforms/Passes.def"
#undef PASS
  };
  return passes;
}

const PassInfo &passInfo(PassId id) { return allPasses()[static_cast<size_t>(id)]; }

const PassInfo *findPass(std::string_view name) {
  for (const PassInfo &p : allPasses())
    if (p.name == name)
      return &p;
  return nullptr;
}

std::string passNames() {
  std::string names;
  for (const PassInfo &p : allPasses())
    names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
  return names;
}

std::string parsePassList(const std::string &text, std::vector<PassInfo> &out) {
  std::istringstream in(text);
  std::string name;
  while (std::getline(in, name, ',')) {
    if (name.empty())
      continue; // "a,,b" and a trailing comma are harmless
    const PassInfo *p = findPass(name);
    if (!p)
      return fmt::format("unknown pass '{}' (passes: {})", name, passNames());
    out.push_back(*p);
  }
  return "";
}

std::string checkPrintNames(const PassOptions &options) {
  for (const auto *names : {&options.printBefore, &options.printAfter})
    for (const std::string &name : *names)
      if (name != "all" && !findPass(name))
        return fmt::format("unknown pass '{}' for --print-{} (passes: {}, or all)", name,
                           names == &options.printBefore ? "before" : "after", passNames());
  return "";
}

void PassManager::run(Graph &g, const std::vector<PassInfo> &passes, PassState &state) const {
  auto named = [](const std::set<std::string> &names, std::string_view pass) {
    return names.count("all") || names.count(std::string(pass));
  };
  state.recomputeOptions = options_.recompute;
  state.convEpilogues = options_.convEpilogues;
  for (const PassInfo &p : passes) {
    if (named(options_.printBefore, p.name))
      print(g, state, "before", p.name);
    p.run(g, state);
    if (options_.verifyEach) {
      try {
        verify(g);
      } catch (const InternalError &e) {
        throw InternalError(fmt::format("--verify-each: the IR is invalid after pass '{}': {}", p.name, e.what()));
      }
    }
    if (named(options_.printAfter, p.name))
      print(g, state, "after", p.name);
  }
}

void PassManager::print(const Graph &g, const PassState &state, std::string_view when, std::string_view pass) const {
  std::ostream &os = options_.printTo ? *options_.printTo : std::cerr;
  os << fmt::format("// ----- IR {} {} ({}) -----\n", when, pass, g.name) << ir::print(g);
  if (state.memoryPlan)
    os << ir::print(*state.memoryPlan, g);
}

} // namespace dnnc::ir
