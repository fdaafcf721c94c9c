// libFuzzer harness: the artifact loader (runtime/Artifact.cpp) up to, not including,
// putting the code on a device. The first byte picks the input's form: even, the rest is
// a whole artifact file (magic, sizes, checksum, header, payload); odd, the rest is the
// JSON header alone, sealed here with a valid checksum so that the fuzzer reaches the
// header's checks instead of stopping at the checksum. A DataError is the answer to a
// malformed artifact; anything else is a finding.
#include "FuzzCommon.h"
#include "runtime/Artifact.h"

#include <cstdint>

using namespace dnnc;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  std::string rest(reinterpret_cast<const char *>(data) + 1, size - 1);
  std::string bytes = (data[0] & 1) ? rt::sealArtifact(rest, "") : rest;
  fuzz::guarded(
      [&] {
        rt::ArtifactContents c = rt::readArtifactBytes(bytes, "fuzz.dnnc");
        if (!c.graph)
          fuzz::finding("an artifact without a graph");
        for (auto &[op, k] : c.kernelOf)
          if (k >= c.kernels.size())
            fuzz::finding("a kernel index beyond the kernel table");
      },
      [](const std::exception &e) { return dynamic_cast<const DataError *>(&e) != nullptr; });
  return 0;
}
