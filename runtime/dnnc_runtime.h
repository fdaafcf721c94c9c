/* The dnnc runtime's C API: load an artifact built by `dnnc build` and run it, with no
 * compiler present. Link with the dnnc_rt library.
 *
 * Errors: functions that can fail return NULL or -1, and dnnc_last_error() then says why
 * (per thread, valid until the next call on that thread). Nothing here aborts on bad input:
 * wrong shapes, dims out of range, violated asserts, corrupt files and a NULL model (what
 * a failed dnnc_load returns) are errors.
 *
 * Threads: models loaded separately may run at once on different threads (they share the
 * process's CPU thread pool, which runs one kernel's parallel loop at a time and another
 * caller's on its own thread). Calls on one model from several threads take turns.
 */
#ifndef DNNC_RUNTIME_H
#define DNNC_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dnnc_model dnnc_model;

typedef enum { DNNC_F32, DNNC_F16, DNNC_BF16, DNNC_I32, DNNC_I64, DNNC_BOOL } dnnc_dtype;

#define DNNC_MAX_RANK 8

/* A dense row-major tensor. Inputs point at the caller's memory; outputs at memory the
 * runtime owns until dnnc_free_outputs. */
typedef struct {
  dnnc_dtype dtype;
  int32_t rank;
  int64_t shape[DNNC_MAX_RANK];
  void *data;
} dnnc_tensor;

const char *dnnc_last_error(void);

dnnc_model *dnnc_load(const char *artifact_path);
void dnnc_unload(dnnc_model *model);

/* The model's inputs, in order: name, dtype and rank (dims may be symbolic). */
size_t dnnc_num_inputs(const dnnc_model *model);
const char *dnnc_input_name(const dnnc_model *model, size_t i);
dnnc_dtype dnnc_input_dtype(const dnnc_model *model, size_t i);
int32_t dnnc_input_rank(const dnnc_model *model, size_t i);
/* The model's outputs, in order: their names (`emb` for `-> (emb: f32[B, D], ...)`, else
 * out0, out1, ...). */
size_t dnnc_num_outputs(const dnnc_model *model);
const char *dnnc_output_name(const dnnc_model *model, size_t i);
/* The device the model runs on, e.g. "cpu, 8 threads". */
const char *dnnc_device_name(const dnnc_model *model);

/* Where the params come from: a .safetensors file or a Hugging Face *.safetensors.index.json
 * (read as `dnnc run --weights` reads it: each param by its name or `from` name, float
 * tensors converted, checked against the params' dtypes and shapes at each run; every
 * missing param is named in the error), more files added as shards, or each param's
 * initializer with `seed` (the default, seed 0). */
int dnnc_set_weights_file(dnnc_model *model, const char *safetensors_path);
int dnnc_add_weights_file(dnnc_model *model, const char *safetensors_path);
int dnnc_set_weights_seed(dnnc_model *model, uint64_t seed);

/* What the weight loader had to say at the model's last successful dnnc_run (what `dnnc
 * run` prints as `dnnc: note:` lines): each param filled from its initializer (every one
 * when no weights file is set) and the tensors of the files that no param uses (a count
 * and the first names). One note per line, each ending in a newline; "" when there were
 * none or before the first run. Owned by the model, valid until its next dnnc_run. */
const char *dnnc_last_notes(const dnnc_model *model);

/* Runs the model on `inputs` (one per model input, in order); dims are bound from their
 * shapes. On success *outputs holds *num_outputs tensors; free them with
 * dnnc_free_outputs. */
int dnnc_run(dnnc_model *model, const dnnc_tensor *inputs, size_t num_inputs, dnnc_tensor **outputs,
             size_t *num_outputs);
void dnnc_free_outputs(dnnc_tensor *outputs, size_t num_outputs);

#ifdef __cplusplus
}
#endif

#endif /* DNNC_RUNTIME_H */
