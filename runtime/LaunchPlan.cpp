// The launch-plan cache (see LaunchPlan.h).
#include "runtime/LaunchPlan.h"

#include <algorithm>

namespace dnnc::rt {

std::vector<int64_t> LaunchPlanCache::keyOf(const std::vector<Tensor> &inputs) {
  std::vector<int64_t> key;
  for (const Tensor &t : inputs) {
    // The dtype is part of the key so that a wrong one still reaches bindInputs' error.
    key.push_back(static_cast<int64_t>(t.dtype));
    key.push_back(static_cast<int64_t>(t.shape.size()));
    key.insert(key.end(), t.shape.begin(), t.shape.end());
  }
  return key;
}

LaunchPlan *LaunchPlanCache::find(const std::vector<int64_t> &key, const ir::Binding &preset) {
  auto it = std::find_if(plans_.begin(), plans_.end(),
                         [&](const std::unique_ptr<LaunchPlan> &p) { return p->key == key && p->preset == preset; });
  if (it == plans_.end())
    return nullptr;
  std::rotate(plans_.begin(), it, it + 1);
  return plans_.front().get();
}

LaunchPlan &LaunchPlanCache::insert(std::unique_ptr<LaunchPlan> plan) {
  if (plans_.size() >= kCapacity)
    plans_.pop_back();
  plans_.insert(plans_.begin(), std::move(plan));
  return *plans_.front();
}

} // namespace dnnc::rt
