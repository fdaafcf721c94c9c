// Shape-generic selection of the CPU GEMM's variants (after DietCode): every CPU f32
// matmul kernel is compiled once with a few variants of its schedule (rows and columns per
// parallel task, A packed into micro-panels or read in place), all in the same code; the
// variant is a set of dims the runtime binds per launch (launchFor, once per launch plan)
// from the bound M, N, K, by a micro-kernel cost model fitted once per machine
// (`dnnc tune`, a small per-CPU JSON table) or, without a table, a built-in one. No
// recompile and no per-shape tuning: a new shape costs one evaluation of the model.
//
// Contract: a variant changes only how the product is split and staged, never a stored
// value (each is differential-tested against the reference interpreter, forced one by one
// with DNNC_GEMM_VARIANT); a malformed table is a DataError located in its file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dnnc::rt {

// One variant: rows x cols of C per parallel task, and whether A's rows are packed.
struct GemmVariant {
  const char *name;
  int64_t rows, cols;
  bool packA;
};
// The variants every CPU GEMM kernel carries (index 0 is the fixed schedule dnnc had before).
const std::vector<GemmVariant> &gemmVariants();
// The dims a variant binds (names no .dnn dim can take).
inline constexpr const char *kGemmRowsDim = "$gemm_rows", *kGemmColsDim = "$gemm_cols", *kGemmPackADim = "$gemm_pack_a";
// Binds variant v's dims in `binding`.
void bindGemmVariant(size_t v, std::map<std::string, int64_t> &binding);
// The most rows any variant's task has (the size of the emitter's packed copy of A).
inline constexpr int64_t kGemmMaxRows = 128;

// The cost model of one variant: one task of `rows x cols` columns over depth K, of which
// a fraction f of the rows x cols is inside C, takes on one thread
//   ns = perTask + K * (perK + perKFill * f)
// (perK: the packing a task does whatever its fill; perKFill: its multiply-adds).
struct GemmCost {
  double perTask = 0, perK = 0, perKFill = 0;
};
struct GemmTable {
  std::string cpu;             // the CPU it was fitted on
  std::vector<GemmCost> costs; // by variant index
  std::string source;          // "built-in" or the file it was read from
};
// The built-in model (fitted by `dnnc tune` on the machine dnnc was developed on).
GemmTable builtinGemmTable();
// Estimated ns of variant v for `batches` products of M x K by K x N on `threads` threads:
// the tasks run in waves of `threads`, each as long as a task of the average fill.
double gemmEstimate(const GemmTable &t, size_t v, int64_t batches, int64_t m, int64_t n, int64_t k, unsigned threads);
// The variant with the least estimate (ties: the lower index).
size_t selectGemmVariant(const GemmTable &t, int64_t batches, int64_t m, int64_t n, int64_t k, unsigned threads);

// The table as JSON text, and back: `name` names the text in errors, which are DataErrors
// "NAME:LINE:COL: ..." for malformed JSON and "NAME: variants[i].field: ..." for content.
std::string gemmTableToJson(const GemmTable &t);
GemmTable parseGemmTable(const std::string &text, const std::string &name);
// This CPU's model name (/proc/cpuinfo) as a file-name part, e.g. "intel-xeon-platinum-8481c".
std::string hostCpuSlug();
// Where `dnnc tune` writes and the runtime looks: $DNNC_TUNE_TABLE, else
// $XDG_CACHE_HOME/dnnc/tune-<cpu>.json, else ~/.cache/dnnc/tune-<cpu>.json.
std::string defaultGemmTablePath();

// The process's selection. The table: the one given to setGemmTableFile (dnnc
// --tune-table), else the file at defaultGemmTablePath() when there is one (read on first
// use), else the built-in one. Throws DataError for a malformed file.
void setGemmTableFile(const std::string &path);
const GemmTable &activeGemmTable();
// A forced variant for every launch (tests, the tuner): -1 for none. DNNC_GEMM_VARIANT=k
// forces k; an index past the variants is a DataError at the first launch.
void setForcedGemmVariant(int v);
// The variant a launch of `batches` M x N x K products uses on `threads` threads.
size_t gemmVariantFor(int64_t batches, int64_t m, int64_t n, int64_t k, unsigned threads);

} // namespace dnnc::rt
