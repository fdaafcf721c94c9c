// See Random.h.
#include "base/Random.h"

namespace dnnc::rt {

Tensor dropoutTrain(const Tensor &x, double p, const DropoutKey &k) {
  Tensor r = Tensor::zeros(x.dtype, x.shape);
  uint64_t key = k.key();
  double scale = p < 1 ? 1 / (1 - p) : 0;
  for (size_t i = 0; i < x.numel(); ++i) {
    double u = static_cast<double>(splitmix64(key ^ static_cast<uint64_t>(i)) >> 40) * 0x1p-24;
    r.set(i, u >= p ? x.get(i) * scale : 0.0);
  }
  return r;
}

Tensor dropoutOp(const Tensor &x, double p, bool training, uint64_t stream, const Tensor *rng) {
  if (!training)
    return x;
  DropoutKey k{0, 0, stream};
  if (rng)
    k.seed = static_cast<uint64_t>(rng->getInt(0)), k.step = static_cast<uint64_t>(rng->getInt(1));
  return dropoutTrain(x, p, k);
}

} // namespace dnnc::rt
