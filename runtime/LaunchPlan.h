// Per-binding launch plans: what a call at one binding of a model's input dims needs (each
// kernel's launch, every result's shape and arena offset, the arena's size, the sizes and
// static indices checked), evaluated from the symbolic dims once and reused by every later
// call with the same input shapes, so that such a call does no symbolic work. What depends
// on a dim the run binds itself (an EDO op's result, a loop-carried shape) is not planned:
// the executor evaluates it when it is bound, as it would without a plan.
#pragma once

#include "base/Tensor.h"
#include "ir/graph/Binding.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace dnnc::rt {

// One launch of a kernel, evaluated from the binding once, by the runtime.
struct Launch {
  std::vector<int64_t> dims; // the values of KernelInfo::dims
  int64_t extent = 0;        // the parallel loop's trip count (0 without one)
  int64_t work = 1;          // rough cost of one of its iterations
  int64_t gridX = 1, gridY = 1; // GPU blocks wanted along x and y
  int gemmVariant = -1;          // the GEMM variant picked (runtime/GemmSelect.h), -1: none
};

// One op under one plan's binding.
struct OpPlan {
  enum class State : uint8_t {
    Unplanned, // not run under this binding yet
    Planned,   // everything below holds (its checks passed once `checked`)
    Dynamic,   // it names a dim the run binds: evaluated at each run
  };
  State state = State::Unplanned;
  bool checked = false; // its sizes, empty reductions and static indices passed under this binding
  // A kernel's results: shapes, and byte offsets in the arena (-1: allocated on their own).
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> offsets;
  Launch launch;
  // A param view: the element offset of its static points, and for each run-time point
  // the operand holding it, the dim it indexes and that dim's stride.
  int64_t viewOffset = 0;
  struct Point {
    size_t operand;
    int64_t dim, stride;
  };
  std::vector<Point> viewPoints;
  int64_t lo = 0, hi = 0; // a for loop's bounds
  double flops = 0;       // the op's FLOP count, evaluated when profiling
};

struct LaunchPlan {
  std::vector<int64_t> key; // the inputs' dtypes and shapes (see LaunchPlanCache::keyOf)
  ir::Binding preset;
  ir::Binding binding; // the dims the inputs and the preset bind
  ir::BindingCheck check;
  size_t arenaBytes = 0;
  std::vector<OpPlan> ops; // by the executable's op index
};

// The plans of the last few distinct input shapes, most recently used first.
class LaunchPlanCache {
public:
  static constexpr size_t kCapacity = 8;
  static std::vector<int64_t> keyOf(const std::vector<Tensor> &inputs);
  // The plan for `key` and `preset`, moved to the front; null when there is none.
  LaunchPlan *find(const std::vector<int64_t> &key, const ir::Binding &preset);
  // Adds a plan at the front, dropping the least recently used one past kCapacity.
  LaunchPlan &insert(std::unique_ptr<LaunchPlan> plan);
  void clear() { plans_.clear(); }
  size_t size() const { return plans_.size(); }

private:
  std::vector<std::unique_ptr<LaunchPlan>> plans_;
};

} // namespace dnnc::rt
