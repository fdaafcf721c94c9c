// The counter-based RNG of `dropout` (spec training.md §11): the keep bit of element i
// is a pure function of (seed, step, stream, i), so every device (ref, cpu, cuda-sim,
// cuda) draws the same mask without state, the backward pass redraws the forward mask
// instead of storing it, and each training step (a new `step`) gets fresh masks.
//
// mix is SplitMix64's finalizer; key = mix(mix(mix(seed) ^ step) ^ stream), and element i
// draws u = (mix(key ^ i) >> 40) / 2^24, a multiple of 2^-24 in [0, 1) (exact in f32).
// It is kept when u >= p. tests/numerics/dnnc_test_util.py has the same function in NumPy.
#pragma once

#include "base/Tensor.h"

#include <cstdint>

namespace dnnc::rt {

constexpr uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct DropoutKey {
  uint64_t seed = 0, step = 0, stream = 0;
  uint64_t key() const { return splitmix64(splitmix64(splitmix64(seed) ^ step) ^ stream); }
};

// dropout(x, p) in training: x·keep/(1 − p), keep drawn as above (PyTorch's scaling); p = 1
// drops everything (zeros, not NaN).
Tensor dropoutTrain(const Tensor &x, double p, const DropoutKey &k);
// The dropout op as the reference interpreter and the host run it: a copy of x unless
// `training`; the key's seed and step from `rng` (i64[2]) when the op has that operand,
// else 0 and 0 (a `dnnc run` of a model whose body takes a grad).
Tensor dropoutOp(const Tensor &x, double p, bool training, uint64_t stream, const Tensor *rng);

} // namespace dnnc::rt
