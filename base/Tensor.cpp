// Host tensors and the float16 / bfloat16 conversions (round to nearest even).
#include "base/Tensor.h"

#include "base/Size.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace dnnc::rt {

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> shape) {
  Tensor t = uninitialized(dtype, std::move(shape));
  std::fill(t.bytes.begin(), t.bytes.end(), uint8_t{0});
  return t;
}

Tensor Tensor::uninitialized(DType dtype, std::vector<int64_t> shape) {
  static const bool poison = [] {
    const char *v = std::getenv("DNNC_POISON_RESULTS");
    return v && *v && std::string(v) != "0";
  }();
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  // Called for every result: the messages are built only when one is thrown.
  std::optional<int64_t> within = bytesWithinLimit(dtype, t.shape);
  int64_t bytes = within ? *within : checkedBytes(dtype, t.shape, "a tensor"); // (which throws)
  if (bytes > memoryLimit())
    requireMemory(bytes, fmt::format("a {} tensor", t.typeText()));
  try {
    t.bytes.resize(static_cast<size_t>(bytes));
  } catch (const std::bad_alloc &) {
    throw DataError(fmt::format("out of memory: {} bytes for a {} tensor could not be allocated", bytes, t.typeText()));
  }
  if (poison)
    std::fill(t.bytes.begin(), t.bytes.end(), uint8_t{0xff});
  return t;
}

Tensor Tensor::view(DType dtype, std::vector<int64_t> shape, uint8_t *data) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.view_ = data;
  return t;
}

Bytes bytesOf(const uint8_t *data, size_t n) {
  Bytes b(n);
  if (n)
    std::memcpy(b.data(), data, n);
  return b;
}

Tensor::Tensor(const Tensor &o) : dtype(o.dtype), shape(o.shape), bytes(bytesOf(o.data(), o.byteSize())) {}

Tensor &Tensor::operator=(const Tensor &o) {
  if (this != &o)
    *this = Tensor(o);
  return *this;
}

namespace {
template <class T> T read(const uint8_t *b, size_t k) {
  T v;
  std::memcpy(&v, b + k * sizeof(T), sizeof(T));
  return v;
}
template <class T> void write(uint8_t *b, size_t k, T v) { std::memcpy(b + k * sizeof(T), &v, sizeof(T)); }
} // namespace

double Tensor::get(size_t k) const {
  switch (dtype) {
  case DType::F32: return read<float>(data(), k);
  case DType::F16: return halfToFloat(read<uint16_t>(data(), k));
  case DType::BF16: return bfloat16ToFloat(read<uint16_t>(data(), k));
  case DType::I32: return read<int32_t>(data(), k);
  case DType::I64: return static_cast<double>(read<int64_t>(data(), k));
  case DType::Bool: return data()[k] != 0;
  }
  return 0;
}

int64_t Tensor::getInt(size_t k) const {
  switch (dtype) {
  case DType::I32: return read<int32_t>(data(), k);
  case DType::I64: return read<int64_t>(data(), k);
  case DType::Bool: return data()[k] != 0;
  default: return static_cast<int64_t>(get(k));
  }
}

size_t Tensor::numel() const {
  size_t n = 1;
  for (int64_t d : shape)
    n *= static_cast<size_t>(d);
  return n;
}

void Tensor::set(size_t k, double v) {
  switch (dtype) {
  case DType::F32: write<float>(data(), k, static_cast<float>(v)); return;
  case DType::F16: write<uint16_t>(data(), k, floatToHalf(static_cast<float>(v))); return;
  case DType::BF16: write<uint16_t>(data(), k, floatToBFloat16(static_cast<float>(v))); return;
  case DType::Bool: data()[k] = v != 0.0; return;
  default: break;
  }
  if (dtype == DType::I32)
    write<int32_t>(data(), k, static_cast<int32_t>(saturatingInt(v, dtype)));
  else
    write<int64_t>(data(), k, saturatingInt(v, dtype));
}

void Tensor::setInt(size_t k, int64_t v) {
  switch (dtype) {
  case DType::I32: write<int32_t>(data(), k, static_cast<int32_t>(v)); return;
  case DType::I64: write<int64_t>(data(), k, v); return;
  case DType::Bool: data()[k] = v != 0; return;
  default: set(k, static_cast<double>(v));
  }
}

std::string Tensor::typeText() const { return shapeText(dtype, shape); }

uint16_t floatToHalf(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  uint32_t sign = (x >> 16) & 0x8000u, mant = x & 0x7fffffu;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xffu);
  if (exp == 0xff)
    return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  int32_t e = exp - 127 + 15;
  if (e >= 0x1f)
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) { // subnormal half (or zero)
    if (e < -10)
      return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mant >> shift, rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u)))
      ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13), rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u)))
    ++half; // a carry into the exponent is still correctly rounded
  return static_cast<uint16_t>(half);
}

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  uint32_t bits = exp == 31 ? (sign | 0x7f800000u | (mant << 13)) : (sign | ((exp - 15 + 127) << 23) | (mant << 13));
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

uint16_t floatToBFloat16(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu))
    return static_cast<uint16_t>((x >> 16) | 0x40u); // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float bfloat16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

double roundToDType(DType d, double v) {
  switch (d) {
  case DType::F32: return static_cast<float>(v);
  case DType::F16: return halfToFloat(floatToHalf(static_cast<float>(v)));
  case DType::BF16: return bfloat16ToFloat(floatToBFloat16(static_cast<float>(v)));
  default: return v;
  }
}

} // namespace dnnc::rt
