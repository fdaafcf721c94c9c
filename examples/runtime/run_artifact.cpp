// An application that runs a model built with `dnnc build`, through the runtime's C API
// alone: no compiler, no LLVM. It fills each input with a fixed pattern (floats
// sin(0.1 * i), integers i % 7, bools i % 2), runs, and prints each output's shape, sum
// and first values.
//
//   usage: run_artifact MODEL.dnnc [--weights W.safetensors]... NAME=D0xD1x... (one per input)
//   e.g.   run_artifact mlp.dnnc x=2x16
#include "runtime/dnnc_runtime.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

size_t elementBytes(dnnc_dtype t) {
  switch (t) {
  case DNNC_F32: case DNNC_I32: return 4;
  case DNNC_F16: case DNNC_BF16: return 2;
  case DNNC_I64: return 8;
  case DNNC_BOOL: return 1;
  }
  return 4;
}

// The pattern's element i in dtype t, and an element read back as a double.
void put(void *data, dnnc_dtype t, size_t i) {
  float f = std::sin(0.1f * static_cast<float>(i));
  switch (t) {
  case DNNC_F32: static_cast<float *>(data)[i] = f; break;
  case DNNC_I32: static_cast<int32_t *>(data)[i] = static_cast<int32_t>(i % 7); break;
  case DNNC_I64: static_cast<int64_t *>(data)[i] = static_cast<int64_t>(i % 7); break;
  case DNNC_BOOL: static_cast<uint8_t *>(data)[i] = i % 2; break;
  default: std::memset(static_cast<uint8_t *>(data) + 2 * i, 0, 2); break; // f16/bf16: zeros
  }
}
double get(const void *data, dnnc_dtype t, size_t i) {
  switch (t) {
  case DNNC_F32: return static_cast<const float *>(data)[i];
  case DNNC_I32: return static_cast<const int32_t *>(data)[i];
  case DNNC_I64: return static_cast<double>(static_cast<const int64_t *>(data)[i]);
  case DNNC_BOOL: return static_cast<const uint8_t *>(data)[i];
  default: return NAN; // f16/bf16: not decoded by this example
  }
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: run_artifact MODEL.dnnc [--weights W.safetensors] NAME=D0xD1x...\n");
    return 2;
  }
  dnnc_model *model = dnnc_load(argv[1]);
  if (!model) {
    std::fprintf(stderr, "run_artifact: %s\n", dnnc_last_error());
    return 1;
  }
  std::map<std::string, std::vector<int64_t>> shapes;
  for (int a = 2; a < argc; ++a) {
    if (!std::strcmp(argv[a], "--weights") && a + 1 < argc) {
      dnnc_add_weights_file(model, argv[++a]); // repeated: the shards of one checkpoint
      continue;
    }
    std::string arg = argv[a];
    size_t eq = arg.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "run_artifact: expected NAME=D0xD1..., not '%s'\n", argv[a]);
      dnnc_unload(model);
      return 2;
    }
    std::vector<int64_t> &shape = shapes[arg.substr(0, eq)];
    for (size_t p = eq + 1; p <= arg.size();) {
      size_t x = std::min(arg.find('x', p), arg.size());
      std::string dim = arg.substr(p, x - p);
      char *end = nullptr;
      errno = 0;
      long long d = std::strtoll(dim.c_str(), &end, 10);
      if (dim.empty() || *end || errno || d < 0 || d > (int64_t{1} << 40)) {
        std::fprintf(stderr, "run_artifact: '%s' is not a dim (a count from 0 to 2^40) in '%s'\n", dim.c_str(), argv[a]);
        dnnc_unload(model);
        return 2;
      }
      shape.push_back(d);
      p = x + 1;
    }
  }
  size_t n = dnnc_num_inputs(model);
  std::vector<dnnc_tensor> inputs(n);
  std::vector<std::vector<uint8_t>> storage(n);
  for (size_t k = 0; k < n; ++k) {
    const char *name = dnnc_input_name(model, k);
    auto it = shapes.find(name);
    if (it == shapes.end() || static_cast<int32_t>(it->second.size()) != dnnc_input_rank(model, k)) {
      std::fprintf(stderr, "run_artifact: give input '%s' a shape of rank %d, e.g. %s=2x3\n", name, dnnc_input_rank(model, k), name);
      dnnc_unload(model);
      return 2;
    }
    dnnc_tensor &t = inputs[k];
    t.dtype = dnnc_input_dtype(model, k);
    t.rank = static_cast<int32_t>(it->second.size());
    size_t count = 1;
    for (int32_t d = 0; d < t.rank; ++d)
      if (__builtin_mul_overflow(count, static_cast<size_t>(t.shape[d] = it->second[static_cast<size_t>(d)]), &count) ||
          count > (size_t{1} << 40) / elementBytes(t.dtype)) {
        std::fprintf(stderr, "run_artifact: input '%s' is too large\n", name);
        dnnc_unload(model);
        return 2;
      }
    storage[k].resize(count * elementBytes(t.dtype));
    t.data = storage[k].data();
    for (size_t i = 0; i < count; ++i)
      put(t.data, t.dtype, i);
  }
  dnnc_tensor *outputs = nullptr;
  size_t numOutputs = 0;
  if (dnnc_run(model, inputs.data(), n, &outputs, &numOutputs) != 0) {
    std::fprintf(stderr, "run_artifact: %s\n", dnnc_last_error());
    dnnc_unload(model);
    return 1;
  }
  // The loader's notes (params from initializers, unused tensors), as dnnc run prints them.
  for (const char *note = dnnc_last_notes(model); *note;) {
    const char *end = std::strchr(note, '\n');
    std::fprintf(stderr, "run_artifact: note: %.*s\n", static_cast<int>(end - note), note);
    note = end + 1;
  }
  std::printf("device: %s\n", dnnc_device_name(model));
  for (size_t k = 0; k < numOutputs; ++k) {
    const dnnc_tensor &t = outputs[k];
    size_t count = 1;
    std::printf("%s: shape [", dnnc_output_name(model, k));
    for (int32_t d = 0; d < t.rank; ++d) {
      std::printf("%s%lld", d ? ", " : "", static_cast<long long>(t.shape[d]));
      count *= static_cast<size_t>(t.shape[d]);
    }
    double sum = 0;
    for (size_t i = 0; i < count; ++i)
      sum += get(t.data, t.dtype, i);
    std::printf("], sum %.6g, first:", sum);
    for (size_t i = 0; i < count && i < 4; ++i)
      std::printf(" %.6g", get(t.data, t.dtype, i));
    std::printf("\n");
  }
  dnnc_free_outputs(outputs, numOutputs);
  dnnc_unload(model);
  return 0;
}
