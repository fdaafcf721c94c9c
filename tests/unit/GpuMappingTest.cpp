// How kernels map onto a GPU grid (gpu::mappingOf, gridOf, loopNest): GEMMs by
// blocks with column tiles on y, reductions by warps, everything else by threads over the
// whole perfectly nested loop range; concat's loops each over the grid.
#include "tests/unit/LoweredKernels.h"
#include "backend/gpu/GpuMapping.h"

#include <catch2/catch.hpp>

using namespace dnnc;

namespace {

const char *kModel = R"(dim B; dim T;
param w: f32[8, 100];
model main(x: f32[B, T, 8], y: f32[B, T, 100]) -> f32[B, T, 200] {
  let p = x @ w;                                  # a GEMM: blocks
  let s = softmax(y, axis = -1);                  # a reduction: warps
  return concat([p * 2.0, s], axis = -1);         # elementwise and concat: threads
}
)";

TEST_CASE("kernels map onto the GPU grid by what they compute", "[gpu]") {
  auto program = test::lowerUnfused(kModel, "cuda");
  const lower::LoweredGraph &lowered = program->kernels;

  const kir::Kernel &gemm = test::kernelOf(lowered, "_matmul");
  CHECK(gpu::mappingOf(gemm) == gpu::Mapping::Blocks);
  gpu::Grid grid = gpu::gridOf(gemm);
  CHECK(grid.x->str() == "((T + 63)/64)*B"); // one block per 64-row task
  CHECK(grid.y->str() == "2");                // 100 columns: two tiles of 64
  CHECK(grid.threads == gpu::kBlockThreads);

  const kir::Kernel &softmax = test::kernelOf(lowered, "_softmax");
  CHECK(gpu::mappingOf(softmax) == gpu::Mapping::Warps);
  // B and T both spread over warps (8 per block), the row's loops left to the lanes.
  CHECK(gpu::loopNest(*softmax.parallelLoop(), gpu::Mapping::Warps).size() == 2);
  CHECK(gpu::gridOf(softmax).x->str() == "(B*T + 7)/8");

  const kir::Kernel &scale = test::kernelOf(lowered, "_mul");
  CHECK(gpu::mappingOf(scale) == gpu::Mapping::Threads);
  CHECK(gpu::loopNest(*scale.parallelLoop(), gpu::Mapping::Threads).size() == 3); // the whole nest
  CHECK(gpu::gridOf(scale).x->str() == "(100*B*T + 255)/256");                      // 100*B*T threads

  const kir::Kernel &concat = test::kernelOf(lowered, "_concat");
  CHECK(concat.independentLoops);
  CHECK(concat.parallelLoop() == nullptr);
  CHECK(gpu::gridLoops(concat).size() == 2);
  CHECK(gpu::gridOf(concat).threads == gpu::kBlockThreads);
}

const char *kAttention = R"(dim B; dim H; dim T;
model main(q: f32[B, H, T, 8], k: f32[B, H, T, 8], v: f32[B, H, T, 24]) -> f32[B, H, T, 24] {
  return softmax(q @ transpose(k) * 0.5, axis = -1) @ v;
}
)";

TEST_CASE("attention maps a block of query rows onto a thread block", "[gpu]") {
  auto program = test::lowerUnfused(kAttention, "cuda");
  const kir::Kernel &att = test::kernelOf(program->kernels, "_attention");
  CHECK(gpu::mappingOf(att) == gpu::Mapping::Blocks);
  gpu::Grid grid = gpu::gridOf(att);
  CHECK(grid.x->str() == "((T + 15)/16)*B*H"); // a block per 16 query rows of each (batch, head)
  CHECK(grid.y->str() == "1");                  // the block's warps take every key
  CHECK(grid.threads == gpu::kBlockThreads);
  CHECK(gpu::describeLaunch(att).find("a warp per query row") != std::string::npos);
}

} // namespace
