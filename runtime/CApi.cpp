// The C API (see dnnc_runtime.h) over rt::Executable and the artifact loader.
#include "runtime/dnnc_runtime.h"

#include "base/Error.h"
#include "runtime/Artifact.h"
#include "runtime/ModelIO.h"

#include <fmt/format.h>

#include <mutex>

#include <cstring>

using namespace dnnc;

struct dnnc_model {
  std::unique_ptr<rt::Executable> exe;
  std::string deviceName;
  std::vector<std::string> weightsFiles; // none: every param from its initializer
  std::vector<std::string> outputNames;
  uint64_t seed = 0;
  std::string notes; // the loader's notes at the last run, one per line (a library prints nothing)
  std::mutex running; // calls from several threads take turns (the executable holds one call's state)
};

namespace {

thread_local std::string lastError;

// Runs `body`, turning every exception into the thread's last error and `failed`.
template <class R, class F> R guarded(R failed, F body) {
  try {
    lastError.clear();
    return body();
  } catch (const DataError &e) {
    lastError = e.what();
  } catch (const InternalError &e) {
    lastError = std::string("internal error (a bug in dnnc): ") + e.what();
  } catch (const std::exception &e) {
    lastError = e.what();
  }
  return failed;
}

constexpr DType kDTypes[] = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::Bool};

dnnc_dtype toC(DType d) {
  for (size_t k = 0; k < std::size(kDTypes); ++k)
    if (kDTypes[k] == d)
      return static_cast<dnnc_dtype>(k);
  return DNNC_F32;
}

const ir::Value *input(const dnnc_model *m, size_t i) {
  if (!m) // (what a failed dnnc_load returned)
    throw DataError(fmt::format("input {} of a null model", i));
  const auto &args = m->exe->graph().body.args;
  if (i >= args.size())
    throw DataError(fmt::format("input {} does not exist (the model has {})", i, args.size()));
  return args[i];
}

} // namespace

extern "C" {

const char *dnnc_last_error(void) { return lastError.c_str(); }

dnnc_model *dnnc_load(const char *path) {
  return guarded<dnnc_model *>(nullptr, [&] {
    auto m = std::make_unique<dnnc_model>();
    m->exe = rt::loadArtifact(path ? path : "");
    m->deviceName = m->exe->device().name();
    for (size_t k = 0; k < m->exe->graph().body.yields.size(); ++k)
      m->outputNames.push_back(ir::outputName(m->exe->graph(), k));
    return m.release();
  });
}

void dnnc_unload(dnnc_model *model) { delete model; }

size_t dnnc_num_inputs(const dnnc_model *m) { return m ? m->exe->graph().body.args.size() : 0; }
const char *dnnc_input_name(const dnnc_model *m, size_t i) {
  return guarded<const char *>(nullptr, [&] { return input(m, i)->name.c_str(); });
}
dnnc_dtype dnnc_input_dtype(const dnnc_model *m, size_t i) {
  return guarded<dnnc_dtype>(DNNC_F32, [&] { return toC(input(m, i)->type.dtype); });
}
int32_t dnnc_input_rank(const dnnc_model *m, size_t i) {
  return guarded<int32_t>(-1, [&] { return static_cast<int32_t>(input(m, i)->type.rank()); });
}
size_t dnnc_num_outputs(const dnnc_model *m) { return m ? m->outputNames.size() : 0; }
const char *dnnc_output_name(const dnnc_model *m, size_t i) {
  return guarded<const char *>(nullptr, [&] {
    if (!m || i >= m->outputNames.size())
      throw DataError(fmt::format("output {} does not exist (the model has {})", i, m ? m->outputNames.size() : 0));
    return m->outputNames[i].c_str();
  });
}
const char *dnnc_device_name(const dnnc_model *m) { return m ? m->deviceName.c_str() : ""; }
const char *dnnc_last_notes(const dnnc_model *m) { return m ? m->notes.c_str() : ""; }

int dnnc_set_weights_file(dnnc_model *m, const char *path) {
  if (!m || !path) {
    lastError = "dnnc_set_weights_file: null argument";
    return -1;
  }
  m->weightsFiles = {path};
  return 0;
}

int dnnc_add_weights_file(dnnc_model *m, const char *path) {
  if (!m || !path) {
    lastError = "dnnc_add_weights_file: null argument";
    return -1;
  }
  m->weightsFiles.push_back(path);
  return 0;
}

int dnnc_set_weights_seed(dnnc_model *m, uint64_t seed) {
  if (!m) {
    lastError = "dnnc_set_weights_seed: null model";
    return -1;
  }
  m->weightsFiles.clear();
  m->seed = seed;
  return 0;
}

int dnnc_run(dnnc_model *m, const dnnc_tensor *inputs, size_t numInputs, dnnc_tensor **outputs, size_t *numOutputs) {
  return guarded<int>(-1, [&] {
    if (!m || !outputs || !numOutputs || (numInputs && !inputs))
      throw DataError("dnnc_run: null argument");
    std::lock_guard<std::mutex> turn(m->running);
    const ir::Graph &g = m->exe->graph();
    if (numInputs != g.body.args.size())
      throw DataError(fmt::format("model '{}' takes {} inputs, not {}", g.name, g.body.args.size(), numInputs));
    std::vector<rt::Tensor> in;
    for (size_t k = 0; k < numInputs; ++k) {
      const dnnc_tensor &t = inputs[k];
      if (t.rank < 0 || t.rank > DNNC_MAX_RANK || static_cast<unsigned>(t.dtype) >= std::size(kDTypes))
        throw DataError(fmt::format("input {} has an invalid rank or dtype", k));
      std::vector<int64_t> shape(t.shape, t.shape + t.rank);
      for (int64_t d : shape)
        if (d < 0)
          throw DataError(fmt::format("input {} has a negative dim", k));
      rt::Tensor x = rt::Tensor::zeros(kDTypes[t.dtype], shape);
      if (x.byteSize()) {
        if (!t.data)
          throw DataError(fmt::format("input {} has no data", k));
        std::memcpy(x.data(), t.data, x.byteSize());
      }
      in.push_back(std::move(x));
    }
    std::vector<const rt::Tensor *> given;
    for (const rt::Tensor &t : in)
      given.push_back(&t);
    rt::Binding b = ir::bindInputs(m->exe->graph(), given, {});
    // The loader of dnnc run: with files, a missing param is an error. A library prints
    // nothing: its notes (params filled, unused tensors) wait for dnnc_last_notes.
    rt::Weights loaded = rt::loadWeights(g, {m->weightsFiles, m->weightsFiles.empty(), true, false, m->seed, ""}, b);
    std::string notes;
    for (const std::string &note : loaded.notes)
      notes += note + "\n";
    auto &params = loaded.params;
    m->exe->paramsChanged(); // loaded afresh: their memory may be a freed param's
    std::vector<rt::Tensor> out = m->exe->run(in, params);
    for (const rt::Tensor &t : out)
      if (t.shape.size() > DNNC_MAX_RANK)
        throw DataError(fmt::format("an output has rank {}, more than the C API's {}", t.shape.size(), DNNC_MAX_RANK));
    auto *result = new dnnc_tensor[out.size()]();
    for (size_t k = 0; k < out.size(); ++k) {
      result[k].dtype = toC(out[k].dtype);
      result[k].rank = static_cast<int32_t>(out[k].shape.size());
      std::copy(out[k].shape.begin(), out[k].shape.end(), result[k].shape);
      result[k].data = new uint8_t[std::max<size_t>(out[k].byteSize(), 1)];
      if (out[k].byteSize())
        std::memcpy(result[k].data, out[k].data(), out[k].byteSize());
    }
    *outputs = result;
    *numOutputs = out.size();
    m->notes = std::move(notes);
    return 0;
  });
}

void dnnc_free_outputs(dnnc_tensor *outputs, size_t n) {
  if (!outputs)
    return;
  for (size_t k = 0; k < n; ++k)
    delete[] static_cast<uint8_t *>(outputs[k].data);
  delete[] outputs;
}

} // extern "C"
