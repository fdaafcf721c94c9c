// `dnnc run --profile`: the executor's per-op times as a table (see Driver.h).
#include "ir/graph/Walk.h"
#include "runtime/CpuDevice.h"
#include "runtime/GemmSelect.h"
#include "runtime/Peak.h"
#include "tools/dnnc/Driver.h"

#include <fmt/format.h>

#include <algorithm>

namespace dnnc::tool {

namespace {

// The distinct source lines of `op`, or of a fused group's members, in program order.
std::string sourceLines(const ir::Graph &g, const ir::Op &op) {
  std::vector<std::string> lines;
  auto add = [&](const ir::Op &o) {
    std::string line = ir::sourceLine(g, o.loc);
    if (!line.empty() && std::find(lines.begin(), lines.end(), line) == lines.end())
      lines.push_back(line);
  };
  if (op.kind == ir::OpKind::Fused)
    ir::walk(*op.regions[0], add);
  else
    add(op);
  std::string out;
  for (const std::string &l : lines)
    out += (out.empty() ? "" : ", ") + l;
  return out;
}

} // namespace

void printProfile(const ir::Graph &g, rt::Executable &exe, const std::string &order, std::ostream &os) {
  rt::Executable::Profile p = exe.profile();
  if (p.runs == 0 || p.seconds <= 0)
    return;
  // Rates are compared with this CPU's peaks, measured now; a GPU's (or the simulator's)
  // are not known here, so they show no share of a peak.
  double flopPeak = 0, bytePeak = 0;
  if (dynamic_cast<rt::CpuDevice *>(&exe.device())) {
    unsigned threads = rt::ThreadPool::global().threads();
    flopPeak = rt::measureFmaPeak(threads, 2'000'000);
    bytePeak = rt::measureCopyBandwidth(threads);
    os << fmt::format("peaks: fp32 FMA {:.1f} GFLOP/s, memory {:.1f} GB/s (measured now on {} thread{}: vector FMA chains, "
                      "a 256 MiB copy)\n",
                      flopPeak / 1e9, bytePeak / 1e9, threads, threads == 1 ? "" : "s");
  }
  std::string dims;
  for (auto &[name, v] : exe.binding())
    dims += fmt::format("{}{} = {}", dims.empty() ? "" : ", ", name, v);
  os << fmt::format("profile of {} run{} at {} on {}: {:.3f} ms per run\n", p.runs, p.runs == 1 ? "" : "s", dims,
                    exe.device().name(), 1e3 * p.seconds / static_cast<double>(p.runs));
  // How each for loop ran (Executable.h, loop paths): before the table, whose rows its
  // kernels' times are part of.
  for (const rt::Executable::LoopTime &l : p.loops) {
    std::string where = ir::sourceLine(g, l.op->loc);
    if (l.compiled())
      os << fmt::format("loop at {}: compiled: after the first, each step replays {} kernel launch{} ({} steps in {} run{})\n",
                        where, l.launches, l.launches == 1 ? "" : "es", l.steps, l.runs, l.runs == 1 ? "" : "s");
    else
      os << fmt::format("loop at {}: interpreted op by op: {} ({} steps in {} run{})\n", where, l.why, l.steps, l.runs,
                        l.runs == 1 ? "" : "s");
  }
  if (order == "time")
    std::stable_sort(p.ops.begin(), p.ops.end(), [](const auto &a, const auto &b) { return a.seconds > b.seconds; });
  struct Row {
    std::string name, calls, ms, share, rate, ofPeak, source;
  };
  std::vector<Row> rows{{"op", "calls", "ms", "share", "rate", "of peak", "source"}};
  auto share = [&](double s) { return fmt::format("{:.1f}%", 100 * s / p.seconds); };
  double timed = 0;
  for (const rt::Executable::OpTime &t : p.ops) {
    timed += t.seconds;
    bool kernel = t.kernel;
    double rate = t.seconds > 0 ? (t.flops > 0 ? t.flops : t.bytes) / t.seconds : 0, peak = t.flops > 0 ? flopPeak : bytePeak;
    // A CPU GEMM's name carries the variants it ran (what the tune table or the built-in one
    // picked), comma-separated without spaces: the name stays one column.
    std::string name = kernel ? t.name : "host: " + t.name;
    for (size_t v = 0; v < t.gemmVariants.size(); ++v)
      name += fmt::format("{}{}", v == 0 ? " [" : ",", rt::gemmVariants().at(static_cast<size_t>(t.gemmVariants[v])).name);
    name += t.gemmVariants.empty() ? "" : "]";
    rows.push_back({name, std::to_string(t.calls),
                    fmt::format("{:.3f}", 1e3 * t.seconds), share(t.seconds),
                    !kernel ? "-" : fmt::format("{:.1f} {}", rate / 1e9, t.flops > 0 ? "GF/s" : "GB/s"),
                    kernel && peak > 0 ? fmt::format("{:.1f}%", 100 * rate / peak) : "-", sourceLines(g, *t.op)});
  }
  double rest = std::max(0.0, p.seconds - timed);
  rows.push_back({"executor", "", fmt::format("{:.3f}", 1e3 * rest), share(rest), "", "", "the walk, bindings, views, copies"});
  rows.push_back({"total", "", fmt::format("{:.3f}", 1e3 * p.seconds), "100.0%", "", "", ""});
  size_t w[6] = {};
  for (const Row &r : rows) {
    const std::string *cells[6] = {&r.name, &r.calls, &r.ms, &r.share, &r.rate, &r.ofPeak};
    for (size_t c = 0; c < 6; ++c)
      w[c] = std::max(w[c], cells[c]->size());
  }
  for (const Row &r : rows) {
    std::string line = fmt::format("{:<{}}  {:>{}}  {:>{}}  {:>{}}  {:>{}}  {:>{}}  {}", r.name, w[0], r.calls, w[1], r.ms, w[2],
                                   r.share, w[3], r.rate, w[4], r.ofPeak, w[5], r.source);
    os << line.substr(0, line.find_last_not_of(' ') + 1) << "\n";
  }
}

} // namespace dnnc::tool
