// The GPU target's mapping policy (see GpuMapping.h): which of threads, warps or blocks
// take a kernel's parallel iterations, and the grid that covers them.
#include "backend/gpu/GpuMapping.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace dnnc::gpu {

using kir::Stmt;
using kir::StmtPtr;

namespace {
bool isAttention(const Stmt &s) { return s.kind == Stmt::Kind::Attention; }
bool isGemm(const Stmt &s) { return s.kind == Stmt::Kind::Gemm; }

// Whether every statement of the parallel loop's body is `kind`'s.
bool bodyOf(const Stmt *p, bool (*kind)(const Stmt &)) {
  return p && !p->body.empty() && std::all_of(p->body.begin(), p->body.end(), [&](const StmtPtr &b) { return kind(*b); });
}

bool hasReduceLoop(const Stmt &s) {
  if (s.kind == Stmt::Kind::For && s.schedule == Stmt::Schedule::Reduce)
    return true;
  return std::any_of(s.body.begin(), s.body.end(), [](const StmtPtr &b) { return hasReduceLoop(*b); });
}
} // namespace

Mapping mappingOf(const kir::Kernel &k) {
  const Stmt *p = k.parallelLoop();
  if (bodyOf(p, isGemm) || bodyOf(p, isAttention))
    return Mapping::Blocks;
  return hasReduceLoop(*k.body) ? Mapping::Warps : Mapping::Threads;
}

std::vector<const Stmt *> gridLoops(const kir::Kernel &k) {
  if (mappingOf(k) == Mapping::Blocks)
    return {};
  if (const Stmt *p = k.parallelLoop())
    return {p};
  std::vector<const Stmt *> loops;
  if (k.independentLoops && k.body->kind == Stmt::Kind::Block)
    for (const StmtPtr &b : k.body->body)
      if (b->kind == Stmt::Kind::For)
        loops.push_back(b.get());
  return loops.size() == k.body->body.size() ? loops : std::vector<const Stmt *>{};
}

std::vector<const Stmt *> loopNest(const Stmt &root, Mapping mapping) {
  std::vector<const Stmt *> chain{&root};
  std::set<std::string> chainVars{root.var};
  for (;;) {
    const Stmt &last = *chain.back();
    if (last.body.size() != 1 || last.body[0]->kind != Stmt::Kind::For)
      break;
    const Stmt &inner = *last.body[0];
    bool laneLoop = mapping == Mapping::Warps && inner.schedule == Stmt::Schedule::Vectorize;
    auto uses = sym::freeVars(inner.extent);
    bool dependent = std::any_of(uses.begin(), uses.end(), [&](const std::string &v) { return chainVars.count(v) != 0; });
    if (inner.schedule == Stmt::Schedule::Reduce || laneLoop || dependent)
      break;
    chain.push_back(&inner);
    chainVars.insert(inner.var);
  }
  return chain;
}

Grid gridOf(const kir::Kernel &k) {
  Grid g;
  g.y = sym::constant(1);
  std::vector<const Stmt *> loops = gridLoops(k);
  Mapping mapping = mappingOf(k);
  if (loops.empty() && mapping != Mapping::Blocks) { // one thread (or one warp) runs the body
    g.x = sym::constant(1);
    g.threads = kWarpLanes;
    return g;
  }
  auto ceilDiv = [](sym::ExprRef a, int64_t b) { return sym::floorDiv(sym::add(a, sym::constant(b - 1)), sym::constant(b)); };
  auto widen = [](sym::ExprRef &largest, sym::ExprRef e) { largest = largest ? sym::max(largest, e) : e; };
  sym::ExprRef iterations = nullptr, columnTiles = nullptr; // of the largest grid loop, GEMM
  for (const Stmt *root : loops) {
    sym::ExprRef n = sym::constant(1);
    for (const Stmt *loop : loopNest(*root, mapping))
      n = sym::mul(n, loop->extent);
    widen(iterations, n);
  }
  switch (mapping) {
  case Mapping::Threads: g.x = ceilDiv(iterations, kBlockThreads); break;
  case Mapping::Warps: g.x = ceilDiv(iterations, kBlockThreads / kWarpLanes); break;
  case Mapping::Blocks:
    g.x = k.parallelLoop()->extent;
    // A task's columns may depend on the task (a schedule that splits N); the first
    // task's are the widest.
    if (bodyOf(k.parallelLoop(), isAttention)) // a block's warps take all of its rows' keys
      break;
    for (const StmtPtr &b : k.parallelLoop()->body)
      widen(columnTiles, ceilDiv(sym::substitute(b->gemm.n, {{k.parallelLoop()->var, sym::constant(0)}}), kGemmTile));
    g.y = columnTiles;
    break;
  }
  return g;
}

std::string describeLaunch(const kir::Kernel &k) {
  static const char *names[] = {"threads (grid-stride)", "warps (lanes split reductions, shuffles combine)",
                                "blocks (shared-memory GEMM tiles)"};
  Grid g = gridOf(k);
  const char *name = bodyOf(k.parallelLoop(), isAttention) ? "blocks (attention: a warp per query row, key tiles in shared memory)"
                                                            : names[static_cast<int>(mappingOf(k))];
  return fmt::format("gpu: {} by {}, grid [{}, {}] x {} threads", k.name, name, g.x->str(),
                     g.y->str(), g.threads);
}

} // namespace dnnc::gpu
