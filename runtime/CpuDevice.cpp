// The CPU device (see CpuDevice.h).
#include "runtime/CpuDevice.h"

#include <fmt/format.h>

namespace dnnc::rt {

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
  // Below this much work a kernel finishes before the threads would wake up.
  constexpr int64_t kMinParallelWork = 1 << 15;
  if (!info.parallelExtent || pool_.threads() == 1 || launch.extent * launch.work < kMinParallelWork) {
    fn(buffers.data(), dims, 0, launch.extent);
    return;
  }
  pool_.parallelFor(launch.extent, [&](int64_t begin, int64_t end) { fn(buffers.data(), dims, begin, end); });
}

} // namespace dnnc::rt
