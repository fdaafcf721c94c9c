// Checked size arithmetic: the one place where element counts and byte sizes are
// computed from dims a user controls (bindings, data-dependent sizes, file headers).
// A negative dim, a product that overflows 64 bits, or a tensor past the tensor-bytes limit
// (base/Limits.def) is a DataError that names the tensor and the numbers, never a
// wrapped size.
#pragma once

#include "base/DType.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dnnc::rt {

// a * b and a + b, or nullopt when the result does not fit in int64.
std::optional<int64_t> checkedMul(int64_t a, int64_t b);
std::optional<int64_t> checkedAdd(int64_t a, int64_t b);

// The bytes of a `dtype` tensor of `shape`; DataError when a dim is negative, the count
// overflows or the bytes pass the tensor-bytes limit. `what` names the tensor in the message
// ("the result of 'conv2d' at line 2").
int64_t checkedBytes(DType dtype, const std::vector<int64_t> &shape, const std::string &what);
// The same bytes without the message: nullopt where checkedBytes would throw (for hot
// paths, which build the message only when it is needed).
std::optional<int64_t> bytesWithinLimit(DType dtype, const std::vector<int64_t> &shape);

// The most bytes one allocation may ask for: the memory limit when set (--limit memory=N),
// else $DNNC_MAX_MEMORY (bytes), else the machine's physical memory (asking for more would
// only end in the kernel's OOM killer).
int64_t memoryLimit();
// Throws DataError("out of memory: N bytes for <what>, ...") when `bytes` exceeds
// memoryLimit(); callers also turn std::bad_alloc into the same message.
void requireMemory(int64_t bytes, const std::string &what);

// "f32[2, 3]"
std::string shapeText(DType dtype, const std::vector<int64_t> &shape);

} // namespace dnnc::rt
