// Limits as data (base/Limits.def): the table, large inputs that must not crash
// (deep nesting is a located [limit] diagnostic, long chains are fine), a thread pool
// whose threads fail to start, file moves that fail half-way, and the C API given a null
// model.
#include "frontend/Sema.h"
#include "base/Limits.h"
#include "runtime/ThreadPool.h"
#include "base/TensorIO.h"
#include "runtime/dnnc_runtime.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <system_error>
#include <unistd.h>
#include <csignal>
#include <iterator>
#include <sys/resource.h>

using namespace dnnc;

namespace {

// Checks `text`; returns "" when it is fine, else the first diagnostic's tag and message.
std::string check(const std::string &text) {
  Program p;
  DiagnosticEngine diags(p.sources());
  if (p.loadText("limits.dnn", text, diags))
    return "";
  REQUIRE(diags.hasErrors());
  const Diagnostic &d = diags.diagnostics()[0];
  return std::string(diagTag(d.kind)) + ": " + d.message;
}

std::string repeat(const std::string &s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i)
    out += s;
  return out;
}

std::string model(const std::string &body) {
  return "dim B;\nmodel main(x: f32[B, 4]) -> f32[B, 4] {\n" + body + "\n}\n";
}

} // namespace

TEST_CASE("every limit has a unique name and a default inside its bounds", "[limits]") {
  std::set<std::string> names;
  for (const LimitInfo &l : allLimits()) {
    CHECK(names.insert(l.name).second);
    CHECK(l.lowest <= l.highest);
    CHECK((l.defaultValue == 0 || (l.defaultValue >= l.lowest && l.defaultValue <= l.highest)));
    CHECK(findLimit(l.name) == l.id);
  }
  CHECK_FALSE(findLimit("no-such-limit"));
  CHECK_FALSE(setLimit(Limit::NestingDepth, 257).empty());
  CHECK(limit(Limit::NestingDepth) == 256);
}

TEST_CASE("long left-deep chains build, check and free without recursion", "[limits]") {
  CHECK(check(model("  return " + repeat("x + ", 10000) + "x;")) == "");
  CHECK(check(model("  return x" + repeat(" * 1.0", 10000) + ";")) == "");
  CHECK(check(model("  let c = x" + repeat(" > x", 1) + ";\n  return " + repeat("x - ", 5000) + "x;")) == "");
}

TEST_CASE("deep nesting is a located limit diagnostic, not a crash", "[limits]") {
  const std::string tag = "limit: nesting deeper than 256 levels";
  auto starts = [&](const std::string &got) { return got.rfind(tag, 0) == 0; };
  CHECK(starts(check(model("  return " + repeat("(", 10000) + "x" + repeat(")", 10000) + ";"))));
  CHECK(starts(check(model("  return " + repeat("relu(", 10000) + "x" + repeat(")", 10000) + ";"))));
  CHECK(starts(check(model("  return " + repeat("-", 10000) + "x;"))));
  CHECK(starts(check(model("  return x" + repeat(" ** 1.0", 10000) + ";"))));
  CHECK(starts(check(model("  var y = x;\n" + repeat("if true {\n", 10000) + repeat("}\n", 10000) + "  return y;"))));
  CHECK(starts(check(model("  var y = x;\n  if false { y = y + 1.0; }" + repeat(" else if false { y = y + 1.0; }", 10000) +
                           "\n  return y;"))));
  CHECK(starts(check(model("  let y = x" + repeat("[...]", 10000) + ";\n  return x;"))));
  CHECK(starts(check(model("  let y = [" + repeat("[", 10000) + repeat("]", 10000) + "];\n  return x;"))));
  // Just inside the limit is fine.
  CHECK(check(model("  return " + repeat("(", 250) + "x" + repeat(")", 250) + ";")) == "");
  CHECK(check(model("  var y = x;\n" + repeat("if true {\n", 250) + "y = y + 1.0;\n" + repeat("}\n", 250) + "  return y;")) == "");
}

TEST_CASE("tensor types of too high a rank are a limit diagnostic", "[limits]") {
  std::string got = check("model main(x: f32[" + repeat("1, ", 16) + "1]) -> f32[1] {\n  return reshape(x, [1]);\n}\n");
  CHECK(got == "limit: a tensor type of rank 17: dnnc allows rank up to 16 (limit tensor-rank)");
}

TEST_CASE("thread counts are read within 1..1024", "[limits][threads]") {
  unsigned n = 0;
  CHECK(rt::ThreadPool::parseThreads("8", "--threads", n).empty());
  CHECK(n == 8);
  CHECK(rt::ThreadPool::parseThreads("1024", "--threads", n).empty());
  for (const char *bad : {"0", "1025", "100000", "-1", "", "4x", "99999999999999999999999"})
    CHECK_FALSE(rt::ThreadPool::parseThreads(bad, "--threads", n).empty());
}

TEST_CASE("a thread pool whose threads fail to start runs on those that did", "[limits][threads]") {
  std::atomic<int> started{0};
  auto spawnTwo = [&](std::function<void()> fn) {
    if (started.fetch_add(1) >= 2)
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again), "thread");
    return std::thread(std::move(fn));
  };
  rt::ThreadPool pool(8, spawnTwo);
  CHECK(pool.requested() == 8);
  CHECK(pool.threads() == 3); // the caller and the two that started
  std::vector<std::atomic<int>> hits(10000);
  pool.parallelFor(10000, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      ++hits[static_cast<size_t>(i)];
  });
  for (auto &h : hits)
    CHECK(h.load() == 1);

  auto spawnNone = [](std::function<void()>) -> std::thread {
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again), "thread");
  };
  rt::ThreadPool alone(100000, spawnNone); // asked for more than the limit: clamped, then none start
  CHECK(alone.requested() == 1024);
  CHECK(alone.threads() == 1);
  int64_t sum = 0;
  alone.parallelFor(100, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      sum += i;
  });
  CHECK(sum == 4950);
}

// rt::moveAllIntoPlace, under a failed move: the places end as they were (dnnc train's
// checkpoint pair and dnnc run's outputs rely on it).
TEST_CASE("moving files into place is all or nothing", "[io]") {
  namespace fs = std::filesystem;
  fs::path d = fs::temp_directory_path() / ("dnnc-move-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d / "b" / "full"); // a non-empty folder: no file can replace it
  auto write = [](const fs::path &p, const std::string &text) { std::ofstream(p) << text; };
  auto read = [](const fs::path &p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  write(d / "a", "old a");
  write(d / "a.new", "new a");
  write(d / "b.new", "new b");
  CHECK_THROWS_WITH(rt::moveAllIntoPlace({{(d / "a.new").string(), (d / "a").string()}, {(d / "b.new").string(), (d / "b").string()}}),
                    Catch::Contains("cannot write '" + (d / "b").string() + "'"));
  CHECK(read(d / "a") == "old a");
  CHECK(read(d / "a.new") == "new a");
  CHECK(read(d / "b.new") == "new b");
  CHECK(std::distance(fs::directory_iterator(d), fs::directory_iterator()) == 4); // a, a.new, b.new, b: none set aside left
  fs::remove_all(d / "b");
  rt::moveAllIntoPlace({{(d / "a.new").string(), (d / "a").string()}, {(d / "b.new").string(), (d / "b").string()}});
  CHECK(read(d / "a") == "new a");
  CHECK(read(d / "b") == "new b");
  CHECK(std::distance(fs::directory_iterator(d), fs::directory_iterator()) == 2);
  fs::remove_all(d);
}

// rt::writeFilesAtomically on a disk that fills up (here, a file size limit): an error
// naming the file and why, and the old files as they were. The bytes of a small file sat
// in a stream's buffer until it was destroyed, unchecked: a 0-byte file replaced the old
// one and dnnc run, train --save and import reported success.
TEST_CASE("a file that cannot be written in full replaces nothing", "[io]") {
  namespace fs = std::filesystem;
  fs::path d = fs::temp_directory_path() / ("dnnc-full-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  std::ofstream(d / "a") << "old a";
  std::ofstream(d / "b") << "old b";
  struct rlimit before {};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &before) == 0);
  struct rlimit small = before;
  small.rlim_cur = 64;
  auto oldHandler = std::signal(SIGXFSZ, SIG_IGN); // past the limit: EFBIG, not the signal
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  std::string error;
  try {
    rt::writeFilesAtomically({{(d / "a").string(), "new a"}, {(d / "b").string(), std::string(100, 'b')}});
  } catch (const DataError &e) {
    error = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, oldHandler);
  CHECK(error == "cannot write '" + (d / "b").string() + "': File too large");
  auto read = [](const fs::path &p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  CHECK(read(d / "a") == "old a");
  CHECK(read(d / "b") == "old b");
  CHECK(std::distance(fs::directory_iterator(d), fs::directory_iterator()) == 2); // no temporary file left
  rt::writeFilesAtomically({{(d / "a").string(), "new a"}, {(d / "b").string(), "new b"}});
  CHECK(read(d / "a") == "new a");
  CHECK(read(d / "b") == "new b");
  fs::remove_all(d);
}

// The C API on a null model (what a failed dnnc_load returns): errors, never a crash (the
// input queries dereferenced it).
TEST_CASE("the C API takes a null model", "[capi]") {
  CHECK(dnnc_load("/nonexistent.dnnc") == nullptr);
  CHECK(dnnc_num_inputs(nullptr) == 0);
  CHECK(dnnc_input_name(nullptr, 0) == nullptr);
  CHECK(std::string(dnnc_last_error()).find("null model") != std::string::npos);
  CHECK(dnnc_input_rank(nullptr, 0) == -1);
  (void)dnnc_input_dtype(nullptr, 0);
  CHECK(dnnc_output_name(nullptr, 0) == nullptr);
  dnnc_tensor *out = nullptr;
  size_t n = 0;
  CHECK(dnnc_run(nullptr, nullptr, 0, &out, &n) == -1);
}
