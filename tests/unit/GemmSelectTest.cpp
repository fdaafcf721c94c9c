// The CPU GEMM's shape-generic selection (runtime/GemmSelect.h): which variant a table
// picks for a shape, the table files' round trip and error texts, the cost model's fit
// (api/GemmTune.h), and launchFor binding the picked variant's dims.
#include "api/GemmTune.h"
#include "backend/lower/Lower.h"
#include "base/Error.h"
#include "runtime/Executable.h"
#include "runtime/GemmSelect.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

using namespace dnnc;

namespace {

// A table whose tasks all run at the same rate per multiply-add (perKFill ∝ a task's
// area) with `perTask` ns of overhead each: the picks then follow from the task counts.
rt::GemmTable uniformTable(double perTask) {
  rt::GemmTable t;
  t.cpu = "test";
  for (const rt::GemmVariant &v : rt::gemmVariants())
    t.costs.push_back({perTask, 0, 0.01 * static_cast<double>(v.rows * v.cols), perTask, 0.01 * static_cast<double>(v.cols), perTask,
                       0, 0.01 * static_cast<double>(v.rows * v.cols)});
  return t;
}

size_t indexOf(const char *name) {
  for (size_t v = 0; v < rt::gemmVariants().size(); ++v)
    if (std::string(rt::gemmVariants()[v].name) == name)
      return v;
  FAIL("no variant " << name);
  return 0;
}

std::string parseError(const std::string &text) {
  try {
    rt::parseGemmTable(text, "t.json");
  } catch (const DataError &e) {
    return e.what();
  }
  return "(parsed)";
}

} // namespace

TEST_CASE("the variants: the fixed schedule first, rows within the emitter's packed copy of A") {
  const auto &vs = rt::gemmVariants();
  REQUIRE(vs.size() >= 2);
  CHECK(vs[0].rows == lower::kGemmRowBlock);
  CHECK(vs[0].cols == lower::kCpuSchedule.gemmColumnBlock);
  CHECK_FALSE(vs[0].packA);
  for (const rt::GemmVariant &v : vs)
    CHECK((v.rows > 0 && v.rows <= rt::kGemmMaxRows && v.cols > 0));
}

TEST_CASE("selection: the cheapest estimate by a margin, ties to the lower index") {
  rt::GemmTable t = uniformTable(0);
  size_t cheap = indexOf("r32c128a");
  t.costs[cheap].perKFill /= 2; // twice as fast as the others per multiply-add
  CHECK(rt::selectGemmVariant(t, rt::GemmB::Rows, 1, 1000, 1000, 512, 2) == cheap);
  // A predicted gain under kGemmSwitchGain keeps the fixed schedule.
  t.costs[cheap].perKFill *= 2 * 0.95;
  CHECK(rt::selectGemmVariant(t, rt::GemmB::Rows, 1, 1000, 1000, 512, 2) == 0);
  // Costs that do not depend on the fill: one task each, equal everywhere, and the first
  // variant wins the tie.
  rt::GemmTable same;
  same.costs.assign(rt::gemmVariants().size(), {100, 1, 0});
  CHECK(rt::selectGemmVariant(same, rt::GemmB::Rows, 1, 7, 9, 11, 2) == 0);
}

TEST_CASE("selection: few rows on two threads take a variant with enough tasks") {
  rt::GemmTable t = uniformTable(0);
  // M = 1, N = 256: the fixed schedule's single task leaves a thread idle; equal rates per
  // multiply-add make the estimate the waves times a task's filled work.
  size_t v = rt::selectGemmVariant(t, rt::GemmB::Rows, 1, 1, 256, 6144, 2);
  CHECK(rt::gemmVariants()[v].cols < 256);
  CHECK(rt::gemmEstimate(t, v, rt::GemmB::Rows, 1, 1, 256, 6144, 2) == Approx(rt::gemmEstimate(t, 0, rt::GemmB::Rows, 1, 1, 256, 6144, 2) / 2));
  // The same at K = 768 is too little work for a second thread: every variant costs the
  // same, and the fixed schedule stays.
  CHECK(rt::selectGemmVariant(t, rt::GemmB::Rows, 1, 1, 256, 768, 2) == 0);
  // With a large overhead per task, the fewest tasks win instead.
  rt::GemmTable costly = uniformTable(1e9);
  CHECK(rt::selectGemmVariant(costly, rt::GemmB::Rows, 1, 1000, 1000, 64, 2) == indexOf("r128c512a"));
}

TEST_CASE("estimate: a second thread worth nothing makes tasks add up") {
  rt::GemmTable t = uniformTable(0);
  t.parallelEfficiency = 0;
  // M = 1, N = 256, K = 6144 (as above): more tasks no longer pay.
  size_t two = indexOf("r32c128a"); // two tasks there
  CHECK(rt::gemmEstimate(t, two, rt::GemmB::Rows, 1, 1, 256, 6144, 2) == Approx(rt::gemmEstimate(t, 0, rt::GemmB::Rows, 1, 1, 256, 6144, 2)));
  CHECK(rt::selectGemmVariant(t, rt::GemmB::Rows, 1, 1, 256, 6144, 2) == 0);
  t.parallelEfficiency = 0.5; // two threads: 1.5 times one
  CHECK(rt::gemmEstimate(t, two, rt::GemmB::Rows, 1, 1, 256, 6144, 2) == Approx(rt::gemmEstimate(t, 0, rt::GemmB::Rows, 1, 1, 256, 6144, 2) / 1.5));
}

TEST_CASE("estimate: waves of tasks, each task's depth cost scaled by its fill, none shorter than the largest task") {
  rt::GemmTable t;
  t.costs.assign(rt::gemmVariants().size(), {10, 2, 4, 7, 3});
  size_t v0 = indexOf("r64c256");
  const double task = 10 + 1e5 * (2 + 4 * 65.0 / 128), full = 10 + 1e5 * (2 + 4);
  // 65 x 256: 2 tasks, of 64 rows and of 1 (fill 65 / 128 on average), one wave on 2
  // threads: as long as the larger.
  CHECK(rt::gemmEstimate(t, v0, rt::GemmB::Rows, 1, 65, 256, 100000, 2) == Approx(full));
  // The same for columns: 64 x 768 in tasks of 512 columns and of 256; and read in place
  // (1 row): 7 + K * 3 * 1 row * the whole task's columns.
  size_t wide = indexOf("r64c512");
  CHECK(rt::gemmEstimate(t, wide, rt::GemmB::Rows, 1, 64, 768, 100000, 2) == Approx(full));
  CHECK(rt::gemmEstimate(t, wide, rt::GemmB::Rows, 1, 1, 768, 100000, 2) == Approx(7 + 1e5 * 3));
  // Three of those products: 6 tasks, 3 waves of the average task, longer than the largest.
  CHECK(rt::gemmEstimate(t, wide, rt::GemmB::Rows, 3, 64, 768, 100000, 2) == Approx(3 * (10 + 1e5 * (2 + 4 * 0.75))));
  // A second thread worth nothing: as long as one thread running both tasks, not twice
  // the larger.
  t.parallelEfficiency = 0;
  CHECK(rt::gemmEstimate(t, v0, rt::GemmB::Rows, 1, 65, 256, 100000, 2) == Approx(rt::gemmEstimate(t, v0, rt::GemmB::Rows, 1, 65, 256, 100000, 1)));
  t.parallelEfficiency = 1;
  // The same on one thread: two waves; a batch of 3: 6 tasks, 3 waves on 2 threads.
  CHECK(rt::gemmEstimate(t, v0, rt::GemmB::Rows, 1, 65, 256, 100000, 1) == Approx(2 * task));
  CHECK(rt::gemmEstimate(t, v0, rt::GemmB::Rows, 3, 65, 256, 100000, 2) == Approx(3 * task));
  // Too little work for two minimum chunks: the pool runs both tasks on one thread.
  CHECK(rt::gemmEstimate(t, v0, rt::GemmB::Rows, 1, 65, 256, 100, 2) == Approx(2 * (10 + 100 * (2 + 4 * 65.0 / 128))));
  // At most 4 rows read B in place: 3 rows, half the columns of a task.
  CHECK(rt::gemmEstimate(t, v0, rt::GemmB::Rows, 1, 3, 128, 100, 2) == Approx(7 + 100 * 3 * 3 * 0.5));
  // Empty sums and products still cost one task of depth 1 (the kernel stores zeros).
  CHECK(rt::gemmEstimate(t, v0, rt::GemmB::Rows, 1, 0, 0, 0, 2) == Approx(7));
}

TEST_CASE("estimate: a task's columns cost whole vectors") {
  rt::GemmTable t;
  t.costs.assign(rt::gemmVariants().size(), {10, 2, 4, 7, 3, 5, 1, 6});
  t.lanes = 16;
  for (size_t v = 0; v < rt::gemmVariants().size(); ++v)
    for (rt::GemmB b : {rt::GemmB::Rows, rt::GemmB::Panels})
      for (int64_t m : {int64_t(3), int64_t(100)}) {
        // 10 columns cost what 16 do, 17 what 32 do; the widest task is never more than full.
        CHECK(rt::gemmEstimate(t, v, b, 1, m, 10, 512, 2) == Approx(rt::gemmEstimate(t, v, b, 1, m, 16, 512, 2)));
        CHECK(rt::gemmEstimate(t, v, b, 1, m, 17, 512, 2) == Approx(rt::gemmEstimate(t, v, b, 1, m, 32, 512, 2)));
        int64_t cols = rt::gemmVariants()[v].cols;
        CHECK(rt::gemmEstimate(t, v, b, 1, m, cols + 1, 512, 2) == Approx(rt::gemmEstimate(t, v, b, 1, m, cols + 16, 512, 2)));
      }
  // With one lane, columns count as they are.
  t.lanes = 1;
  size_t v0 = indexOf("r64c256");
  CHECK(rt::gemmEstimate(t, v0, rt::GemmB::Rows, 1, 64, 10, 100, 2) == Approx(10 + 100 * (2 + 4 * 10.0 / 256)));
  // Packing B's share scales with the columns (in whole vectors), as the multiply-adds do.
  t.lanes = 16;
  t.costs[v0].perKCols = 8;
  CHECK(rt::gemmEstimate(t, v0, rt::GemmB::Rows, 1, 64, 10, 100, 2) == Approx(10 + 100 * (2 + 8 * 16.0 / 256 + 4 * 16.0 / 256)));
  CHECK(rt::gemmEstimate(t, v0, rt::GemmB::Rows, 1, 64, 256, 100, 2) == Approx(10 + 100 * (2 + 8 + 4)));
}

TEST_CASE("estimate: a prepacked B has its own costs at every M; a gathered B is never read in place") {
  rt::GemmTable t;
  t.costs.assign(rt::gemmVariants().size(), {10, 2, 4, 7, 3, 5, 1, 6});
  size_t v0 = indexOf("r64c256");
  // 65 x 256 (as above): the larger task, from the panel costs.
  CHECK(rt::gemmEstimate(t, v0, rt::GemmB::Panels, 1, 65, 256, 100000, 2) == Approx(5 + 1e5 * (1 + 6)));
  // 3 rows, half a task's columns: no streaming, the panel costs at fill 3/64 * 1/2.
  CHECK(rt::gemmEstimate(t, v0, rt::GemmB::Panels, 1, 3, 128, 100, 2) == Approx(5 + 100 * (1 + 6 * 3.0 / 64 * 0.5)));
  // A transposed or gathered B is packed by each task at any M.
  CHECK(rt::gemmEstimate(t, v0, rt::GemmB::Gathered, 1, 3, 128, 100, 2) == Approx(10 + 100 * (2 + 4 * 3.0 / 64 * 0.5)));
  // Picks follow the costs of the way B is read: a variant cheap only with panels.
  rt::GemmTable u = uniformTable(0);
  size_t cheap = indexOf("r32c128a");
  u.costs[cheap].panelPerKFill /= 2;
  CHECK(rt::selectGemmVariant(u, rt::GemmB::Panels, 1, 1000, 1000, 512, 2) == cheap);
  CHECK(rt::selectGemmVariant(u, rt::GemmB::Rows, 1, 1000, 1000, 512, 2) == 0);
}

TEST_CASE("tune tables: JSON round trip") {
  rt::GemmTable t = uniformTable(123.5);
  t.cpu = "some-cpu";
  t.costs[1].perK = 7.25;
  t.costs[2].streamPerK = 0.125;
  t.costs[3].panelPerTask = 3.5, t.costs[3].panelPerK = 0.75, t.costs[4].panelPerKFill = 9.5;
  t.lanes = 8;
  t.costs[5].perKCols = 2.5;
  rt::GemmTable back = rt::parseGemmTable(rt::gemmTableToJson(t), "t.json");
  CHECK(back.cpu == "some-cpu");
  CHECK(back.source == "t.json");
  CHECK(back.lanes == 8);
  REQUIRE(back.costs.size() == t.costs.size());
  for (size_t v = 0; v < t.costs.size(); ++v) {
    CHECK(back.costs[v].perTask == t.costs[v].perTask);
    CHECK(back.costs[v].perK == t.costs[v].perK);
    CHECK(back.costs[v].perKFill == t.costs[v].perKFill);
    CHECK(back.costs[v].perKCols == t.costs[v].perKCols);
    CHECK(back.costs[v].streamPerTask == t.costs[v].streamPerTask);
    CHECK(back.costs[v].streamPerK == t.costs[v].streamPerK);
    CHECK(back.costs[v].panelPerTask == t.costs[v].panelPerTask);
    CHECK(back.costs[v].panelPerK == t.costs[v].panelPerK);
    CHECK(back.costs[v].panelPerKFill == t.costs[v].panelPerKFill);
  }
  CHECK(rt::parseGemmTable(rt::gemmTableToJson(rt::builtinGemmTable()), "b.json").costs.size() == rt::gemmVariants().size());
}

TEST_CASE("tune tables: errors name the file and the place") {
  CHECK(parseError("{\n  \"cpu\": \"x\",\n  \"variants\": [,]\n}") == "t.json:3:16: not a JSON tune table (run dnnc tune to write one)");
  CHECK(parseError("[1]") == "t.json: the top level: expected an object with \"cpu\" and \"variants\"");
  CHECK(parseError("{\"variants\": []}") == "t.json: cpu: expected the CPU's name, a string");
  CHECK(parseError("{\"cpu\": \"x\"}") == "t.json: variants: expected an array of variants");
  std::string names;
  for (const rt::GemmVariant &v : rt::gemmVariants())
    names += std::string(names.empty() ? "" : ", ") + v.name;
  CHECK(parseError("{\"cpu\": \"x\", \"variants\": [{\"name\": \"r1c1\"}]}") ==
        "t.json: variants[0].name: unknown variant 'r1c1' (this dnnc has " + names + ")");
  CHECK(parseError("{\"cpu\": \"x\", \"variants\": [{\"name\": \"r64c256\", \"per_task\": 1, \"per_k\": 1}]}") ==
        "t.json: variants[0].per_k_cols: missing (run dnnc tune again to write a table this dnnc reads)");
  CHECK(parseError("{\"cpu\": \"x\", \"variants\": [{\"name\": \"r64c256\", \"per_task\": 1, \"per_k\": null}]}") ==
        "t.json: variants[0].per_k: expected a number (ns)");
  CHECK(parseError("{\"cpu\": \"x\", \"variants\": [{\"name\": \"r64c256\", \"per_task\": -1, \"per_k\": 1, \"per_k_cols\": 1, \"per_k_fill\": 1}]}") ==
        "t.json: variants[0].per_task: expected a finite count of ns, at least 0, not -1");
  // A table written before prepacked B had its own costs.
  CHECK(parseError("{\"cpu\": \"x\", \"variants\": [{\"name\": \"r64c256\", \"per_task\": 1, \"per_k\": 1, \"per_k_fill\": 1, "
                   "\"stream_per_task\": 0, \"stream_per_k\": 1}]}") ==
        "t.json: variants[0].per_k_cols: missing (run dnnc tune again to write a table this dnnc reads)");
  std::string one = "{\"name\": \"r64c256\", \"per_task\": 1, \"per_k\": 1, \"per_k_cols\": 0, \"per_k_fill\": 1, \"stream_per_task\": 0, "
                    "\"stream_per_k\": 1, \"panel_per_task\": 1, \"panel_per_k\": 1, \"panel_per_k_fill\": 1}";
  CHECK(parseError("{\"cpu\": \"x\", \"variants\": [" + one + ", " + one + "]}") ==
        "t.json: variants[1].name: variant 'r64c256' given twice");
  CHECK(parseError("{\"cpu\": \"x\", \"variants\": [" + one + "]}") ==
        std::string("t.json: variants: no entry for variant '") + rt::gemmVariants()[0].name + "' (run dnnc tune again)");
  CHECK(parseError("{\"cpu\": \"x\", \"variants\": [3]}") == "t.json: variants[0]: expected an object with a \"name\"");
  nlohmann::json full = nlohmann::json::parse(rt::gemmTableToJson(rt::builtinGemmTable()));
  full["parallel_efficiency"] = 1.5;
  CHECK(parseError(full.dump()) == "t.json: parallel_efficiency: expected a number from 0 to 1");
  full["parallel_efficiency"] = 1;
  for (nlohmann::json lanes : {nlohmann::json(0), nlohmann::json(128), nlohmann::json(12), nlohmann::json(8.5), nlohmann::json()}) {
    full["lanes"] = lanes;
    CHECK(parseError(full.dump()) == "t.json: lanes: expected the f32 lanes of the CPU's vectors: 1, 2, 4, 8, 16, 32 or 64");
  }
  full.erase("lanes");
  CHECK(parseError(full.dump()) == "t.json: lanes: missing (run dnnc tune again to write a table this dnnc reads)");
}

TEST_CASE("the default table: a malformed cached one gives the built-in table and a warning; a named one an error") {
  const char *oldXdg = std::getenv("XDG_CACHE_HOME"), *oldTable = std::getenv("DNNC_TUNE_TABLE");
  std::string keepXdg = oldXdg ? oldXdg : "", keepTable = oldTable ? oldTable : "";
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "dnnc_gemm_default_table_test";
  std::filesystem::create_directories(dir / "dnnc");
  std::string cached = (dir / "dnnc" / ("tune-" + rt::hostCpuSlug() + ".json")).string();
  std::ofstream(cached) << "{\"cpu\": \"x\", \"variants\": []}\n";
  ::unsetenv("DNNC_TUNE_TABLE");
  ::setenv("XDG_CACHE_HOME", dir.string().c_str(), 1);
  std::string warning;
  rt::GemmTable t = rt::defaultGemmTable(&warning);
  CHECK(t.source == "built-in");
  CHECK(warning == cached + ": variants: no entry for variant '" + rt::gemmVariants()[0].name +
                       "' (run dnnc tune again); using the built-in GEMM table");
  ::setenv("DNNC_TUNE_TABLE", cached.c_str(), 1);
  CHECK_THROWS_WITH(rt::defaultGemmTable(&warning),
                    cached + ": variants: no entry for variant '" + rt::gemmVariants()[0].name + "' (run dnnc tune again)");
  keepXdg.empty() ? ::unsetenv("XDG_CACHE_HOME") : ::setenv("XDG_CACHE_HOME", keepXdg.c_str(), 1);
  keepTable.empty() ? ::unsetenv("DNNC_TUNE_TABLE") : ::setenv("DNNC_TUNE_TABLE", keepTable.c_str(), 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("the fit recovers a cost model from exact samples, and drops a negative term") {
  std::vector<api::GemmSample> samples;
  for (double k : {64.0, 256.0, 1024.0})
    for (double f : {1.0, 0.5, 0.125})
      samples.push_back({k, f, 500 + k * (3 + 40 * f)});
  rt::GemmCost c = api::fitGemmCost(samples);
  CHECK(c.perTask == Approx(500).epsilon(1e-6));
  CHECK(c.perK == Approx(3).epsilon(1e-6));
  CHECK(c.perKFill == Approx(40).epsilon(1e-6));
  CHECK(c.perKCols == 0); // no narrow task: not told apart from perK
  // Tasks of a quarter of the columns too: packing B's share separates.
  std::vector<api::GemmSample> narrow = samples;
  for (double k : {64.0, 256.0, 1024.0})
    for (double f : {1.0, 0.125})
      narrow.push_back({k, f * 0.25, 500 + k * (1 + 2 * 0.25 + 40 * f * 0.25), 0.25});
  for (api::GemmSample &s : narrow)
    if (s.cols == 1)
      s.ns = 500 + s.k * (1 + 2 + 40 * s.fill); // perK 1, perKCols 2: the same 3 at full width
  rt::GemmCost w = api::fitGemmCost(narrow);
  CHECK(w.perTask == Approx(500).epsilon(1e-6));
  CHECK(w.perK == Approx(1).epsilon(1e-6));
  CHECK(w.perKCols == Approx(2).epsilon(1e-6));
  CHECK(w.perKFill == Approx(40).epsilon(1e-6));
  // Samples a negative overhead would fit best: it is dropped, the rest still fit.
  std::vector<api::GemmSample> shifted;
  for (const api::GemmSample &s : samples)
    shifted.push_back({s.k, s.fill, s.ns - 600});
  rt::GemmCost d = api::fitGemmCost(shifted);
  CHECK(d.perTask == 0);
  CHECK(d.perK >= 0);
  CHECK(d.perKFill > 0);
}

TEST_CASE("launchFor binds the picked variant's dims; a forced variant wins") {
  sym::ExprRef m = sym::var("M"), n = sym::var("N"), k = sym::var("K");
  rt::KernelInfo info;
  info.name = "gemm";
  info.dims = {"K", "M", "N", rt::kGemmColsDim, rt::kGemmPackADim, rt::kGemmRowsDim};
  sym::ExprRef rows = sym::var(rt::kGemmRowsDim), cols = sym::var(rt::kGemmColsDim);
  info.parallelExtent = sym::mul(sym::floorDiv(sym::add(m, sym::sub(rows, sym::constant(1))), rows),
                                 sym::floorDiv(sym::add(n, sym::sub(cols, sym::constant(1))), cols));
  info.gemmBatches = sym::constant(1), info.gemmM = m, info.gemmN = n, info.gemmK = k;
  for (int v = 0; v < static_cast<int>(rt::gemmVariants().size()); ++v) {
    rt::setForcedGemmVariant(v);
    rt::Launch l = rt::launchFor(info, {{"M", 100}, {"N", 300}, {"K", 7}});
    const rt::GemmVariant &g = rt::gemmVariants()[static_cast<size_t>(v)];
    CHECK(l.gemmVariant == v);
    CHECK(l.dims == std::vector<int64_t>{7, 100, 300, g.cols, g.packA, g.rows});
    CHECK(l.extent == ((100 + g.rows - 1) / g.rows) * ((300 + g.cols - 1) / g.cols));
  }
  rt::setForcedGemmVariant(-1);
  rt::Launch picked = rt::launchFor(info, {{"M", 100}, {"N", 300}, {"K", 7}});
  CHECK(picked.gemmVariant >= 0);
}
