// The CPU device (see CpuDevice.h).
#include "runtime/CpuDevice.h"

#include <fmt/format.h>

namespace dnnc::rt {

std::string CpuDevice::name() const { return fmt::format("cpu, {} threads", pool_.threads()); }

void CpuDevice::launch(size_t kernel, const KernelInfo &info, const std::vector<const Tensor *> &in, std::vector<Tensor> &out,
                       const std::vector<int64_t> &dims) {
  std::vector<uint8_t *> buffers;
  for (const Tensor *t : in)
    buffers.push_back(const_cast<uint8_t *>(t->data()));
  for (Tensor &t : out)
    buffers.push_back(t.data());
  KernelFn fn = fns_.at(kernel);
  if (!info.parallelExtent) {
    fn(buffers.data(), dims.data(), 0, 0);
    return;
  }
  std::map<std::string, int64_t> b;
  for (size_t k = 0; k < dims.size(); ++k)
    b[info.dims[k]] = dims[k];
  int64_t extent = sym::evaluate(info.parallelExtent, b).value_or(0);
  int64_t work = info.work ? sym::evaluate(info.work, b).value_or(1) : 1;
  // Below this much work a kernel finishes before the threads would wake up.
  constexpr int64_t kMinParallelWork = 1 << 15;
  if (pool_.threads() == 1 || extent * work < kMinParallelWork) {
    fn(buffers.data(), dims.data(), 0, extent);
    return;
  }
  pool_.parallelFor(extent, [&](int64_t begin, int64_t end) { fn(buffers.data(), dims.data(), begin, end); });
}

} // namespace dnnc::rt
