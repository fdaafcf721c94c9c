// Pieces shared by the dnnc subcommands.
#pragma once

#include "backend/Compile.h"
#include "frontend/Sema.h"
#include "ir/transforms/TrainStep.h"

#include <map>
#include <optional>
#include <ostream>
#include <string>

namespace dnnc::tool {

enum ExitCode { kOk = 0, kUserError = 1, kUsage = 2, kInternal = 3 };

using Binding = std::map<std::string, int64_t>;

// Parses "B=4,T=16" (commas or spaces); returns an error message or "".
std::string parseBinding(const std::string &text, Binding &out);
// Checks that every bound dim exists in the model and lies in its range; "" when fine.
std::string checkBinding(const ModelInfo &m, const Binding &b);
// Chooses --model, or the only/"main" model; null with a message when none fits.
ModelInfo *selectModel(Program &p, const std::string &name, std::string &error);

struct RunOptions {
  std::string model, outDir = "out", device = "auto";
  std::vector<std::string> weights;                        // .safetensors files and *.index.json shard indexes
  std::vector<std::pair<std::string, std::string>> inputs; // NAME=FILE.npy
  // Random values only where asked (interop.md §15): with no --weights/--input at all, or these.
  bool randomParams = false, randomInputs = false;
  bool strict = false; // --strict: a tensor of the weights no param uses is an error
  Binding binding;
  uint64_t seed = 0;
  int threads = 0; // 0: the runtime's default
  int repeat = 0;  // timed runs after the first (--stats reports their median)
  bool stats = false;
  std::string profile; // --profile: "" (none), "time" (rows by time) or "order" (program order)
  bool artifact = false; // running a built artifact: nothing is compiled
  backend::CompileOptions compile; // the target's options are probed, not given
};
int runModel(Program &p, const RunOptions &o);
// --profile's table: each kernel and host op with its calls, time, share of the runs,
// GF/s (ops with a FLOP count) or GB/s and the share of this CPU's peak, and its source
// lines; then the executor's own time and the total. `order`: "time" or "order".
void printProfile(const ir::Graph &g, rt::Executable &exe, const std::string &order, std::ostream &os);
struct TrainOptions {
  std::string model, save, resume, device = "auto";
  std::vector<std::string> weights; // as dnnc run's; none: each param from its initializer
  bool strict = false;
  std::vector<std::pair<std::string, std::string>> data; // NAME=FILE.npy
  std::string dataDir;                                   // --data DIR: per-step batches DIR/000000/NAME.npy, ...
  int64_t batch = 32, epochs = 1, steps = 0, logEvery = 1, saveEvery = 0;
  double lr = 1e-3;
  ir::Optimizer optimizer;
  std::string optimizerName = "sgd";
  uint64_t seed = 0;
  bool json = false, verbose = false;
  // Updated params and optimizer state written over the old ones in place (false: as the
  // step's outputs, copied back: --no-in-place, to compare against).
  bool inPlace = true;
  backend::CompileOptions compile;
};
// `dnnc train` (docs/training.md).
int trainModel(Program &p, const TrainOptions &o);
// `dnnc run ARTIFACT`: loads and runs a `dnnc build` artifact with no compiling.
int runArtifact(const std::string &path, const RunOptions &o);

// `dnnc shapes` output.
void printShapes(const ModelInfo &m, const Binding &b, bool json, std::ostream &os);
// passes: how :mem runs the pipeline before it plans memory.
int runRepl(const std::string &file, const std::vector<std::string> &includes, const ir::PassOptions &passes);

} // namespace dnnc::tool
