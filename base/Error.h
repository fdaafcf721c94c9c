// The error types every layer throws: a user's data or request that cannot be served
// (exit 1) and a broken compiler invariant (exit 3). CompileError, the located error a
// compilation stage stops at, lives with the Diagnostic it carries (base/Diagnostics.h).
#pragma once

#include <stdexcept>

namespace dnnc {

// A user-facing failure to read, check, size or run on the user's data or request (a
// malformed file, a shape that does not fit, out of memory): exit status 1.
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A broken invariant inside the compiler (exit 3), never a user's mistake.
struct InternalError : std::logic_error {
  using std::logic_error::logic_error;
};

} // namespace dnnc
