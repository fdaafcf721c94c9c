// libFuzzer harness: the .npy reader on a file's bytes. A DataError is the answer to a
// malformed file; anything else is a finding.
#include "FuzzCommon.h"
#include "base/TensorIO.h"

#include <cstdint>

using namespace dnnc;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
  fuzz::guarded(
      [&] {
        rt::Tensor t = rt::readNpyBytes(bytes, "fuzz.npy");
        if (t.byteSize() != t.bytes.size())
          fuzz::finding("a tensor whose bytes do not match its shape");
      },
      [](const std::exception &e) { return dynamic_cast<const DataError *>(&e) != nullptr; });
  return 0;
}
