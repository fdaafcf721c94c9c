// Checked size arithmetic (see Size.h).
#include "base/Size.h"

#include "base/Limits.h"
#include "base/Tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <unistd.h>

namespace dnnc::rt {

std::optional<int64_t> checkedMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

std::optional<int64_t> checkedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

int64_t memoryLimit() {
  if (int64_t set = limit(Limit::Memory))
    return set;
  if (const char *env = std::getenv("DNNC_MAX_MEMORY")) {
    char *end = nullptr;
    long long v = std::strtoll(env, &end, 10);
    if (end != env && *end == '\0' && v > 0)
      return v;
    throw DataError(fmt::format("DNNC_MAX_MEMORY is '{}': it takes a positive number of bytes", env));
  }
  static const int64_t physical = [] {
    long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0)
      return limitInfo(Limit::Memory).highest;
    return checkedMul(pages, page).value_or(limitInfo(Limit::Memory).highest);
  }();
  return physical;
}

void requireMemory(int64_t bytes, const std::string &what) {
  int64_t most = memoryLimit();
  if (bytes > most)
    throw DataError(fmt::format("out of memory: {} bytes for {}, more than the {} bytes available{}", bytes, what, most,
                                limit(Limit::Memory)          ? " (limit memory)"
                                : std::getenv("DNNC_MAX_MEMORY") ? " (DNNC_MAX_MEMORY)"
                                                                 : ""));
}

std::string shapeText(DType dtype, const std::vector<int64_t> &shape) {
  std::string s = std::string(dtypeName(dtype)) + "[";
  for (size_t k = 0; k < shape.size(); ++k)
    s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + "]";
}

namespace {
// first times the shape's nonzero dims (dims assumed non-negative), nullopt past 2^63: as
// NumPy counts, a tensor with a 0 dim is empty but its other dims must still multiply
// within 64 bits (reshaping to [0, 2^62, 2^62] is refused).
std::optional<int64_t> nonzeroProduct(int64_t first, const std::vector<int64_t> &shape) {
  std::optional<int64_t> n = first;
  for (int64_t d : shape)
    if (d != 0 && n)
      n = checkedMul(*n, d);
  return n;
}

bool hasZero(const std::vector<int64_t> &shape) { return std::find(shape.begin(), shape.end(), 0) != shape.end(); }
} // namespace

std::optional<int64_t> bytesWithinLimit(DType dtype, const std::vector<int64_t> &shape) {
  if (std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; }))
    return std::nullopt;
  std::optional<int64_t> n = nonzeroProduct(static_cast<int64_t>(dtypeBytes(dtype)), shape);
  if (!n)
    return std::nullopt;
  if (hasZero(shape))
    return 0;
  return *n > limit(Limit::TensorBytes) ? std::nullopt : n;
}

int64_t checkedBytes(DType dtype, const std::vector<int64_t> &shape, const std::string &what) {
  if (auto bytes = bytesWithinLimit(dtype, shape))
    return *bytes;
  // Every dim is checked before any product, so that a negative dim is named even when a
  // zero elsewhere would make the count 0.
  for (size_t k = 0; k < shape.size(); ++k)
    if (shape[k] < 0)
      throw DataError(fmt::format("{} is {}: dim {} is {}, which is negative", what, shapeText(dtype, shape), k,
                                  shape[k]));
  if (!nonzeroProduct(1, shape))
    throw DataError(fmt::format("{} is {}: its element count overflows 64 bits", what, shapeText(dtype, shape)));
  std::optional<int64_t> bytes = nonzeroProduct(static_cast<int64_t>(dtypeBytes(dtype)), shape);
  if (!bytes)
    throw DataError(fmt::format("{} is {}: its byte count overflows 64 bits", what, shapeText(dtype, shape)));
  throw DataError(fmt::format("{} is {}: it needs {} bytes, over the limit of {} bytes (limit tensor-bytes)", what,
                              shapeText(dtype, shape), *bytes, limit(Limit::TensorBytes)));
}

} // namespace dnnc::rt
