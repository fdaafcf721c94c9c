// Pieces shared by the dnnc subcommands.
#pragma once

#include "api/Models.h"
#include "api/Training.h"
#include "backend/Compile.h"
#include "frontend/Sema.h"
#include "ir/transforms/TrainStep.h"

#include <map>
#include <optional>
#include <ostream>
#include <string>

namespace dnnc::tool {

enum ExitCode { kOk = 0, kUserError = 1, kUsage = 2, kInternal = 3 };

using api::Binding;
using api::checkBinding; // (api/Models.h)
using api::parseBinding;
using api::selectModel;

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
  bool walkLoops = false; // --walk-loops: no compiled loops (Executable::setCompiledLoops)
  std::string profile; // --profile: "" (none), "time" (rows by time) or "order" (program order)
  bool artifact = false; // running a built artifact: nothing is compiled
  backend::CompileOptions compile; // the target's options are probed, not given
};
int runModel(Program &p, const RunOptions &o);
// False, with the error printed, when `out` (what `option` writes) is one of `inputs` or
// another output: writing it would destroy what the command reads or just wrote.
bool writesApart(const std::string &option, const std::string &out,
                 const std::vector<std::pair<std::string, std::string>> &others);
// False, with the error printed, when `out` is a file the command has read (a source, an
// imported module, data): checked after the reads, before the write.
bool writesNoInput(const std::string &option, const std::string &out);
// `dnnc builtins`: every builtin from the op registry; `markdown`: docs/builtins.md exactly.
int printBuiltins(bool markdown, std::ostream &os);
// dnnc import: translates the ONNX model `file` into `out` and `weightsOut`, writing
// nothing unless the translation type-checks (tools/dnnc/Import.cpp); returns the exit code.
int importOnnx(const std::string &file, const std::string &out, const std::string &weightsOut, const std::string &modelName);
// --profile's table: each kernel and host op with its calls, time, share of the runs,
// GF/s (ops with a FLOP count) or GB/s and the share of this CPU's peak, and its source
// lines; then the executor's own time and the total. `order`: "time" or "order".
void printProfile(const ir::Graph &g, rt::Executable &exe, const std::string &order, std::ostream &os);
// `dnnc train`'s options: the loop's (api/Training.h) and how the command reports.
struct TrainOptions : api::TrainConfig {
  std::string model, profile; // profile: "", "time" or "order", as for dnnc run
  int64_t logEvery = 1;
  bool json = false, verbose = false;
};
// `dnnc train` (docs/training.md).
int trainModel(Program &p, const TrainOptions &o);
struct ProfileOptions {
  std::string model, device = "cpu", svg;
  Binding binding;
  bool train = false, json = false;
  ir::Optimizer optimizer;
  std::string optimizerName = "sgd";
  uint64_t seed = 0;
  backend::CompileOptions compile; // the recompute mode and budget are in its passes
};
// `dnnc profile` (tools/dnnc/MemoryProfile.cpp; docs/training.md).
int profileMemory(Program &p, const ProfileOptions &o);
// `dnnc run ARTIFACT`: loads and runs a `dnnc build` artifact with no compiling.
int runArtifact(const std::string &path, const RunOptions &o);

// `dnnc shapes` output.
void printShapes(const ModelInfo &m, const Binding &b, bool json, std::ostream &os);
// passes: how :mem runs the pipeline before it plans memory.
int runRepl(const std::string &file, const std::vector<std::string> &includes, const ir::PassOptions &passes);

} // namespace dnnc::tool
