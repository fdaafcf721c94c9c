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
// The variants every CPU GEMM kernel carries (index 0 is the fixed schedule, which a shape
// keeps unless another is predicted kGemmSwitchGain faster).
const std::vector<GemmVariant> &gemmVariants();
// The dims a variant binds (names no .dnn dim can take).
inline constexpr const char *kGemmRowsDim = "$gemm_rows", *kGemmColsDim = "$gemm_cols", *kGemmPackADim = "$gemm_pack_a";
// Binds variant v's dims in `binding`.
void bindGemmVariant(size_t v, std::map<std::string, int64_t> &binding);
// The most rows any variant's task has (the size of the emitter's packed copy of A).
inline constexpr int64_t kGemmMaxRows = 128;

// How a GEMM kernel reads B, which decides the costs that apply (GemmCost).
enum class GemmB : uint8_t {
  Rows,     // a [K, N] matrix in rows: packed by each task, read in place at few rows
  Gathered, // transposed, or an image's windows (implicit GEMM): packed by each task at any M
            // (also a B of dot products, kir::Gemm::dotProducts, which packs nothing: not modelled)
  Panels,   // a weight prepacked when the model loaded (ir/transforms/Prepack.h): nothing to pack
};
// The cost model of one variant: one task of `rows x cols` columns over depth K, of which
// a fraction f of the rows x cols is inside C and a fraction fc of the columns (in whole
// vectors), takes on one thread
//   ns = perTask + K * (perK + perKCols * fc + perKFill * f)
// (perK: what a task does per depth whatever its fill; perKCols: packing B's columns;
// perKFill: its multiply-adds). A
// product of at most kGemmStreamRows rows of a B in rows reads B in place instead (no
// packing, other micro-kernels): a task of m rows and a fraction fc of its columns takes
//   ns = streamPerTask + K * streamPerK * m * fc.
// A prepacked B (GemmB::Panels) has its own fit at every M, the first formula with
//   panelPerTask, panelPerK (no B to pack), panelPerKFill (packing A too, where the
//   variant does: it scales with the rows).
struct GemmCost {
  double perTask = 0, perK = 0, perKFill = 0, streamPerTask = 0, streamPerK = 0;
  double panelPerTask = 0, panelPerK = 0, panelPerKFill = 0;
  double perKCols = 0;
};
// The rows up to which the CPU's micro-kernels read a B in rows in place (CpuKernelEmitter.cpp).
inline constexpr int64_t kGemmStreamRows = 4;
struct GemmTable {
  std::string cpu;             // the CPU it was fitted on
  std::vector<GemmCost> costs; // by variant index
  // What a second thread adds, measured: 1 when n threads run n tasks in the time of one,
  // 0 when they take as long as one thread running them all (a machine other work
  // keeps busy, or a worker slow to wake).
  double parallelEfficiency = 1;
  // f32 lanes of the vectors its kernels use: a task's columns cost as whole vectors (the
  // micro-kernels mask the last one), so 10 columns cost what 16 do with 16 lanes.
  int64_t lanes = 16;
  std::string source;          // "built-in" or the file it was read from
};
// The built-in model (fitted by `dnnc tune` on the machine dnnc was developed on).
GemmTable builtinGemmTable();
// Estimated ns of variant v for `batches` products of M x K by K x N, B read as `b`, on
// `threads` threads:
// the tasks run in waves of as many threads as the thread pool would use for that much
// work (it keeps jobs under two ThreadPool::kMinChunkNs on one thread), each wave as long
// as a task of the average fill, stretched by the table's parallel efficiency, and never
// less than the largest task (min(M, rows) rows by min(N, cols) columns); columns count in
// whole vectors of the table's lanes.
double gemmEstimate(const GemmTable &t, size_t v, GemmB b, int64_t batches, int64_t m, int64_t n, int64_t k, unsigned threads);
// The variant with the least estimate, if it is at least kGemmSwitchGain times faster than
// variant 0 (the fixed schedule), else variant 0: the model is fitted from single-thread
// micro-kernels, and a smaller predicted gain is within its error (bench/gemm_select.cpp).
inline constexpr double kGemmSwitchGain = 1.15;
size_t selectGemmVariant(const GemmTable &t, GemmB b, int64_t batches, int64_t m, int64_t n, int64_t k, unsigned threads);

// The table as JSON text, and back: `name` names the text in errors, which are DataErrors
// "NAME:LINE:COL: ..." for malformed JSON and "NAME: variants[i].field: ..." for content.
std::string gemmTableToJson(const GemmTable &t);
GemmTable parseGemmTable(const std::string &text, const std::string &name);
// This CPU's model name (/proc/cpuinfo) as a file-name part, e.g. "intel-xeon-platinum-8481c".
std::string hostCpuSlug();
// Where dnnc keeps what it learns on this machine (the tune table, compiled kernels):
// $XDG_CACHE_HOME/dnnc, else ~/.cache/dnnc.
std::string dnncCacheFolder();
// Where `dnnc tune` writes and the runtime looks: $DNNC_TUNE_TABLE, else
// dnncCacheFolder()/tune-<cpu>.json.
std::string defaultGemmTablePath();

// The table at defaultGemmTablePath() when there is one, else the built-in one. Throws
// DataError for a malformed file named by DNNC_TUNE_TABLE; one found in the cache (which
// an older dnnc's `dnnc tune` may have written) gives the built-in table and `warning`.
GemmTable defaultGemmTable(std::string *warning);
// The process's selection. The table: the one given to setGemmTableFile (dnnc
// --tune-table), else defaultGemmTable (read on first use; its warning to stderr). Throws
// DataError for a malformed file the user named.
void setGemmTableFile(const std::string &path);
const GemmTable &activeGemmTable();
// A forced variant for every launch (tests, the tuner): -1 for none. DNNC_GEMM_VARIANT=k
// forces k; an index past the variants is a DataError at the first launch.
void setForcedGemmVariant(int v);
// The variant a launch of `batches` M x N x K products, B read as `b`, uses on `threads` threads.
size_t gemmVariantFor(GemmB b, int64_t batches, int64_t m, int64_t n, int64_t k, unsigned threads);

} // namespace dnnc::rt
