// `dnnc train` (spec training.md §12): the command line over api::train (api/Training.h,
// which holds the loop, its checks and the checkpoints): the log lines (text or JSON), the
// progress bar on a terminal, --verbose's kernel counts, and SIGINT. SIGINT while a
// checkpoint is being written is held until both files are complete; at any other time it
// ends the process at once, so an interrupted run leaves the last complete checkpoint or
// none, never a partial file. The updated params and optimizer state are written over the
// old ones in place (Executable::runInPlace; on a GPU they stay there between steps and
// are synced back before a checkpoint); --no-in-place runs the same compiled step through
// Executable::run and moves the new tensors in, with bit-identical results.
#include "api/Training.h"
#include "tools/dnnc/Driver.h"

#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <iostream>

namespace dnnc::tool {

namespace {

// SIGINT: held while a checkpoint is written, else the end of the process with `gLast`
// (where the last complete checkpoint is) on stderr.
volatile std::sig_atomic_t gWriting = 0, gInterrupted = 0;
char gLast[512] = "dnnc: interrupted; no checkpoint was written\n";

extern "C" void onInterrupt(int) {
  if (gWriting) {
    gInterrupted = 1;
    return;
  }
  ssize_t ignored = ::write(STDERR_FILENO, gLast, std::strlen(gLast));
  (void)ignored;
  std::_Exit(130);
}

// The progress bar on a terminal's stderr: redrawn in place, erased at the end.
void drawProgress(int64_t done, int64_t total, double loss) {
  const int width = 30;
  int filled = static_cast<int>(width * done / std::max<int64_t>(total, 1));
  std::cerr << fmt::format("\r[{}{}] {}/{}  loss {:.4f}\x1b[K", std::string(static_cast<size_t>(filled), '#'),
                           std::string(static_cast<size_t>(width - filled), '.'), done, total, loss)
            << std::flush;
}

} // namespace

int trainModel(Program &p, const TrainOptions &o) {
  std::string err;
  ModelInfo *m = selectModel(p, o.model, err);
  if (!m) {
    std::cerr << "dnnc: error: " << err << "\n";
    return kUserError;
  }
  bool progress = !o.json && isatty(STDERR_FILENO);
  api::TrainHooks hooks;
  hooks.note = [](const std::string &note) { std::cerr << "dnnc: note: " << note << "\n"; };
  hooks.compiled = [&](const std::string &device, size_t kernels) {
    if (o.verbose)
      std::cerr << fmt::format("compiled the training step for {}: {} kernels\n", device, kernels);
    if (!o.save.empty())
      std::signal(SIGINT, onInterrupt);
  };
  hooks.versions = [&](const std::string &text) {
    if (o.verbose)
      std::cerr << "recompute auto:\n" << text;
  };
  hooks.step = [&](const api::StepReport &r) {
    if (r.step % o.logEvery == 0 || r.step == r.steps) {
      std::string line;
      if (o.json) {
        for (auto &[name, v] : r.metrics)
          line += fmt::format(", \"{}\": {}", name, v);
        line = fmt::format("{{\"step\": {}, \"loss\": {}, \"ms\": {:.3f}{}}}\n", r.step, r.loss, r.ms, line);
      } else {
        for (auto &[name, v] : r.metrics)
          line += fmt::format("  {} {:.4f}", name, v);
        line = fmt::format("step {}/{}  loss {:.4f}  {:.1f} ms/step{}\n", r.step, r.steps, r.loss, r.ms, line);
      }
      if (progress)
        std::cerr << "\r\x1b[K" << std::flush; // the log line goes where the bar was
      std::cout << line << std::flush;
    }
    if (progress)
      drawProgress(r.step, r.steps, r.loss);
  };
  hooks.checkpoint = [&](bool writing, int64_t done) {
    if (writing) {
      gWriting = 1;
      return;
    }
    std::string last = fmt::format(
        "dnnc: interrupted; the last complete checkpoint is step {} in {} (resume with --resume {}.state)\n", done, o.save, o.save);
    std::snprintf(gLast, sizeof gLast, "%s", last.c_str());
    gWriting = 0;
    if (gInterrupted)
      onInterrupt(SIGINT);
  };
  if (!o.profile.empty())
    hooks.profiled = [&](const ir::Graph &step, rt::Executable &exe) { printProfile(step, exe, o.profile, std::cout); };
  try {
    api::TrainResult result = api::train(*m->graph, o, hooks);
    if (progress)
      std::cerr << "\r\x1b[K" << std::flush;
    if (o.verbose) {
      std::cerr << fmt::format("kernels compiled after the first step: {}\n", result.kernelsAfterFirst);
      if (result.stepsPerVersion.size() > 1)
        std::cerr << fmt::format("steps by recompute version: {}\n", fmt::join(result.stepsPerVersion, ", "));
      if (result.updatable > 0)
        std::cerr << fmt::format("updated in place: {} of {} params and state tensors; output allocations after the first step: {}\n",
                                 result.updatedInPlace, result.updatable, result.outputAllocationsAfterFirst);
      if (!result.copies.empty())
        std::cerr << fmt::format("host-device copies: {}\n", result.copies);
    }
    if (!o.save.empty() && !o.json)
      std::cout << fmt::format("saved {} params to {} (optimizer state and step for --resume: {}.state)\n", result.params.size(),
                               o.save, o.save);
  } catch (const DataError &e) {
    if (progress)
      std::cerr << "\r\x1b[K";
    std::cerr << "dnnc: error: " << e.what() << "\n";
    return kUserError;
  }
  return kOk;
}

} // namespace dnnc::tool
