// A host tensor: dtype, shape and its values in their native little-endian layout (what
// compiled kernels read and write in place). get/set convert to and from double for the
// reference interpreter.
#pragma once

#include "base/DType.h"
#include "base/Error.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dnnc::rt {

// Bytes that a resize leaves uninitialized: a kernel's result is written whole by its
// kernel (planned ones in the arena already are), so zeroing it first would be a second
// pass over memory. Tensor::zeros zeroes explicitly.
template <class T> struct DefaultInitAllocator : std::allocator<T> {
  template <class U> struct rebind { using other = DefaultInitAllocator<U>; };
  DefaultInitAllocator() = default;
  template <class U> DefaultInitAllocator(const DefaultInitAllocator<U> &) noexcept {}
  template <class U> void construct(U *p) noexcept { ::new (static_cast<void *>(p)) U; }
  template <class U, class... Args> void construct(U *p, Args &&...args) {
    ::new (static_cast<void *>(p)) U(std::forward<Args>(args)...);
  }
};
using Bytes = std::vector<uint8_t, DefaultInitAllocator<uint8_t>>;
// n bytes copied from data by memcpy (a Bytes built from a range of pointers copies a byte
// at a time: the allocator's construct hides the standard library's memmove path).
Bytes bytesOf(const uint8_t *data, size_t n);

struct Tensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  Bytes bytes; // the values, when the tensor owns them (empty for a view)

  Tensor() = default;
  // A copy always owns its values, even a copy of a view: a view's memory (an arena
  // slot) is reused once the planned value dies, and a copy must not see that.
  Tensor(const Tensor &o);
  Tensor &operator=(const Tensor &o);
  Tensor(Tensor &&) = default;
  Tensor &operator=(Tensor &&) = default;

  static Tensor zeros(DType dtype, std::vector<int64_t> shape);
  // Values left unset, for a result its kernel writes whole (DNNC_POISON_RESULTS=1 fills
  // them with 0xff bytes, a NaN in every float type, to catch a kernel that does not).
  static Tensor uninitialized(DType dtype, std::vector<int64_t> shape);
  // A tensor over memory owned elsewhere (a slot of the runtime's arena).
  static Tensor view(DType dtype, std::vector<int64_t> shape, uint8_t *data);
  size_t numel() const;
  size_t byteSize() const { return numel() * dtypeBytes(dtype); }
  bool isView() const { return view_ != nullptr; }
  uint8_t *data() { return view_ ? view_ : bytes.data(); }
  const uint8_t *data() const { return view_ ? view_ : bytes.data(); }
  double get(size_t k) const;
  int64_t getInt(size_t k) const;
  // Stores v converted to the dtype: rounded for floats, truncated for integers, v != 0 for bool.
  void set(size_t k, double v);
  void setInt(size_t k, int64_t v);
  std::string typeText() const; // "f32[2, 3]"

private:
  uint8_t *view_ = nullptr;
};

// Rounds a value to the nearest representable value of a float dtype.
double roundToDType(DType d, double v);
uint16_t floatToHalf(float v);
float halfToFloat(uint16_t h);
uint16_t floatToBFloat16(float v);
float bfloat16ToFloat(uint16_t h);

// The row-major strides, in elements, of `shape`.
inline std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (size_t k = shape.size(); k-- > 1;)
    st[k - 1] = st[k] * shape[k];
  return st;
}

// Calls f(index, flat) for every element of `shape`, in row-major order (the host ops'
// loop over any rank).
template <class F> void forEachIndex(const std::vector<int64_t> &shape, F f) {
  size_t n = 1;
  for (int64_t d : shape)
    n *= static_cast<size_t>(d);
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t flat = 0; flat < n; ++flat) {
    f(idx, flat);
    for (size_t k = shape.size(); k-- > 0;)
      if (++idx[k] < shape[k])
        break;
      else
        idx[k] = 0;
  }
}

// The NumPy broadcast shape of `a` and `b` (assumed compatible), and the flat index in `t`
// of the element a broadcast index `idx` reads (size-1 axes repeat).
inline std::vector<int64_t> broadcastShape(const std::vector<int64_t> &a, const std::vector<int64_t> &b) {
  size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> shape(rank, 1);
  for (const std::vector<int64_t> *t : {&a, &b})
    for (size_t k = 0; k < t->size(); ++k) {
      int64_t &d = shape[rank - t->size() + k];
      d = d == 1 ? (*t)[k] : d;
    }
  return shape;
}
inline size_t broadcastAt(const Tensor &t, const std::vector<int64_t> &idx) {
  size_t flat = 0, stride = 1;
  for (size_t k = t.shape.size(); k-- > 0;) {
    size_t i = static_cast<size_t>(idx[idx.size() - t.shape.size() + k]);
    flat += (t.shape[k] == 1 ? 0 : i) * stride;
    stride *= static_cast<size_t>(t.shape[k]);
  }
  return flat;
}

} // namespace dnnc::rt
