// The simulated GPU (see GpuSimulator.h): one block at a time, its threads as ucontext
// coroutines scheduled round-robin between synchronization points.
#include "runtime/GpuSimulator.h"

#include "base/Error.h"

#include <fmt/format.h>

#include <ucontext.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace dnnc::rt {
namespace {

constexpr int64_t kMaxBlocksPerDim = 4;       // grid cap (see the header)
constexpr size_t kStackBytes = 128 * 1024;     // per simulated thread; pages are touched lazily
constexpr int kWarp = 32;

struct SimThread {
  enum class State { Runnable, AtBarrier, AtShuffle, Done };
  ucontext_t context;
  State state = State::Runnable;
  int32_t shuffleValue = 0, shuffleMask = 0, shuffleResult = 0;
};

struct Block {
  KernelFn fn = nullptr;
  uint8_t *const *buffers = nullptr;
  const int64_t *dims = nullptr;
  int32_t registers[6] = {}; // SimRegister values, tid.x aside
  std::vector<SimThread> threads;
  size_t current = 0;
  ucontext_t scheduler;
};

// The block being simulated on this OS thread.
thread_local Block *active = nullptr;

[[noreturn]] void misuse(const char *what) {
  std::fprintf(stderr, "dnnc: internal error: %s outside a simulated GPU launch\n", what);
  std::abort();
}

void threadMain() {
  Block &b = *active;
  b.fn(b.buffers, b.dims, 0, 0);
  b.threads[b.current].state = SimThread::State::Done; // returns to the scheduler (uc_link)
}

// Suspends the calling simulated thread until the scheduler resumes it.
void wait(SimThread::State why) {
  Block &b = *active;
  SimThread &t = b.threads[b.current];
  t.state = why;
  swapcontext(&t.context, &b.scheduler);
}

const char *stateName(SimThread::State s) {
  switch (s) {
  case SimThread::State::Runnable: return "running";
  case SimThread::State::AtBarrier: return "at a barrier";
  case SimThread::State::AtShuffle: return "at a shuffle";
  case SimThread::State::Done: return "exited";
  }
  return "?";
}

// Releases the lanes of every warp that all wait at a shuffle; true if any were released.
bool releaseShuffles(Block &b, const std::string &kernel) {
  bool released = false;
  for (size_t w = 0; w < b.threads.size(); w += kWarp) {
    SimThread *lanes = &b.threads[w];
    size_t width = std::min<size_t>(kWarp, b.threads.size() - w);
    bool any = false, all = true;
    for (size_t l = 0; l < width; ++l) {
      any |= lanes[l].state == SimThread::State::AtShuffle;
      all &= lanes[l].state == SimThread::State::AtShuffle;
    }
    if (!any || !all)
      continue;
    if (width != kWarp)
      throw InternalError(fmt::format("{}: a full-warp shuffle in a warp of {} threads", kernel, width));
    for (size_t l = 0; l < kWarp; ++l) {
      if (lanes[l].shuffleMask != lanes[0].shuffleMask)
        throw InternalError(fmt::format("{}: lanes of warp {} shuffle with different lane masks", kernel, w / kWarp));
      lanes[l].shuffleResult = lanes[(l ^ static_cast<size_t>(lanes[l].shuffleMask)) % kWarp].shuffleValue;
    }
    for (size_t l = 0; l < kWarp; ++l)
      lanes[l].state = SimThread::State::Runnable;
    released = true;
  }
  return released;
}

void runBlock(Block &b, char *stacks, const std::string &kernel) {
  for (size_t t = 0; t < b.threads.size(); ++t) {
    SimThread &th = b.threads[t];
    th.state = SimThread::State::Runnable;
    getcontext(&th.context);
    th.context.uc_stack.ss_sp = stacks + t * kStackBytes;
    th.context.uc_stack.ss_size = kStackBytes;
    th.context.uc_link = &b.scheduler;
    makecontext(&th.context, threadMain, 0);
  }
  for (;;) {
    for (size_t t = 0; t < b.threads.size(); ++t)
      if (b.threads[t].state == SimThread::State::Runnable) {
        b.current = t;
        swapcontext(&b.scheduler, &b.threads[t].context);
      }
    auto count = [&](SimThread::State s) {
      return std::count_if(b.threads.begin(), b.threads.end(), [&](const SimThread &t) { return t.state == s; });
    };
    if (count(SimThread::State::Done) == static_cast<long>(b.threads.size()))
      return;
    if (releaseShuffles(b, kernel))
      continue;
    if (count(SimThread::State::AtBarrier) == static_cast<long>(b.threads.size())) {
      for (SimThread &t : b.threads)
        t.state = SimThread::State::Runnable;
      continue;
    }
    // Nothing can proceed: some threads wait for others that never come.
    std::string states;
    for (size_t t = 0; t < b.threads.size(); ++t)
      if (t == 0 || b.threads[t].state != b.threads[t - 1].state)
        states += fmt::format("{}thread {} {}", states.empty() ? "" : ", ", t, stateName(b.threads[t].state));
    throw InternalError(fmt::format("{}: divergent synchronization in block ({}, {}) ({})", kernel, b.registers[kSimCtaidX],
                                    b.registers[kSimCtaidY], states));
  }
}

// The simulated GPU's memory: heap blocks, apart from the host's tensors.
struct HeapMemory : DeviceMirror::Memory {
  uint64_t allocate(size_t bytes) override { return reinterpret_cast<uint64_t>(::operator new(bytes)); }
  void release(uint64_t address) override { ::operator delete(reinterpret_cast<void *>(address)); }
  void upload(uint64_t to, const void *from, size_t bytes) override { std::memcpy(reinterpret_cast<void *>(to), from, bytes); }
  void download(void *to, uint64_t from, size_t bytes) override { std::memcpy(to, reinterpret_cast<const void *>(from), bytes); }
};

} // namespace

SimulatedGpuDevice::SimulatedGpuDevice(std::vector<KernelFn> fns, std::shared_ptr<void> owner)
    : fns_(std::move(fns)), owner_(std::move(owner)), memory_(std::make_unique<HeapMemory>()),
      mirror_(std::make_unique<DeviceMirror>(*memory_)) {}

SimulatedGpuDevice::~SimulatedGpuDevice() = default;

void SimulatedGpuDevice::launch(size_t kernel, const KernelInfo &info, const std::vector<const Tensor *> &in,
                                std::vector<Tensor> &out, const Launch &launch) {
  std::vector<uint8_t *> buffers;
  for (const Tensor *t : in)
    buffers.push_back(reinterpret_cast<uint8_t *>(mirror_->input(*t)));
  for (Tensor &t : out)
    buffers.push_back(reinterpret_cast<uint8_t *>(mirror_->output(t)));
  Block b;
  b.fn = fns_.at(kernel);
  b.buffers = buffers.data();
  b.dims = launch.dims.data();
  b.threads.resize(static_cast<size_t>(info.blockThreads));
  int64_t gridX = std::clamp<int64_t>(launch.gridX, 1, kMaxBlocksPerDim), gridY = std::clamp<int64_t>(launch.gridY, 1, kMaxBlocksPerDim);
  b.registers[kSimNtidX] = static_cast<int32_t>(info.blockThreads);
  b.registers[kSimNctaidX] = static_cast<int32_t>(gridX);
  b.registers[kSimNctaidY] = static_cast<int32_t>(gridY);
  std::unique_ptr<char[]> stacks(new char[b.threads.size() * kStackBytes]);
  Block *outer = std::exchange(active, &b);
  struct Restore {
    Block *&slot, *value;
    ~Restore() { slot = value; }
  } restore{active, outer};
  for (int64_t y = 0; y < gridY; ++y)
    for (int64_t x = 0; x < gridX; ++x) {
      b.registers[kSimCtaidX] = static_cast<int32_t>(x);
      b.registers[kSimCtaidY] = static_cast<int32_t>(y);
      runBlock(b, stacks.get(), info.name);
    }
  mirror_->launchDone();
}

} // namespace dnnc::rt

extern "C" {
int32_t dnnc_sim_sreg(int32_t which) {
  using namespace dnnc::rt;
  if (!active)
    misuse("dnnc_sim_sreg");
  return which == kSimTidX ? static_cast<int32_t>(active->current) : active->registers[which];
}
void dnnc_sim_barrier() {
  using namespace dnnc::rt;
  if (!active)
    misuse("dnnc_sim_barrier");
  wait(SimThread::State::AtBarrier);
}
int32_t dnnc_sim_shfl_bfly(int32_t value, int32_t laneMask) {
  using namespace dnnc::rt;
  if (!active)
    misuse("dnnc_sim_shfl_bfly");
  SimThread &t = active->threads[active->current];
  t.shuffleValue = value, t.shuffleMask = laneMask;
  wait(SimThread::State::AtShuffle);
  return active->threads[active->current].shuffleResult;
}
}

namespace dnnc::rt {
std::vector<std::pair<std::string, void *>> simulatorHooks() {
  return {{"dnnc_sim_sreg", reinterpret_cast<void *>(&dnnc_sim_sreg)},
          {"dnnc_sim_barrier", reinterpret_cast<void *>(&dnnc_sim_barrier)},
          {"dnnc_sim_shfl_bfly", reinterpret_cast<void *>(&dnnc_sim_shfl_bfly)}};
}
} // namespace dnnc::rt
