// Shared by the libFuzzer harnesses. A user error (a diagnostic, a DataError) is a normal
// outcome; anything else (an InternalError, any other exception, a crash, ASan/UBSan
// reports) is a finding, reported by aborting so that libFuzzer saves the input.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace dnnc::fuzz {

[[noreturn]] inline void finding(const std::string &what) {
  std::fprintf(stderr, "FUZZ FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Runs `body`; `isUserError(e)` decides which exceptions are a user's mistake.
template <class Body, class IsUserError> void guarded(Body body, IsUserError isUserError) {
  try {
    body();
  } catch (const std::exception &e) {
    if (!isUserError(e))
      finding(std::string("an exception that is not a user error (dnnc would exit 3): ") + e.what());
  } catch (...) {
    finding("an exception that is not a std::exception");
  }
}

} // namespace dnnc::fuzz
