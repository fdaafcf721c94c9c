// The CPU device (see CpuDevice.h).
#include "runtime/CpuDevice.h"

#include <fmt/format.h>

#include <algorithm>

namespace dnnc::rt {

namespace {
// The time of one work unit (an innermost iteration, Lower's kernelInfo), roughly: units
// differ (a vectorized multiply-add, an exp, a load that misses), and on one thread at
// [512, 384] the elementwise, gelu, softmax and layer-norm models took 0.6-2.7 ns per
// unit, calls included (docs/performance.md, "Parallelism"): 1 ns is their middle.
constexpr double kNsPerWorkUnit = 1.0;
} // namespace

std::string CpuDevice::name() const { return fmt::format("cpu, {} threads", pool_.threads()); }

void CpuDevice::launch(size_t kernel, const KernelInfo &info, const std::vector<const Tensor *> &in, std::vector<Tensor> &out,
                       const Launch &launch) {
  std::vector<uint8_t *> buffers;
  for (const Tensor *t : in)
    buffers.push_back(const_cast<uint8_t *>(t->data()));
  for (Tensor &t : out)
    buffers.push_back(t.data());
  KernelFn fn = fns_.at(kernel);
  const int64_t *dims = launch.dims.data();
  if (!info.parallelExtent || pool_.threads() == 1) {
    fn(buffers.data(), dims, 0, launch.extent);
    return;
  }
  // The pool splits the work into chunks that pay for a thread's wake-up each: none for a
  // small kernel, which runs here.
  double costNs = static_cast<double>(launch.extent) * static_cast<double>(launch.work) * kNsPerWorkUnit;
  pool_.parallelFor(launch.extent, [&](int64_t begin, int64_t end) { fn(buffers.data(), dims, begin, end); },
                    static_cast<int64_t>(std::min(costNs, 1e18)));
}

} // namespace dnnc::rt
