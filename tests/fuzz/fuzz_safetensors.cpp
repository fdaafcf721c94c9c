// libFuzzer harness: the .safetensors reader on a file's bytes, whole (readSafetensorsBytes)
// and as the weights loader reads it (parseSafetensors, each float tensor converted to f32,
// F64 included). A DataError is the answer to a malformed file; anything else is a finding.
#include "FuzzCommon.h"
#include "base/TensorIO.h"

#include <cstdint>

using namespace dnnc;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
  fuzz::guarded(
      [&] {
        size_t total = 0;
        for (auto &[name, t] : rt::readSafetensorsBytes(bytes, "fuzz.safetensors")) {
          if (t.byteSize() != t.bytes.size())
            fuzz::finding("tensor '" + name + "' has bytes that do not match its shape");
          total += t.bytes.size();
        }
        if (total > size)
          fuzz::finding("the tensors hold more bytes than the file");
      },
      [](const std::exception &e) { return dynamic_cast<const DataError *>(&e) != nullptr; });
  fuzz::guarded(
      [&] {
        rt::SafetensorsFile file = rt::parseSafetensors(bytes, "fuzz.safetensors");
        for (auto &[name, e] : file.entries)
          if (file.isFloat(e) && file.tensorAs(name, DType::F32).shape != e.shape)
            fuzz::finding("tensor '" + name + "' converted to f32 changed its shape");
      },
      [](const std::exception &e) { return dynamic_cast<const DataError *>(&e) != nullptr; });
  return 0;
}
