// The GPU target's mapping policy: how a kernel's work spreads over a CUDA grid (shared
// by the NVPTX and simulated-GPU emitters, the launch sizes the runtime gets, and
// `--emit=kernels` for cuda). The kernel IR itself knows nothing of grids.
#pragma once

#include "ir/kernel/Kernel.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dnnc::gpu {

// How a kernel's work maps onto a GPU grid:
//  Threads: one parallel iteration per thread, grid-stride; without a parallel loop thread
//           0 runs the body.
//  Warps:   one parallel iteration per warp (kernels with a Reduce loop): the lanes split
//           Reduce and Vectorize loops and combine partials with warp shuffles.
//  Blocks:  one parallel iteration per thread block, whose threads compute each Gemm of
//           the body cooperatively in shared-memory tiles; the grid's y dimension splits
//           the Gemm's columns into tiles of kGemmTile. An Attention body maps the same
//           way (its block of query rows a warp each, the keys in kAttentionKeyTile
//           tiles staged through shared memory), with a y dimension of 1.
enum class Mapping { Threads, Warps, Blocks };
Mapping mappingOf(const kir::Kernel &k);
// The loops a GPU spreads over its whole grid, one after another: the parallel loop, or
// each loop of an independentLoops body; none for Blocks or a kernel without them.
std::vector<const kir::Stmt *> gridLoops(const kir::Kernel &k);
// Threads and Warps: `root` (a grid loop) and the loops perfectly nested in it whose
// iterations a GPU spreads over its threads (or warps) as one flat range, outermost
// first: every independent iteration gets a thread, not only the outermost loop's. A
// warp's nest stops before the loops its lanes split.
std::vector<const kir::Stmt *> loopNest(const kir::Stmt &root, Mapping mapping);

constexpr int64_t kGemmTile = 64;  // rows and columns of a block's output tile
constexpr int64_t kGemmDepth = 16; // depth of one shared-memory stage
constexpr int64_t kBlockThreads = 256;
constexpr int64_t kWarpLanes = 32;
// Keys per attention tile (one per lane), and head-dim elements staged per stage of it.
constexpr int64_t kAttentionKeyTile = kWarpLanes;
constexpr int64_t kAttentionDepth = 32;

struct Grid {
  sym::ExprRef x, y; // blocks wanted (the kernels loop over the grid, so fewer are correct)
  int64_t threads = kBlockThreads;
};
Grid gridOf(const kir::Kernel &k);
// One line saying how `k` maps onto a GPU ("gpu: warps, grid [..., 1] x 256 threads").
std::string describeLaunch(const kir::Kernel &k);

} // namespace dnnc::gpu
