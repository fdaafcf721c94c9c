// A backstop under the nesting limits: how much of this thread's stack is left, and a
// located [limit] diagnostic instead of a crash when a recursive walk (sema inside fn
// instantiations inside deep expressions, say) comes near its end.
#pragma once

#include "base/Diagnostics.h"

#include <pthread.h>

#include <cstddef>

namespace dnnc {

// Bytes between the caller's frame and the end of this thread's stack (a large number
// where the system does not say).
inline size_t stackLeft() {
  static thread_local char *low = [] {
    char *result = nullptr;
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void *addr = nullptr;
      size_t size = 0;
      if (pthread_attr_getstack(&attr, &addr, &size) == 0)
        result = static_cast<char *>(addr);
      pthread_attr_destroy(&attr);
    }
    return result;
  }();
  char *here = static_cast<char *>(__builtin_frame_address(0));
  if (!low || here <= low)
    return static_cast<size_t>(-1);
  return static_cast<size_t>(here - low);
}

// What a walk keeps in reserve: enough for the deepest leaf work (the analyzer, fmt,
// the rules of one op) even with the sanitizers' larger frames.
constexpr size_t kStackReserve = size_t{1} << 20;

inline void checkStack(SourceRange at) {
  if (stackLeft() < kStackReserve)
    fail(DiagKind::Limit, at,
         "this is nested too deeply for dnnc's stack (fn calls inside deep expressions); simplify the nesting");
}

} // namespace dnnc
