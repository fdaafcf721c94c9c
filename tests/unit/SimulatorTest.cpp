// The GPU simulator's execution model, with hand-written kernels calling its hooks: shuffles
// exchange between lanes, barriers order shared-memory traffic, divergent synchronization
// is an error, and grids are capped but every block and thread runs.
#include "base/Error.h"
#include "runtime/GpuSimulator.h"

#include <catch2/catch.hpp>

extern "C" {
int32_t dnnc_sim_sreg(int32_t which);
void dnnc_sim_barrier();
int32_t dnnc_sim_shfl_bfly(int32_t value, int32_t laneMask);
}

namespace dnnc::rt {
namespace {

// Runs `fn` as kernel 0 with one i32 output of `n` elements; returns it.
std::vector<int32_t> launchOne(KernelFn fn, int64_t threads, int64_t gridX, int64_t n) {
  SimulatedGpuDevice device({fn}, nullptr);
  KernelInfo info;
  info.name = "test_kernel";
  info.blockThreads = threads;
  Launch launch;
  launch.gridX = gridX;
  std::vector<Tensor> out;
  out.push_back(Tensor::zeros(DType::I32, {n}));
  device.beginRun({}, {});
  device.launch(0, info, {}, out, launch);
  device.hostReads({&out[0]}, false); // results live in the simulated GPU's memory until then
  const auto *p = reinterpret_cast<const int32_t *>(out[0].data());
  return {p, p + n};
}

int32_t *output(uint8_t *const *buffers) { return reinterpret_cast<int32_t *>(buffers[0]); }

void swapNeighbours(uint8_t *const *buffers, const int64_t *, int64_t, int64_t) {
  int32_t tid = dnnc_sim_sreg(kSimTidX);
  output(buffers)[tid] = dnnc_sim_shfl_bfly(tid * 10, 1);
}

int32_t shared[64];
void rotateThroughShared(uint8_t *const *buffers, const int64_t *, int64_t, int64_t) {
  int32_t tid = dnnc_sim_sreg(kSimTidX), n = dnnc_sim_sreg(kSimNtidX);
  shared[tid] = tid;
  dnnc_sim_barrier();
  int32_t next = shared[(tid + 1) % n];
  dnnc_sim_barrier(); // everyone has read before anyone writes again
  shared[tid] = -1;
  output(buffers)[tid] = next;
}

void threadZeroSkipsBarrier(uint8_t *const *, const int64_t *, int64_t, int64_t) {
  if (dnnc_sim_sreg(kSimTidX) != 0)
    dnnc_sim_barrier();
}

void halfWarpShuffles(uint8_t *const *, const int64_t *, int64_t, int64_t) {
  if (dnnc_sim_sreg(kSimTidX) < 16)
    dnnc_sim_shfl_bfly(1, 1);
  else
    dnnc_sim_barrier();
}

int blocksRun = 0;
void countBlocks(uint8_t *const *buffers, const int64_t *, int64_t, int64_t) {
  if (dnnc_sim_sreg(kSimTidX) != 0)
    return;
  ++blocksRun;
  output(buffers)[dnnc_sim_sreg(kSimCtaidX)] = dnnc_sim_sreg(kSimNctaidX);
}

TEST_CASE("simulated shuffles exchange values between lanes", "[sim]") {
  std::vector<int32_t> got = launchOne(swapNeighbours, 64, 1, 64);
  for (int32_t t = 0; t < 64; ++t)
    CHECK(got[t] == (t ^ 1) * 10);
}

TEST_CASE("simulated barriers order shared-memory writes and reads", "[sim]") {
  std::vector<int32_t> got = launchOne(rotateThroughShared, 64, 1, 64);
  for (int32_t t = 0; t < 64; ++t)
    CHECK(got[t] == (t + 1) % 64);
}

TEST_CASE("divergent synchronization is an error, not a hang", "[sim]") {
  CHECK_THROWS_WITH(launchOne(threadZeroSkipsBarrier, 64, 1, 1),
                    Catch::Contains("test_kernel: divergent synchronization in block (0, 0)") &&
                        Catch::Contains("thread 0 exited, thread 1 at a barrier"));
  CHECK_THROWS_WITH(launchOne(halfWarpShuffles, 32, 1, 1), Catch::Contains("divergent synchronization"));
}

TEST_CASE("simulated grids are capped, and the kernels see the capped grid", "[sim]") {
  std::vector<int32_t> got = launchOne(countBlocks, 32, 100, 4);
  CHECK(blocksRun == 4);
  CHECK(got == std::vector<int32_t>{4, 4, 4, 4});
}

} // namespace
} // namespace dnnc::rt
