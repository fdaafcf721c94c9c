// Lowering's schedule choices, kept apart from what each op computes (Lower.cpp): which
// loop of a nest runs in parallel and which the vectorizer is told to take, how a matmul
// splits into GEMM tasks, and the CPU's convolutions (implicit GEMM, direct). A target passes its ScheduleOptions.
//
// Contract: a schedule changes only the order and grouping of a kernel's iterations,
// never what it stores (the numerics tests compare every device with the oracle).
#pragma once

#include "ir/kernel/Kernel.h"

#include <functional>
#include <vector>

namespace dnnc::lower {

// The choices a target makes.
struct ScheduleOptions {
  // f32 conv2d by vectorizedConv2d, which suits a CPU's cores and vectors; off, each
  // output element accumulates its own window, a thread each on a GPU's grid (where
  // vectorizedConv2d's few long tasks would leave most threads idle).
  bool vectorizedConv2d = true;
  // Columns of C per GEMM task (0: all of them). The CPU splits N as well as M so that a
  // matmul with few rows (a batch of 1, a matrix-vector product) still has a task per
  // thread; the GPU tiles a task's columns across its block already.
  int64_t gemmColumnBlock = 0;
  // Params a matmul multiplies by are prepacked (ir/transforms/Prepack.h) into the CPU
  // GEMM's panels (a narrow one transposed, for dot products); the GPU stages B through
  // shared memory and keeps it as it is.
  bool packedWeights = false;
  // The attention op (ir/transforms/FuseAttention.h) replaces the unfused ops: each back
  // end has a kernel for it (tiled over query rows, online softmax; the GPU's a thread
  // block per row block, key tiles in shared memory). Off, the unfused ops stay.
  bool fusedAttention = false;
  // f32 conv2d with enough output channels per group as an implicit GEMM (conv2dGemm);
  // the others keep the convolution above. The GPU keeps its per-element convolution.
  bool implicitGemmConv2d = false;
  // A GEMM task's rows and columns, and whether it packs A, are dims the runtime binds per
  // launch from the bound shape (runtime/GemmSelect.h: one of a few variants compiled into
  // the same kernel); gemmColumnBlock and kGemmRowBlock then give way to them. The GPU
  // keeps its one schedule.
  bool gemmVariants = false;
  // A reduction over leading axes (a sum over the batch) streams rows of its input over
  // chunks of the innermost kept axis, with vector loops (Lowering::columnReduction);
  // off, each output element reduces its own strided column (a GPU lane per element,
  // or a warp's lanes splitting the column).
  bool columnReductions = false;
  // concat, stack and split share the loops over the dims before their axis, with each
  // part's nest inside (a task copies a row of every part): one parallel range. Off, the
  // parts' nests run one after another, each a grid-stride loop over its elements on a
  // GPU (coalesced), but on the CPU none of them parallel (a kernel body of several nests).
  bool sharedConcatLoops = false;
  // Row blocks of kAttentionRowBlock query rows per attention task. The CPU's task runs
  // its blocks last first, so that a causal block's scan of the values hidden from it
  // covers only the keys the next block's scan did not (each task would otherwise read
  // the rest of v, 8% of the kernel at T = 512); a GPU's task is one block's threads.
  int64_t attentionRowBlocks = 1;
};
inline constexpr ScheduleOptions kCpuSchedule{true, 512, true, true, true, true, true, true, 4};
inline constexpr ScheduleOptions kGpuSchedule{false, 0, false, true, false, false, false, false, 1};

// Elements of the innermost kept axis per task of a column reduction. (256 made 3 tasks
// of a sum over [4096, 768] for 2 threads: one thread did two, the other one.)
constexpr int64_t kColumnChunk = 128;
// Lanes of a column reduction's local arrays: a task's chunk, or the row groups of a
// narrow one (at most half of them wide).
constexpr int64_t kColumnLanes = 256;

// Rows of A per GEMM task: an f32 matmul is one parallel task per (batch, row block,
// column block).
constexpr int64_t kGemmRowBlock = 64;
// Query rows per attention block, the lanes of the CPU's vectors across rows: a task of
// ScheduleOptions::attentionRowBlocks of them (a causal task's work grows with its rows'
// index, so tasks are kept small for the split to even out); on a GPU a task is a thread
// block, two rows per warp.
constexpr int64_t kAttentionRowBlock = 16;

// A body of one statement.
std::vector<kir::StmtPtr> one(kir::StmtPtr s);

// A loop nest over `shape` (loop variables `idx`) around `inner`: the innermost loop
// vectorized when its body is straight-line code, every other loop parallel (the runtime
// splits their collapsed range: the rows of a softmax over [B, T, D] are B*T units).
kir::StmtPtr loopNest(const std::vector<sym::ExprRef> &shape, const std::vector<sym::ExprRef> &idx,
                      std::vector<kir::StmtPtr> inner);

// An f32 conv2d (NCHW input buffer `input`, OIHW weights buffer `weights`, output buffer
// `out`; vectorizedConv2d takes the input as buffer 0 and the weights as buffer 1).
struct Conv2d {
  std::vector<sym::ExprRef> x, w, o; // dims
  int64_t stride, padding, dilation, groups;
  int out;
  int input = 0, weights = 1;
};
// Its CPU schedule (see Schedule.cpp); freshVar names a new loop variable.
kir::StmtPtr vectorizedConv2d(const Conv2d &conv, const std::function<sym::ExprRef()> &freshVar);

// Output positions per implicit-GEMM task (whole output rows: at least one).
constexpr int64_t kConvColumnBlock = 512;

// The convolution as an implicit GEMM (kir::Gemm::Im2col), per image and group:
//   out[n, g*Og + i, p] = sum_k w[g*Og + i, k] * im2col(x[n, g*Cg + .])(k, p)
// with M = Og output channels, N = OH*OW positions and K = Cg*KH*KW: the weights are
// A as they lie (row i of the OIHW tensor is row i of A), the output plane is C as it
// lies (NCHW), and B is gathered from the input windows while the GEMM packs its
// panels. One parallel task per (image, group, block of kGemmRowBlock channels, band of
// whole output rows, about kConvColumnBlock positions): whole rows, so that an epilogue
// indexes the output by (row, column) with no division. With `epilogue`, each task then
// rewrites its block of the output, still in cache, with epilogue(index) at each output
// index [n, o, oh, ow] (a fused group's elementwise ops, reading the sums there). Null
// where the out channels per group are not a constant of at least ir::kConvGemmMinChannels.
using ConvEpilogue = std::function<kir::ValuePtr(const std::vector<sym::ExprRef> &index)>;
kir::StmtPtr conv2dGemm(const Conv2d &conv, const std::function<sym::ExprRef()> &freshVar, const ConvEpilogue &epilogue = nullptr);

} // namespace dnnc::lower
