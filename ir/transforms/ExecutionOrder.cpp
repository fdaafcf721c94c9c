// Execution-order planning (see ExecutionOrder.h for the contract).
#include "ir/transforms/ExecutionOrder.h"

#include "ir/graph/Updates.h"
#include "ir/graph/Walk.h"
#include "ir/transforms/MemoryPlan.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace dnnc::ir {
namespace {

class Orderer {
public:
  explicit Orderer(Graph &g) : g_(g), reference_(referenceBinding(g)) {}

  // Reorders `r` alone (planExecutionOrder orders nested regions first).
  void region(Region &r, OrderStats &stats) {
    if (r.ops.size() < 3) {
      if (&r == &g_.body) // nothing reorders: updates are safe as the order stands, or not
        g_.updates = safeUpdates(g_);
      return;
    }
    // Dependencies inside the region: operands (also those used by nested regions).
    std::map<const Value *, size_t> madeBy;
    for (size_t k = 0; k < r.ops.size(); ++k)
      for (const Value *v : r.ops[k]->results)
        madeBy[v] = k;
    size_t n = r.ops.size();
    std::vector<std::set<size_t>> deps(n);
    std::vector<std::vector<const Value *>> reads(n);
    for (size_t k = 0; k < n; ++k) {
      forEachRead(*r.ops[k], [&](const Value *v) { reads[k].push_back(v); });
      for (const Value *v : reads[k])
        if (auto it = madeBy.find(v); it != madeBy.end() && it->second != k)
          deps[k].insert(it->second);
    }
    // Dims bound when an op runs (an EDO op's or a loop's result sizes): an op whose result
    // type uses one waits for the first op whose result has it, though it may read none of
    // its values (full([shape(r, 0), 2]) after the while that sizes r). Dims the region
    // gets from outside (its args, what it reads from outer scopes) are bound already.
    std::set<std::string> outer;
    auto addVars = [](const Value *v, std::set<std::string> &names) {
      for (const sym::ExprRef &d : v->type.dims)
        for (const std::string &name : sym::freeVars(d))
          names.insert(name);
    };
    for (const Value *a : r.args)
      addVars(a, outer);
    for (size_t k = 0; k < n; ++k) {
      std::set<const Value *> inside; // made in op k's own regions (a fused group's args and values)
      for (const auto &body : r.ops[k]->regions)
        walkRegions(*body, [&](const Region &nested) {
          inside.insert(nested.args.begin(), nested.args.end());
          for (const auto &inner : nested.ops)
            inside.insert(inner->results.begin(), inner->results.end());
        });
      for (const Value *v : reads[k])
        if (!madeBy.count(v) && !inside.count(v))
          addVars(v, outer);
    }
    std::map<std::string, size_t> boundBy;
    for (size_t k = 0; k < n; ++k) {
      std::set<std::string> names;
      for (const Value *v : r.ops[k]->results)
        addVars(v, names);
      // (and the values inside its regions: a fused group's broadcast to [S, 3, 4] needs S
      // though the group's result is f32[3, 4])
      for (const auto &body : r.ops[k]->regions)
        walk(*body, [&](const Op &inner) {
          for (const Value *v : inner.results)
            addVars(v, names);
        });
      for (const std::string &name : names)
        if (!outer.count(name))
          deps[k].insert(boundBy.emplace(name, k).first->second); // itself when it is the first
    }
    // assert_dims: a barrier. Each assert waits for the ops since the previous one, and
    // each op for the last assert before it (the rest follows by transitivity).
    std::optional<size_t> lastAssert;
    size_t since = 0;
    for (size_t k = 0; k < n; ++k) {
      if (r.ops[k]->kind == OpKind::AssertDims) {
        for (size_t j = since; j < k; ++j)
          deps[k].insert(j);
        lastAssert = k;
        since = k + 1;
      } else if (lastAssert) {
        deps[k].insert(*lastAssert);
      }
    }
    for (size_t k = 0; k < n; ++k)
      deps[k].erase(k);
    if (&r == &g_.body)
      updateEdges(madeBy, reads, deps);
    std::set<const Value *> keep(r.yields.begin(), r.yields.end());
    // Program order, unless an update's edges move its writer after a later reader.
    std::vector<size_t> program = topological(deps);
    std::vector<size_t> greedy = schedule(r, deps, reads, keep);
    int64_t before = peak(r, program, reads, keep), after = peak(r, greedy, reads, keep);
    stats.peakBefore += before;
    if (after < before || program != natural(n)) {
      std::vector<Op *> ops;
      for (size_t k : greedy)
        ops.push_back(r.ops[k]);
      if (after >= before) { // the update edges moved program order: keep that
        ops.clear();
        for (size_t k : program)
          ops.push_back(r.ops[k]);
      }
      r.ops = ops;
      ++stats.regionsReordered;
      stats.peakAfter += std::min(after, before);
    } else {
      stats.peakAfter += before;
    }
  }

private:
  // Write-after-read edges for the body's updates: the op that writes an update over its
  // target waits for every other op that reads the target's old value (the backward
  // pass's `g @ wᵀ` has no other reason to run before w's update). An update whose edges
  // would close a cycle (a reader of the old value that needs the new one) is dropped,
  // and so is one updateWriters rejects: they come out as ordinary outputs.
  void updateEdges(const std::map<const Value *, size_t> &madeBy, const std::vector<std::vector<const Value *>> &reads,
                   std::vector<std::set<size_t>> &deps) {
    std::vector<Graph::Update> kept;
    size_t n = deps.size();
    for (const auto &[u, w] : updateWriters(g_)) {
      auto at = madeBy.find(w->results[0]);
      if (at == madeBy.end())
        continue;
      size_t writer = at->second;
      // Readers of the old value: of the target, or of a view of it (w[l], no copy).
      std::vector<const Value *> old = viewsOf(g_.body, updateTarget(g_, u));
      std::vector<size_t> readers;
      for (size_t k = 0; k < n; ++k)
        if (k != writer && std::any_of(reads[k].begin(), reads[k].end(),
                                       [&](const Value *v) { return std::find(old.begin(), old.end(), v) != old.end(); }))
          readers.push_back(k);
      // Everything that (transitively) waits for the writer: none of it may be a reader.
      std::vector<std::vector<size_t>> users(n);
      for (size_t k = 0; k < n; ++k)
        for (size_t d : deps[k])
          users[d].push_back(k);
      std::vector<bool> after(n, false);
      std::vector<size_t> stack{writer};
      while (!stack.empty()) {
        size_t k = stack.back();
        stack.pop_back();
        for (size_t user : users[k])
          if (!after[user])
            after[user] = true, stack.push_back(user);
      }
      if (std::any_of(readers.begin(), readers.end(), [&](size_t k) { return after[k]; }))
        continue;
      deps[writer].insert(readers.begin(), readers.end());
      kept.push_back(u);
    }
    g_.updates = std::move(kept);
  }

  // A topological order of `deps`, the earliest op in program order first among the ready
  // ones: program order itself when it respects every edge.
  static std::vector<size_t> natural(size_t n) {
    std::vector<size_t> order(n);
    for (size_t k = 0; k < n; ++k)
      order[k] = k;
    return order;
  }

  static std::vector<size_t> topological(const std::vector<std::set<size_t>> &deps) {
    size_t n = deps.size();
    std::vector<size_t> waiting(n), order;
    std::vector<std::vector<size_t>> users(n);
    for (size_t k = 0; k < n; ++k) {
      waiting[k] = deps[k].size();
      for (size_t d : deps[k])
        users[d].push_back(k);
    }
    std::set<size_t> ready;
    for (size_t k = 0; k < n; ++k)
      if (!waiting[k])
        ready.insert(k);
    while (!ready.empty()) {
      size_t k = *ready.begin();
      ready.erase(ready.begin());
      order.push_back(k);
      for (size_t u : users[k])
        if (--waiting[u] == 0)
          ready.insert(u);
    }
    return order;
  }

  int64_t bytes(const Value *v) const {
    auto it = bytes_.find(v);
    if (it == bytes_.end())
      it = bytes_.emplace(v, sym::evaluate(v->type.bytes(), reference_).value_or(0)).first;
    return it->second;
  }

  // Bytes live at once over `order`: results live from their op to their last reader.
  int64_t peak(const Region &r, const std::vector<size_t> &order, const std::vector<std::vector<const Value *>> &reads,
               const std::set<const Value *> &keep) const {
    std::map<const Value *, size_t> last;
    for (size_t pos = 0; pos < order.size(); ++pos)
      for (const Value *v : reads[order[pos]])
        last[v] = pos;
    int64_t live = 0, best = 0;
    std::vector<std::vector<const Value *>> dies(order.size());
    for (size_t pos = 0; pos < order.size(); ++pos) {
      for (const Value *v : r.ops[order[pos]]->results) {
        live += bytes(v);
        auto it = last.find(v);
        if (!keep.count(v))
          dies[it == last.end() ? pos : it->second].push_back(v);
      }
      best = std::max(best, live);
      for (const Value *v : dies[pos])
        live -= bytes(v);
    }
    return best;
  }

  std::vector<size_t> schedule(const Region &r, const std::vector<std::set<size_t>> &deps,
                               const std::vector<std::vector<const Value *>> &reads, const std::set<const Value *> &keep) const {
    size_t n = r.ops.size();
    std::map<const Value *, int> readersLeft;
    for (size_t k = 0; k < n; ++k)
      for (const Value *v : std::set<const Value *>(reads[k].begin(), reads[k].end()))
        ++readersLeft[v];
    std::vector<size_t> waiting(n);
    std::vector<std::vector<size_t>> users(n);
    for (size_t k = 0; k < n; ++k) {
      waiting[k] = deps[k].size();
      for (size_t d : deps[k])
        users[d].push_back(k);
    }
    // The greedy choice: among the ready ops, the one that frees the most bytes net of
    // what it allocates (the first in program order on ties). An op's gain changes only
    // when one of its operands comes down to its last reader, so gains are kept up to
    // date as readers run and the ready ops sit in a set ordered by gain.
    std::unordered_set<const Op *> here(r.ops.begin(), r.ops.end());
    std::vector<std::vector<const Value *>> uniqueReads(n);
    std::unordered_map<const Value *, std::vector<size_t>> readersOf;
    for (size_t k = 0; k < n; ++k) {
      std::set<const Value *> u(reads[k].begin(), reads[k].end());
      uniqueReads[k].assign(u.begin(), u.end());
      for (const Value *v : uniqueReads[k])
        readersOf[v].push_back(k);
    }
    auto frees = [&](const Value *v) { return v->def && !keep.count(v) && here.count(v->def); };
    std::vector<int64_t> gain(n, 0);
    for (size_t k = 0; k < n; ++k) {
      for (const Value *v : r.ops[k]->results)
        gain[k] -= bytes(v);
      for (const Value *v : uniqueReads[k])
        if (readersLeft[v] == 1 && frees(v))
          gain[k] += bytes(v);
    }
    std::vector<bool> done(n, false), isReady(n, false);
    std::set<std::pair<int64_t, size_t>> ready; // (-gain, k)
    for (size_t k = 0; k < n; ++k)
      if (!waiting[k])
        ready.insert({-gain[k], k}), isReady[k] = true;
    std::vector<size_t> order;
    while (!ready.empty()) {
      size_t best = ready.begin()->second;
      ready.erase(ready.begin());
      done[best] = true;
      order.push_back(best);
      for (const Value *v : uniqueReads[best]) {
        if (--readersLeft[v] != 1 || !frees(v))
          continue;
        for (size_t k : readersOf[v]) // the one reader left gains v's bytes
          if (!done[k]) {
            if (isReady[k])
              ready.erase({-gain[k], k});
            gain[k] += bytes(v);
            if (isReady[k])
              ready.insert({-gain[k], k});
          }
      }
      for (size_t u : users[best])
        if (--waiting[u] == 0)
          ready.insert({-gain[u], u}), isReady[u] = true;
    }
    return order;
  }

  Graph &g_;
  std::map<std::string, int64_t> reference_;
  mutable std::unordered_map<const Value *, int64_t> bytes_;
};

} // namespace

OrderStats planExecutionOrder(Graph &g) {
  OrderStats stats;
  Orderer orderer(g);
  walkRegions(g.body, [&](Region &r) { orderer.region(r, stats); }, WalkOrder::Post);
  verify(g);
  g.updates = safeUpdates(g); // what the edges made safe: all that updateEdges kept
  return stats;
}

} // namespace dnnc::ir
