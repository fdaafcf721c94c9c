// The CPU GEMM's variants, their cost model and table files, and the process's selection
// (see GemmSelect.h).
#include "runtime/GemmSelect.h"

#include "base/Error.h"
#include "runtime/ThreadPool.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>

namespace dnnc::rt {

const std::vector<GemmVariant> &gemmVariants() {
  // Few, and far apart: tall tasks amortize packing B over more rows, wide ones packing A
  // over more columns, small ones give more tasks to share between threads.
  // The fixed schedule (kept unless another is predicted kGemmSwitchGain faster) has 512
  // columns: on 2 threads the MLP's [256, 784] x [784, 512] ran 8-10% faster in 4 tasks of
  // 64 x 512 than in 8 of 64 x 256 (alike on one thread; the transformer's products alike
  // both ways: docs/performance.md); r64c256 stays for products that need its tasks.
  static const std::vector<GemmVariant> variants{
      {"r64c512", 64, 512, false},   // the fixed schedule
      {"r64c256", 64, 256, false},   // the fixed schedule until 2026-12-05
      {"r64c256a", 64, 256, true},   // r64c256 with A packed
      {"r128c512a", 128, 512, true}, // large products: fewer, bigger tasks
      {"r32c128a", 32, 128, true},   // mid-sized: 4x the tasks of r64c256
      {"r16c64", 16, 64, false},     // small products: many small tasks
  };
  return variants;
}

void bindGemmVariant(size_t v, std::map<std::string, int64_t> &binding) {
  const GemmVariant &g = gemmVariants().at(v);
  binding[kGemmRowsDim] = g.rows, binding[kGemmColsDim] = g.cols, binding[kGemmPackADim] = g.packA;
}

GemmTable builtinGemmTable() {
  // Fitted by `dnnc tune` on the development machine (AMD EPYC, AVX-512, 2 cores) when it
  // was quiet (2026-12-04: three fits within 5% of each other, parallel efficiency
  // 0.93-0.996). An earlier fit under a load of 14 read 0.01, which kept every product of
  // few rows on one thread: the transformer at B=1, T=16 ran 0.65 ms instead of 0.47.
  GemmTable t;
  t.cpu = "built-in";
  t.source = "built-in";
  // r64c512's entry is r64c256's with its columns' costs (per_k: packing B, per_k_fill,
  // stream_per_k) doubled: it was added after that fit, and runs the same micro-kernels
  // over twice the columns per task. The fit had no narrow tasks: per_k_cols is 0 (all
  // of per_k charged whatever the columns).
  t.costs = {{0, 44.8, 562, 425, 15.84}, {0, 22.4, 281, 425, 7.92},   {0, 24.1, 288, 436, 7.92},
             {0, 52.4, 1160, 812, 18.3}, {0, 11.7, 74.3, 1050, 4.63}, {0, 5.99, 17.3, 352, 3.11}};
  for (GemmCost &c : t.costs)
    c.panelPerTask = c.perTask, c.panelPerK = c.perK, c.panelPerKFill = c.perKFill;
  t.parallelEfficiency = 0.95;
  t.lanes = 16;
  return t;
}

namespace {
int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
} // namespace

double gemmEstimate(const GemmTable &t, size_t v, GemmB b, int64_t batches, int64_t m, int64_t n, int64_t k, unsigned threads) {
  const GemmVariant &g = gemmVariants().at(v);
  const GemmCost &c = t.costs.at(v);
  int64_t rowTasks = ceilDiv(std::max<int64_t>(m, 1), g.rows), colTasks = ceilDiv(std::max<int64_t>(n, 1), g.cols);
  double tasks = static_cast<double>(std::max<int64_t>(batches, 1)) * static_cast<double>(rowTasks * colTasks);
  double depth = static_cast<double>(std::max<int64_t>(k, 1));
  // A task with `rows` of its rows and `colFill` of its columns inside C.
  auto taskNs = [&](double rows, double colFill) {
    double fill = rows / static_cast<double>(g.rows) * colFill;
    if (b == GemmB::Panels)
      return c.panelPerTask + depth * (c.panelPerK + c.panelPerKFill * fill);
    return b == GemmB::Rows && m <= kGemmStreamRows ? c.streamPerTask + depth * c.streamPerK * rows * colFill
                                                    : c.perTask + depth * (c.perK + c.perKCols * colFill + c.perKFill * fill);
  };
  auto per = [](int64_t size, int64_t blocks) { return static_cast<double>(size) / static_cast<double>(blocks); };
  // Columns in whole vectors: the last task's remainder is one masked vector more.
  int64_t lanes = std::max<int64_t>(t.lanes, 1);
  auto inVectors = [&](int64_t cols, int64_t cap) { return std::min(ceilDiv(cols, lanes) * lanes, cap); };
  double task = taskNs(per(m, rowTasks), per(inVectors(n, colTasks * g.cols), colTasks * g.cols));
  double largest = taskNs(static_cast<double>(std::min(m, g.rows)), per(inVectors(std::min(n, g.cols), g.cols), g.cols));
  // The threads the pool would use: none but the caller's for less than two minimum
  // chunks of work, else at most one per minimum chunk.
  double chunks = std::floor(tasks * task / static_cast<double>(ThreadPool::kMinChunkNs));
  double used = std::clamp(chunks, 1.0, std::min(tasks, static_cast<double>(std::max(1u, threads))));
  // Waves of average tasks, stretched by the parallel efficiency, and never less than the
  // largest task (tasks of 512 and 256 columns on two threads take as long as the first).
  double waves = std::ceil(tasks / used) * task * used / (1 + (used - 1) * std::clamp(t.parallelEfficiency, 0.0, 1.0));
  return std::max(waves, largest);
}

size_t selectGemmVariant(const GemmTable &t, GemmB b, int64_t batches, int64_t m, int64_t n, int64_t k, unsigned threads) {
  size_t best = 0;
  double bestNs = gemmEstimate(t, 0, b, batches, m, n, k, threads);
  const double fixedNs = bestNs;
  for (size_t v = 1; v < gemmVariants().size(); ++v)
    if (double ns = gemmEstimate(t, v, b, batches, m, n, k, threads); ns < bestNs)
      best = v, bestNs = ns;
  return bestNs * kGemmSwitchGain <= fixedNs ? best : 0;
}

std::string gemmTableToJson(const GemmTable &t) {
  nlohmann::ordered_json j;
  j["cpu"] = t.cpu;
  j["parallel_efficiency"] = t.parallelEfficiency;
  j["lanes"] = t.lanes;
  j["model"] = fmt::format("ns per task = per_task + K * (per_k + per_k_cols * column fill + per_k_fill * fill); at most {} "
                           "rows of a B in rows: stream_per_task + K * stream_per_k * rows * column fill; a prepacked B: "
                           "panel_per_task + K * (panel_per_k + panel_per_k_fill * fill); columns in whole vectors of "
                           "`lanes`",
                           kGemmStreamRows);
  nlohmann::ordered_json vs = nlohmann::ordered_json::array();
  for (size_t v = 0; v < gemmVariants().size(); ++v) {
    const GemmVariant &g = gemmVariants()[v];
    const GemmCost &c = t.costs.at(v);
    vs.push_back({{"name", g.name}, {"rows", g.rows}, {"cols", g.cols}, {"pack_a", g.packA}, {"per_task", c.perTask},
                  {"per_k", c.perK}, {"per_k_cols", c.perKCols}, {"per_k_fill", c.perKFill}, {"stream_per_task", c.streamPerTask}, {"stream_per_k", c.streamPerK},
                  {"panel_per_task", c.panelPerTask}, {"panel_per_k", c.panelPerK}, {"panel_per_k_fill", c.panelPerKFill}});
  }
  j["variants"] = vs;
  return j.dump(2) + "\n";
}

GemmTable parseGemmTable(const std::string &text, const std::string &name) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error &e) {
    // The line and column of the byte the parser stopped at.
    size_t at = std::min(e.byte > 0 ? e.byte - 1 : 0, text.size()), line = 1, col = 1;
    for (size_t i = 0; i < at; ++i)
      text[i] == '\n' ? (++line, col = 1) : ++col;
    throw DataError(fmt::format("{}:{}:{}: not a JSON tune table (run dnnc tune to write one)", name, line, col));
  } catch (const nlohmann::json::exception &e) { // a number past a double's range: no position to give
    throw DataError(fmt::format("{}: not a JSON tune table (run dnnc tune to write one): {}", name,
                                e.id == 406 ? "a number overflows a double" : e.what()));
  }
  auto fail = [&](const std::string &where, const std::string &what) -> DataError {
    return DataError(fmt::format("{}: {}: {}", name, where, what));
  };
  if (!j.is_object())
    throw fail("the top level", "expected an object with \"cpu\" and \"variants\"");
  if (!j.contains("cpu") || !j["cpu"].is_string())
    throw fail("cpu", "expected the CPU's name, a string");
  if (!j.contains("variants") || !j["variants"].is_array())
    throw fail("variants", "expected an array of variants");
  const std::vector<GemmVariant> &known = gemmVariants();
  GemmTable t;
  t.cpu = j["cpu"].get<std::string>();
  t.source = name;
  t.costs.resize(known.size());
  std::vector<bool> seen(known.size());
  for (size_t i = 0; i < j["variants"].size(); ++i) {
    const nlohmann::json &e = j["variants"][i];
    std::string at = fmt::format("variants[{}]", i);
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string())
      throw fail(at, "expected an object with a \"name\"");
    std::string vname = e["name"].get<std::string>();
    auto it = std::find_if(known.begin(), known.end(), [&](const GemmVariant &g) { return vname == g.name; });
    if (it == known.end()) {
      std::string names;
      for (const GemmVariant &g : known)
        names += std::string(names.empty() ? "" : ", ") + g.name;
      throw fail(at + ".name", fmt::format("unknown variant '{}' (this dnnc has {})", vname, names));
    }
    size_t v = static_cast<size_t>(it - known.begin());
    if (seen[v])
      throw fail(at + ".name", fmt::format("variant '{}' given twice", vname));
    seen[v] = true;
    GemmCost &c = t.costs[v];
    double *fields[] = {&c.perTask,       &c.perK,       &c.perKCols,     &c.perKFill,        &c.streamPerTask,
                        &c.streamPerK,    &c.panelPerTask, &c.panelPerK, &c.panelPerKFill};
    const char *keys[] = {"per_task",     "per_k",          "per_k_cols",  "per_k_fill",     "stream_per_task",
                          "stream_per_k", "panel_per_task", "panel_per_k", "panel_per_k_fill"};
    for (int f = 0; f < 9; ++f) {
      if (!e.contains(keys[f]))
        throw fail(at + "." + keys[f], "missing (run dnnc tune again to write a table this dnnc reads)");
      if (!e[keys[f]].is_number())
        throw fail(at + "." + keys[f], "expected a number (ns)");
      double x = e[keys[f]].get<double>();
      if (!std::isfinite(x) || x < 0)
        throw fail(at + "." + keys[f], fmt::format("expected a finite count of ns, at least 0, not {}", x));
      *fields[f] = x;
    }
  }
  for (size_t v = 0; v < known.size(); ++v)
    if (!seen[v])
      throw fail("variants", fmt::format("no entry for variant '{}' (run dnnc tune again)", known[v].name));
  if (!j.contains("parallel_efficiency") || !j["parallel_efficiency"].is_number() ||
      !(j["parallel_efficiency"].get<double>() >= 0 && j["parallel_efficiency"].get<double>() <= 1))
    throw fail("parallel_efficiency", "expected a number from 0 to 1");
  t.parallelEfficiency = j["parallel_efficiency"].get<double>();
  if (!j.contains("lanes"))
    throw fail("lanes", "missing (run dnnc tune again to write a table this dnnc reads)");
  // A power of two up to 64 divides every variant's columns (the estimate rounds the
  // whole N, which then rounds only the last task).
  if (int64_t l = j["lanes"].is_number_integer() ? j["lanes"].get<int64_t>() : 0; l < 1 || l > 64 || (l & (l - 1)) != 0)
    throw fail("lanes", "expected the f32 lanes of the CPU's vectors: 1, 2, 4, 8, 16, 32 or 64");
  t.lanes = j["lanes"].get<int64_t>();
  return t;
}

std::string hostCpuSlug() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') == std::string::npos ? line.size() : line.find(':') + 1);
      break;
    }
  // Lower-case words joined by '-', without "(R)", "(TM)", "CPU" and the clock ("@ 2.60GHz").
  model = model.substr(0, model.find('@'));
  std::string slug;
  std::istringstream words(model);
  for (std::string w; words >> w;) {
    if (w == "(R)" || w == "(TM)" || w == "CPU")
      continue;
    std::string clean;
    for (char ch : w)
      if (std::isalnum(static_cast<unsigned char>(ch)))
        clean += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      else if (ch == '(')
        break; // "Xeon(R)"
    if (!clean.empty())
      slug += (slug.empty() ? "" : "-") + clean;
  }
  return slug.empty() ? "unknown-cpu" : slug;
}

std::string dnncCacheFolder() {
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/dnnc";
  const char *home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/dnnc";
}

std::string defaultGemmTablePath() {
  if (const char *env = std::getenv("DNNC_TUNE_TABLE"); env && *env)
    return env;
  return dnncCacheFolder() + "/tune-" + hostCpuSlug() + ".json";
}

namespace {
struct Selection {
  std::mutex mutex;
  bool loaded = false;
  GemmTable table;
  bool forcedRead = false;
  int forced = -1;
};
Selection &selection() {
  static Selection s;
  return s;
}
GemmTable readTableFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw DataError(fmt::format("{}: cannot read the tune table", path));
  std::stringstream text;
  text << in.rdbuf();
  return parseGemmTable(text.str(), path);
}
} // namespace

void setGemmTableFile(const std::string &path) {
  GemmTable t = readTableFile(path);
  Selection &s = selection();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.table = std::move(t);
  s.loaded = true;
}

GemmTable defaultGemmTable(std::string *warning) {
  std::string path = defaultGemmTablePath();
  if (!std::ifstream(path).good())
    return builtinGemmTable();
  const char *env = std::getenv("DNNC_TUNE_TABLE");
  if (env && *env) // named by the user: its errors are theirs to fix
    return readTableFile(path);
  try {
    return readTableFile(path);
  } catch (const DataError &e) {
    // A cached table dnnc tune left behind (an older dnnc's, say) does not stop runs.
    if (warning)
      *warning = fmt::format("{}; using the built-in GEMM table", e.what());
    return builtinGemmTable();
  }
}

const GemmTable &activeGemmTable() {
  Selection &s = selection();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.loaded) {
    std::string warning;
    s.table = defaultGemmTable(&warning);
    if (!warning.empty())
      std::cerr << "dnnc: warning: " << warning << "\n";
    s.loaded = true;
  }
  return s.table;
}

void setForcedGemmVariant(int v) {
  Selection &s = selection();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.forced = v;
  s.forcedRead = true;
}

size_t gemmVariantFor(GemmB b, int64_t batches, int64_t m, int64_t n, int64_t k, unsigned threads) {
  Selection &s = selection();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.forcedRead) {
      if (const char *env = std::getenv("DNNC_GEMM_VARIANT"); env && *env) {
        std::string text(env);
        size_t count = gemmVariants().size();
        if (text.size() > 3 || text.find_first_not_of("0123456789") != std::string::npos || std::stoul(text) >= count)
          throw DataError(fmt::format("DNNC_GEMM_VARIANT: '{}' is not a variant index (0 to {})", text, count - 1));
        s.forced = std::stoi(text);
      }
      s.forcedRead = true;
    }
    if (s.forced >= 0)
      return static_cast<size_t>(s.forced);
  }
  return selectGemmVariant(activeGemmTable(), b, batches, m, n, k, threads);
}

} // namespace dnnc::rt
