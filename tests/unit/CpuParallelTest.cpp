// How the CPU splits kernels across threads: the parallel nest collapses every independent
// dim (Kernel::parallelNest, lower::kernelInfo), and the pool cuts a job into chunks by its
// estimated cost (ThreadPool::parallelFor).
#include "tests/unit/LoweredKernels.h"
#include "runtime/ThreadPool.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

using namespace dnnc;

namespace {

const char *kRows = R"(dim B; dim T; dim D;
model main(x: f32[B, T, D]) -> (f32[B, T, D], f32[B, T], f32[B, T, D]) {
  return (softmax(x, axis = -1), sum(x, axis = -1), x * 2.0);
}
)";

TEST_CASE("CPU kernels split the rows of all their independent dims", "[cpu][parallel]") {
  auto program = test::lowerUnfused(kRows, "cpu");
  const lower::LoweredGraph &lowered = program->kernels;
  std::map<std::string, int64_t> b1{{"B", 1}, {"T", 5}, {"D", 5000}};

  // B = 1 still leaves T rows: the loops over B and T are one range.
  const kir::Kernel &softmax = test::kernelOf(lowered, "_softmax");
  CHECK(softmax.parallelNest().size() == 2);
  rt::KernelInfo info = lower::kernelInfo(softmax);
  CHECK(info.parallelExtent->str() == "B*T");
  // max (1 statement), sum (the exp kept in the output, its store, the add: 3) and store
  // loops over the row, and the lets of best, sum and the exp
  CHECK(sym::evaluate(info.work, b1) == 5 * 5000 + 3);

  // A row longer than a sum block (4096) is summed in blocks; the estimate still evaluates.
  rt::KernelInfo sum = lower::kernelInfo(test::kernelOf(lowered, "_sum"));
  CHECK(sum.parallelExtent->str() == "B*T");
  REQUIRE(sym::evaluate(sum.work, b1).has_value());
  CHECK(*sym::evaluate(sum.work, b1) >= 5000);

  // Elementwise: B x T collapsed, the row along D left whole for the vectorizer.
  const kir::Kernel &scale = test::kernelOf(lowered, "_mul");
  REQUIRE(scale.parallelNest().size() == 2);
  CHECK(scale.parallelNest().back()->body.at(0)->schedule == kir::Stmt::Schedule::Vectorize);
  CHECK(lower::kernelInfo(scale).work->str() == "D");
}

// A reduction over trailing axes loops over them as one (Lowering::flattenTrailing): a
// global average pool's vector loop loads each channel's H*W elements in a row, where the
// lanes of a loop over H once gathered a column each. A broadcast along one of the axes
// would need a remainder per element, so that reduction keeps its loops.
TEST_CASE("a reduction over trailing axes loops over them as one", "[cpu][parallel]") {
  auto program = test::lowerUnfused(R"(dim N; dim C; dim H; dim W;
model main(x: f32[N, C, H, W]) -> (f32[N, C], f32[N, C], f32[N, 1, 1, 1]) {
  return (mean(x, axis = [2, 3]), max(x, axis = [2, 3]), sum(x, axis = [1, 2, 3], keepdims = true));
}
)", "cpu");
  std::string mean = kir::print(test::kernelOf(program->kernels, "_mean"));
  CHECK(mean.find("reduce(sum.p0 by add)") != std::string::npos);
  CHECK(mean.find("b0[%0*C*H*W + %1*H*W + 4096*%3 + %4]") != std::string::npos);
  CHECK(mean.find("/W") == std::string::npos);
  std::string max = kir::print(test::kernelOf(program->kernels, "_max"));
  CHECK(max.find(" in 0..H*W reduce(") != std::string::npos);
  CHECK(max.find("% W") == std::string::npos);
  std::string all = kir::print(test::kernelOf(program->kernels, "_sum"));
  CHECK(all.find("min(4096, C*H*W - 4096*") != std::string::npos);
  CHECK(all.find("/W") == std::string::npos);

  // Fused with a broadcast along H: each element's index would take its position % W.
  Program fused;
  DiagnosticEngine diags(fused.sources());
  REQUIRE(fused.loadText("test.dnn", R"(dim N; dim C; dim H; dim W;
model main(x: f32[N, C, H, W], r: f32[N, C, 1, W]) -> f32[N, C] {
  return sum(x + r, axis = [2, 3]);
}
)", diags));
  auto kernels = backend::lowerFor(*fused.models().at(0).graph, *backend::findTarget("cpu"), {}).kernels;
  std::string broadcast = kir::print(test::kernelOf(kernels, "_fused"));
  CHECK(broadcast.find("(H + 4095)/4096") != std::string::npos);
  CHECK(broadcast.find("% W") == std::string::npos);
}

// The vectorizer is told a loop's iterations are independent (kir::independentIterations)
// only where each iteration writes its own elements and reads a written buffer only there:
// an elementwise kernel written in place over an operand (the LSTM's gates) is then
// widened without run-time overlap checks, which in place always fail.
TEST_CASE("loops whose iterations touch memory independently", "[cpu][parallel]") {
  auto program = test::lowerUnfused(kRows, "cpu");
  const kir::Stmt *row = test::kernelOf(program->kernels, "_mul").parallelNest().back()->body.at(0).get();
  CHECK(kir::independentIterations(*row));

  sym::ExprRef i = sym::var("i"), n = sym::var("n");
  auto x = [](sym::ExprRef at) { return kir::load(0, at, DType::F32); };
  auto loopOf = [&](std::vector<kir::StmtPtr> body) { return kir::loop("i", n, std::move(body), kir::Stmt::Schedule::Vectorize); };
  auto one = [&](int buffer, sym::ExprRef at, kir::ValuePtr v) {
    std::vector<kir::StmtPtr> body;
    body.push_back(kir::store(buffer, at, std::move(v)));
    return loopOf(std::move(body));
  };
  // In place (buffer 0 written where it is read), strided, offset by another dim: yes.
  CHECK(kir::independentIterations(*one(0, i, kir::binary(ir::OpKind::Mul, x(i), x(i), DType::F32))));
  CHECK(kir::independentIterations(*one(1, sym::add(sym::mul(sym::constant(3), i), n), x(sym::constant(0)))));
  // A written buffer read at another element of it (a scan), an index that repeats (i % 4,
  // i / 2, i*i) or that does not move (a sum into one element): no.
  CHECK_FALSE(kir::independentIterations(*one(0, sym::add(i, sym::constant(1)), x(i))));
  CHECK_FALSE(kir::independentIterations(*one(1, sym::mod(i, sym::constant(4)), x(i))));
  CHECK_FALSE(kir::independentIterations(*one(1, sym::floorDiv(i, sym::constant(2)), x(i))));
  CHECK_FALSE(kir::independentIterations(*one(1, sym::mul(i, i), x(i))));
  CHECK_FALSE(kir::independentIterations(*one(0, n, kir::binary(ir::OpKind::Add, x(n), x(i), DType::F32))));
  // Two stores to one buffer at different elements: no.
  std::vector<kir::StmtPtr> twice;
  twice.push_back(kir::store(1, i, x(i)));
  twice.push_back(kir::store(1, sym::add(i, n), x(i)));
  CHECK_FALSE(kir::independentIterations(*loopOf(std::move(twice))));
}

// Which threads ran the chunks of one parallelFor, and the chunks' union.
struct Chunks {
  std::mutex m;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::set<std::thread::id> threads;
  void add(int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(m);
    ranges.emplace_back(b, e);
    threads.insert(std::this_thread::get_id());
  }
  bool coverExactly(int64_t n) {
    std::sort(ranges.begin(), ranges.end());
    int64_t at = 0;
    for (auto [b, e] : ranges) {
      if (b != at || e <= b)
        return false;
      at = e;
    }
    return at == n;
  }
};

TEST_CASE("the pool cuts a job into chunks by its cost", "[cpu][parallel][threads]") {
  rt::ThreadPool pool(3);
  REQUIRE(pool.threads() == 3);
  {
    // Worth less than two chunks: one call on the calling thread.
    Chunks c;
    pool.parallelFor(1000, [&](int64_t b, int64_t e) { c.add(b, e); }, 2 * rt::ThreadPool::kMinChunkNs - 1);
    CHECK(c.ranges.size() == 1);
    CHECK(c.threads.count(std::this_thread::get_id()) == 1);
    CHECK(c.coverExactly(1000));
  }
  {
    // Worth five chunks: five disjoint ranges covering all (ceil(1001 / 5) = 201 each).
    Chunks c;
    pool.parallelFor(1001, [&](int64_t b, int64_t e) { c.add(b, e); }, 5 * rt::ThreadPool::kMinChunkNs);
    CHECK(c.ranges.size() == 5);
    CHECK(c.coverExactly(1001));
  }
  {
    // Worth far more: at most four chunks per thread, never more chunks than iterations.
    Chunks many, few;
    pool.parallelFor(1000, [&](int64_t b, int64_t e) { many.add(b, e); }, int64_t{1} << 40);
    pool.parallelFor(2, [&](int64_t b, int64_t e) { few.add(b, e); }, int64_t{1} << 40);
    CHECK(many.ranges.size() == 12);
    CHECK(many.coverExactly(1000));
    CHECK(few.ranges.size() == 2);
    CHECK(few.coverExactly(2));
  }
  {
    // Each thread starts on its own contiguous share of the chunks (the caller on the
    // first), so that the next kernel over the same rows finds them in its cache: with
    // chunks slow enough that no thread can finish its share before the caller starts,
    // the caller takes chunk 0 first, and each thread claims a share's chunks in order.
    std::mutex m;
    std::map<std::thread::id, std::vector<int64_t>> claimed;
    pool.parallelFor(12, [&](int64_t b, int64_t) {
      {
        std::lock_guard<std::mutex> lock(m);
        claimed[std::this_thread::get_id()].push_back(b);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
    REQUIRE(claimed.count(std::this_thread::get_id()) == 1);
    CHECK(claimed[std::this_thread::get_id()].front() == 0);
    // 12 chunks of one iteration, three shares of four: a thread goes through a share in
    // order and never comes back to one it left.
    for (auto &[thread, begins] : claimed) {
      std::vector<int64_t> shares;
      for (size_t k = 0; k < begins.size(); ++k) {
        if (k > 0 && begins[k] / 4 == begins[k - 1] / 4)
          CHECK(begins[k] > begins[k - 1]);
        else
          shares.push_back(begins[k] / 4);
      }
      CHECK(std::set<int64_t>(shares.begin(), shares.end()).size() == shares.size());
    }
  }
  {
    // Back to back, as a model's kernels run: every job complete when parallelFor returns.
    for (int round = 0; round < 200; ++round) {
      Chunks c;
      pool.parallelFor(64, [&](int64_t b, int64_t e) { c.add(b, e); });
      REQUIRE(c.coverExactly(64));
    }
  }
  {
    // Jobs whose chunks take turns finishing first, some after the workers fell asleep
    // (idle past kSpinNs) and some while they spin, of every size from one chunk on: each
    // chunk runs once, and none after its parallelFor has returned (a worker that joins
    // late must find the job closed or the next one whole).
    std::atomic<int64_t> afterReturn{0};
    std::atomic<bool> returned{false};
    for (int round = 0; round < 300; ++round) {
      int64_t n = 1 + round % 37;
      std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
      returned = false;
      pool.parallelFor(n, [&](int64_t b, int64_t e) {
        if (returned)
          ++afterReturn;
        for (int64_t i = b; i < e; ++i)
          ++runs[static_cast<size_t>(i)];
        if ((b + round) % 3 == 0)
          std::this_thread::sleep_for(std::chrono::microseconds(20));
      });
      returned = true;
      for (int64_t i = 0; i < n; ++i)
        REQUIRE(runs[static_cast<size_t>(i)] == 1);
      if (round % 50 == 0)
        std::this_thread::sleep_for(std::chrono::nanoseconds(4 * rt::ThreadPool::kSpinNs));
    }
    CHECK(afterReturn == 0);
  }
}

// Two threads (two models' runs through the C API) asking one pool at once: each job runs
// every index exactly once (the second caller overwrote the first's job: wrong results,
// and a null job called), and a chunk function may ask the pool again.
TEST_CASE("the pool takes callers from several threads at once", "[cpu][parallel][threads]") {
  rt::ThreadPool pool(3);
  auto caller = [&](int64_t n, std::atomic<int> &wrong) {
    for (int round = 0; round < 300; ++round) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
      pool.parallelFor(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          ++runs[static_cast<size_t>(i)];
        if (round % 7 == 0) // nested: runs on this thread
          pool.parallelFor(4, [&](int64_t, int64_t) {});
      });
      for (auto &r : runs)
        wrong += r != 1;
    }
  };
  std::atomic<int> wrong{0};
  std::thread other([&] { caller(97, wrong); });
  caller(64, wrong);
  other.join();
  CHECK(wrong == 0);
}

} // namespace
