// dnnc: the command-line driver (check, shapes, emit, opt, run, build, train, import, repl).
#include "api/GemmTune.h"
#include "backend/Compile.h"
#include "frontend/Ast.h"
#include "frontend/Parser.h"
#include "ir/graph/Serialize.h"
#include "ir/transforms/PassManager.h"
#include "base/Limits.h"
#include "base/TensorIO.h"
#include "runtime/Artifact.h"
#include "runtime/GemmSelect.h"
#include "runtime/ThreadPool.h"
#include "base/Size.h"
#include "tools/dnnc/Driver.h"

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

namespace po = boost::program_options;
using namespace dnnc;
using namespace dnnc::tool;

bool dnnc::tool::writesNoInput(const std::string &option, const std::string &out) {
  if (std::optional<std::string> read = rt::readEarlier(out)) {
    std::cerr << "dnnc: error: " << option << " '" << out << "' is a file this command reads ('" << *read << "')\n";
    return false;
  }
  return true;
}

namespace {

const char *kUsageText = R"(usage: dnnc <command> [options]

commands:
  check FILE                      parse and type-check
  shapes FILE [--model M] [--bind B=4,T=16] [--json]
                                  every named value with its type and shape class
  emit FILE --emit=ast|ir|ir-json|grad|opt|kernels|llvm|ptx|plan [--target cpu|cuda] [--arch sm_90] [--no-fuse] [-o OUT]
                                  print a compiler stage as text
  opt FILE|IR.json [--passes=fuse,order,plan-memory] [--emit=ir|json] [-o OUT]
                                  run graph passes and print the IR they leave
  build FILE -o OUT [--target cpu|cuda] [--arch sm_90]
                                  compile a model into an artifact the runtime loads
  run FILE [--weights W]... [--input NAME=X.npy]... [--bind B=2] [--out DIR] [--device auto|cpu|cuda|ref] [--seed N]
                                  compile a model (or load an artifact) and run it
  train FILE --data NAME=X.npy...|DIR [--batch N] [--epochs E | --steps S] [--optimizer sgd|momentum|adam|adamw] [--lr X] [--save OUT] [--resume OUT.state]
                                  train a model's params (its first output is the loss)
  profile FILE [--bind B=8] [--train] [--recompute none|auto|all] [--svg OUT.svg] [--json]
                                  where the memory of one call or training step goes, planned and measured
  import MODEL.onnx -o MODEL.dnn [--weights-out W.safetensors] [--model-name M]
                                  translate an ONNX model into .dnn source and its weights
  tune [-o TABLE] [--print]       fit this CPU's GEMM cost model (the table run reads to pick a
                                  GEMM variant per shape; default ~/.cache/dnnc/tune-<cpu>.json)
  repl [FILE]                     the shape-query REPL
  builtins [--markdown]           the builtin functions from the op registry (--markdown: docs/builtins.md)

Commands that compile also take --verify-each, --print-before=PASS and --print-after=PASS.
Run 'dnnc <command> --help' for a command's options; 'dnnc --version' for the version.
)";

struct CommonOptions {
  std::string file;
  std::vector<std::string> includes;
  std::vector<std::string> limits; // --limit NAME=N
};

po::options_description commonOptions(CommonOptions &c) {
  po::options_description d("options");
  d.add_options()("help,h", "show this help")("include,I", po::value(&c.includes)->composing(),
                                                "add a folder to the import search path")(
      "limit", po::value(&c.limits)->composing(),
      "NAME=N: lower one of dnnc's limits (nesting-depth, statements, tensor-rank, call-depth)");
  return d;
}

// Parses a subcommand's options; returns -1 to continue, else an exit code.
int parseOptions(int argc, char **argv, const po::options_description &desc, const char *usage, bool needFile,
                 CommonOptions &c, po::variables_map &vm) {
  po::positional_options_description pos;
  pos.add("file", 1);
  po::options_description all = desc;
  all.add_options()("file", po::value(&c.file), "input file");
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error &e) {
    std::cerr << "dnnc: error: " << e.what() << "\n" << usage << desc;
    return kUsage;
  }
  if (vm.count("help")) {
    std::cout << usage << desc;
    return kOk;
  }
  if (needFile && c.file.empty()) {
    std::cerr << "dnnc: error: no input file\n" << usage << desc;
    return kUsage;
  }
  for (const std::string &l : c.limits) {
    size_t eq = l.find('=');
    std::optional<Limit> id = findLimit(l.substr(0, eq));
    std::string err;
    if (eq == std::string::npos || !id) {
      err = "--limit takes NAME=N with NAME one of:";
      for (const LimitInfo &info : allLimits())
        err += std::string(" ") + info.name;
    } else {
      std::string v = l.substr(eq + 1);
      if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos)
        err = fmt::format("--limit {}: '{}' is not a count", id ? limitInfo(*id).name : "", v);
      else
        err = setLimit(*id, std::stoll(v));
    }
    if (!err.empty()) {
      std::cerr << "dnnc: error: " << err << "\n";
      return kUsage;
    }
  }
  return -1;
}

// --target: a target that builds artifacts; null (with the error printed) otherwise.
const backend::Target *artifactTarget(const std::string &name) {
  const backend::Target *t = backend::findTarget(name);
  if (t && t->buildsArtifacts())
    return t;
  std::cerr << "dnnc: error: unknown target '" << name << "' (targets: " << backend::targetNames(true) << ")\n";
  return nullptr;
}

// The pass manager's flags, on every command that compiles.
struct PassFlags {
  std::vector<std::string> printBefore, printAfter;
  std::string recompute, memoryBudget;
};

po::options_description passOptions(PassFlags &f) {
  po::options_description d("pass options");
  d.add_options()("no-fuse", "one kernel per op (no fusion)")("no-fuse-attention", "keep attention as its separate ops (the scores stored)")("verify-each", "verify the IR after every pass")(
      "print-before", po::value(&f.printBefore)->composing(), "PASS[,PASS]: print the IR before these passes (or all), to stderr")(
      "print-after", po::value(&f.printAfter)->composing(), "PASS[,PASS]: print the IR after these passes (or all), to stderr")(
      "recompute", po::value(&f.recompute),
      "none, auto or all: which forward values a training step (or a grad) recomputes in the backward pass instead of "
      "keeping them alive (default auto: those whose recomputation costs under 1% of the step, more under --memory-budget)")(
      "memory-budget", po::value(&f.memoryBudget), "SIZE (e.g. 8GiB): with --recompute auto, recompute more until the step fits");
  return d;
}

// The pass options the flags ask for; false (with the usage error printed) for an unknown pass.
bool readPassOptions(const po::variables_map &vm, const PassFlags &f, ir::PassOptions &out) {
  out.fuse = vm.count("no-fuse") == 0;
  out.attention = vm.count("no-fuse-attention") == 0;
  out.verifyEach = vm.count("verify-each") > 0;
  std::string err;
  if (vm.count("recompute")) {
    if (std::optional<ir::RecomputeMode> mode = ir::parseRecomputeMode(f.recompute))
      out.recompute.mode = *mode;
    else
      err = "--recompute: " + ir::badRecomputeMode(f.recompute);
  }
  if (vm.count("memory-budget") && err.empty()) {
    if (std::optional<int64_t> bytes = ir::parseByteSize(f.memoryBudget))
      out.recompute.budget = bytes;
    else
      err = "--memory-budget: " + ir::badMemoryBudget(f.memoryBudget);
  }
  if (err.empty() && out.recompute.budget && out.recompute.mode != ir::RecomputeMode::Auto)
    err = fmt::format("--memory-budget is for --recompute auto, not --recompute {}", ir::recomputeModeName(out.recompute.mode));
  if (!err.empty()) {
    std::cerr << "dnnc: error: " << err << "\n";
    return false;
  }
  for (auto [flags, names] : {std::pair{&f.printBefore, &out.printBefore}, std::pair{&f.printAfter, &out.printAfter}})
    for (const std::string &list : *flags) {
      std::istringstream in(list);
      for (std::string name; std::getline(in, name, ',');)
        if (!name.empty())
          names->insert(name);
    }
  if (std::string err = ir::checkPrintNames(out); !err.empty()) {
    std::cerr << "dnnc: error: " << err << "\n";
    return false;
  }
  return true;
}

bool loadProgram(Program &p, const CommonOptions &c, DiagnosticEngine &diags) {
  for (const std::string &i : c.includes)
    p.addIncludePath(i);
  bool ok = p.load(c.file, diags);
  diags.render(std::cerr);
  return ok;
}

// Writes `text` to `path` all at once (through a temporary), or to stdout when empty.
int writeOutput(const std::string &path, const std::string &text) {
  if (path.empty()) {
    std::cout << text;
    return kOk;
  }
  if (!writesNoInput("-o", path))
    return kUsage;
  try {
    rt::writeFileAtomically(path, text);
  } catch (const DataError &e) {
    std::cerr << "dnnc: error: " << e.what() << "\n";
    return kUserError;
  }
  return kOk;
}

int cmdCheck(int argc, char **argv) {
  CommonOptions c;
  PassFlags flags;
  po::options_description desc = commonOptions(c);
  desc.add(passOptions(flags));
  po::variables_map vm;
  if (int rc = parseOptions(argc, argv, desc, "usage: dnnc check FILE [-I DIR]... [--verify-each] [--print-after=PASS]\n", true, c,
                            vm);
      rc >= 0)
    return rc;
  ir::PassOptions passes;
  if (!readPassOptions(vm, flags, passes))
    return kUsage;
  Program p;
  DiagnosticEngine diags(p.sources());
  if (!loadProgram(p, c, diags))
    return kUserError;
  // With a pass flag, check also runs the pipeline the compiling commands run.
  if (passes.verifyEach || !passes.printBefore.empty() || !passes.printAfter.empty())
    for (ModelInfo &m : p.models())
      ir::optimize(*m.graph, passes);
  return kOk;
}

int cmdShapes(int argc, char **argv) {
  CommonOptions c;
  std::string model, bind;
  po::options_description desc = commonOptions(c);
  desc.add_options()("model", po::value(&model), "the model to show (default: main, or the first)")(
      "bind", po::value(&bind), "bind dims, e.g. B=4,T=16")("json", "print one JSON object");
  po::variables_map vm;
  if (int rc = parseOptions(argc, argv, desc, "usage: dnnc shapes FILE [--model M] [--bind B=4,T=16] [--json]\n", true, c, vm);
      rc >= 0)
    return rc;
  Binding binding;
  if (std::string err = parseBinding(bind, binding); !err.empty()) {
    std::cerr << "dnnc: error: " << err << "\n";
    return kUsage;
  }
  Program p;
  DiagnosticEngine diags(p.sources());
  if (!loadProgram(p, c, diags))
    return kUserError;
  std::string err;
  ModelInfo *m = selectModel(p, model, err);
  if (!m || !(err = checkBinding(*m, binding)).empty()) {
    std::cerr << "dnnc: error: " << err << "\n";
    return kUserError;
  }
  printShapes(*m, binding, vm.count("json") > 0, std::cout);
  return kOk;
}

int cmdEmit(int argc, char **argv) {
  CommonOptions c;
  PassFlags flags;
  std::string stage, out, targetName = "cpu", train;
  ir::Optimizer trainSettings; // --weight-decay and --momentum; the kind comes from --train
  backend::CompileOptions options;
  po::options_description desc = commonOptions(c);
  desc.add_options()("emit", po::value(&stage)->required(),
                     "the stage: ast, ir, ir-json (the graph IR as JSON, for dnnc opt), opt (after fusion), kernels, llvm, ptx or plan (the memory plan)")(
      "target", po::value(&targetName), "for --emit=llvm: cpu (this host, the default) or cuda")(
      "arch", po::value(&options.target.arch), "the GPU architecture for PTX (default sm_80)")(
      "output,o", po::value(&out), "write to this file, not stdout")(
      "train", po::value(&train)->implicit_value("sgd"),
      "emit each model's training step, as dnnc train compiles it, with this optimizer (sgd, the default, momentum, adam or adamw)")(
      "weight-decay", po::value(&trainSettings.weightDecay), "with --train: the optimizer's weight decay, as for dnnc train (default 0)")(
      "momentum", po::value(&trainSettings.momentum), "with --train: the momentum of --train=momentum, as for dnnc train (default 0.9)");
  desc.add(passOptions(flags));
  po::variables_map vm;
  const char *usage = "usage: dnnc emit FILE --emit=ast|ir|ir-json|grad|opt|kernels|llvm|ptx|plan [--target cpu|cuda] [--arch sm_90] [--no-fuse] "
                      "[--train[=OPTIMIZER] [--weight-decay X] [--momentum X]] [-o OUT]\n";
  if (int rc = parseOptions(argc, argv, desc, usage, true, c, vm); rc >= 0)
    return rc;
  const std::vector<std::string> stages{"ast", "ir", "ir-json", "grad", "opt", "kernels", "llvm", "ptx", "plan"};
  if (std::find(stages.begin(), stages.end(), stage) == stages.end()) {
    std::cerr << "dnnc: error: unknown stage '" << stage << "' for --emit (this build emits: " << fmt::format("{}", fmt::join(stages, ", "))
              << ")\n";
    return kUsage;
  }
  const backend::Target *target = artifactTarget(targetName);
  if (!target || !readPassOptions(vm, flags, options.passes))
    return kUsage;
  if (stage == "ptx") // PTX is the cuda target's, whatever --target says
    target = backend::findTarget("cuda");
  std::optional<ir::Optimizer> optimizer;
  if (!vm.count("train") && (vm.count("weight-decay") || vm.count("momentum"))) {
    std::cerr << "dnnc: error: --weight-decay and --momentum set the optimizer of a training step: they need --train\n";
    return kUsage;
  }
  if (vm.count("train")) {
    optimizer = ir::parseOptimizer(train);
    if (!optimizer) {
      std::cerr << "dnnc: error: " << ir::unknownOptimizer(train) << "\n";
      return kUsage;
    }
    if (!std::isfinite(trainSettings.weightDecay) || trainSettings.weightDecay < 0 || !std::isfinite(trainSettings.momentum) ||
        trainSettings.momentum < 0) {
      std::cerr << "dnnc: error: --weight-decay and --momentum take non-negative numbers\n";
      return kUsage;
    }
    trainSettings.kind = optimizer->kind;
    optimizer = trainSettings;
    if (stage == "ast") {
      std::cerr << "dnnc: error: --train makes a training step of the graph IR; --emit=ast is the syntax tree\n";
      return kUsage;
    }
    options.constantParams = false; // as dnnc train compiles it: the params change every step (no prepacked copies)
  }
  Program p;
  DiagnosticEngine diags(p.sources());
  if (!loadProgram(p, c, diags))
    return kUserError;
  if (optimizer) {
    try {
      for (ModelInfo &m : p.models())
        ir::makeTrainStep(*m.graph, *optimizer);
    } catch (const DataError &e) {
      std::cerr << "dnnc: error: " << e.what() << "\n";
      return kUserError;
    }
  }
  std::string text;
  try { // (a grad the differentiate pass cannot take, a size past the limits)
    if (stage == "ast") {
      DiagnosticEngine parseDiags(p.sources());
      auto m = parseModule(p.sources(), p.sources().find(c.file), parseDiags);
      m->name = std::filesystem::path(c.file).stem().string();
      text = ast::print(*m);
    } else if (stage == "ir") {
      for (const ModelInfo &m : p.models())
        text += ir::print(*m.graph);
    } else if (stage == "ir-json") { // one model as an object, several as a list
      nlohmann::json graphs = nlohmann::json::array();
      for (const ModelInfo &m : p.models())
        graphs.push_back(ir::toJson(*m.graph));
      text = (graphs.size() == 1 ? graphs[0] : graphs).dump(1) + "\n";
    } else if (stage == "grad") { // after differentiation only (and dropout's mode, which it depends on)
      // Through the pass manager, so that --verify-each and --print-* apply here too.
      ir::PassManager manager(options.passes);
      for (ModelInfo &m : p.models()) {
        ir::PassState state;
        manager.run(*m.graph, {ir::passInfo(ir::PassId::DropoutMode), ir::passInfo(ir::PassId::Differentiate)}, state);
        text += ir::print(*m.graph);
      }
    } else if (stage == "opt") {
      for (ModelInfo &m : p.models()) {
        ir::optimize(*m.graph, options.passes);
        text += ir::print(*m.graph);
      }
    } else {
      for (ModelInfo &m : p.models()) {
        backend::Lowered lowered = backend::lowerFor(*m.graph, *target, options);
        std::vector<const kir::Kernel *> kernels = lowered.kernels.kernelPointers();
        if (stage == "kernels")
          for (const kir::Kernel *k : kernels)
            text += target->kernelNote(*k) + kir::print(*k);
        else if (stage == "plan") {
          text += ir::print(*lowered.plan, *m.graph);
          if (lowered.recompute) // a training step's: which values are stashed, which recomputed
            text += ir::print(*lowered.recompute, *m.graph);
        }
        else if (stage == "ptx")
          text += target->moduleText(kernels, options.target).assembly;
        else if (stage == "llvm")
          text += target->moduleText(kernels, options.target).llvmIR;
      }
    }
  } catch (const DataError &e) {
    std::cerr << "dnnc: error: " << e.what() << "\n";
    return kUserError;
  }
  return writeOutput(out, text);
}

// Reads the models of a .dnn file, or graphs in their JSON form (`dnnc emit --emit=ir-json`).
bool loadGraphs(const CommonOptions &c, Program &p, std::vector<std::unique_ptr<ir::Graph>> &owned,
                std::vector<ir::Graph *> &graphs) {
  if (std::filesystem::path(c.file).extension() != ".json") {
    DiagnosticEngine diags(p.sources());
    if (!loadProgram(p, c, diags))
      return false;
    for (ModelInfo &m : p.models())
      graphs.push_back(m.graph.get());
    return true;
  }
  try {
    nlohmann::json j = nlohmann::json::parse(rt::readFile(c.file));
    for (const nlohmann::json &g : j.is_array() ? j : nlohmann::json::array({j})) {
      owned.push_back(ir::fromJson(g));
      graphs.push_back(owned.back().get());
    }
  } catch (const nlohmann::json::exception &e) {
    std::cerr << "dnnc: error: '" << c.file << "' is not graph IR JSON: " << e.what() << "\n";
    return false;
  } catch (const DataError &e) {
    std::cerr << "dnnc: error: '" << c.file << "': " << e.what() << "\n";
    return false;
  }
  return true;
}

int cmdOpt(int argc, char **argv) {
  CommonOptions c;
  PassFlags flags;
  std::string passList, format = "ir", out, targetName = "cpu";
  po::options_description desc = commonOptions(c);
  std::string passHelp = "PASS[,PASS]: the passes to run, in order (default: the pipeline every compile runs). Passes:";
  for (const ir::PassInfo &info : ir::allPasses())
    passHelp += fmt::format("\n  {:<12} {}", info.name, info.reason);
  desc.add_options()("passes", po::value(&passList), passHelp.c_str())(
      "emit", po::value(&format), "ir (text, the default; a memory plan follows its graph) or json (the graph, for dnnc opt)")(
      "target", po::value(&targetName), "whose kernels plan-memory plans buffers for: cpu (the default), cuda or cuda-sim")(
      "output,o", po::value(&out), "write to this file, not stdout");
  desc.add(passOptions(flags));
  po::variables_map vm;
  const char *usage = "usage: dnnc opt FILE|IR.json [--passes=fuse,order,plan-memory] [--emit=ir|json] [--verify-each] [-o OUT]\n";
  if (int rc = parseOptions(argc, argv, desc, usage, true, c, vm); rc >= 0)
    return rc;
  ir::PassOptions options;
  if (!readPassOptions(vm, flags, options))
    return kUsage;
  std::vector<ir::PassInfo> passes;
  if (!vm.count("passes"))
    passes = ir::defaultPipeline(options);
  else if (std::string err = ir::parsePassList(passList, passes); !err.empty()) {
    std::cerr << "dnnc: error: " << err << "\n";
    return kUsage;
  }
  const backend::Target *target = backend::findTarget(targetName);
  if (!target || (format != "ir" && format != "json")) {
    std::cerr << "dnnc: error: "
              << (target ? "unknown format '" + format + "' for --emit (ir, json)"
                         : "unknown target '" + targetName + "' (targets: " + backend::targetNames(false) + ")")
              << "\n";
    return kUsage;
  }
  Program p;
  std::vector<std::unique_ptr<ir::Graph>> owned;
  std::vector<ir::Graph *> graphs;
  if (!loadGraphs(c, p, owned, graphs))
    return kUserError;
  std::string text;
  nlohmann::json json = nlohmann::json::array();
  for (ir::Graph *g : graphs) {
    ir::PassState state = backend::passStateFor(*target);
    ir::PassManager(options).run(*g, passes, state);
    if (format == "json")
      json.push_back(ir::toJson(*g));
    else
      text += ir::print(*g) + (state.memoryPlan ? ir::print(*state.memoryPlan, *g) : "");
  }
  if (format == "json")
    text = (json.size() == 1 ? json[0] : json).dump(1) + "\n";
  return writeOutput(out, text);
}

// What is wrong with --profile[=order] on `device` (run and train), or "".
std::string profileOptionError(const std::string &profile, const std::string &device) {
  if (!profile.empty() && profile != "time" && profile != "order")
    return "--profile takes 'time' or 'order', not '" + profile + "'";
  if (!profile.empty() && device == "ref")
    return "--profile times compiled kernels: the reference interpreter (--device ref) has none";
  return "";
}

// --threads (or DNNC_NUM_THREADS) checked; `out` stays 0 for the runtime's default. False
// with the error printed.
bool readThreads(const po::variables_map &vm, const std::string &text, int &out) {
  unsigned n = 0;
  std::string err;
  if (vm.count("threads"))
    err = rt::ThreadPool::parseThreads(text, "--threads", n);
  else if (const char *env = std::getenv("DNNC_NUM_THREADS"); env && *env)
    err = rt::ThreadPool::parseThreads(env, "DNNC_NUM_THREADS", n);
  if (!err.empty()) {
    std::cerr << "dnnc: error: " << err << "\n";
    return false;
  }
  if (vm.count("threads"))
    out = static_cast<int>(n);
  return true;
}

// --seed, an integer in [0, 2^64) (read as text: an int64 option refused seeds past 2^63
// and a uint64 one wraps -1); `out` keeps its default without one. False with the error
// printed.
bool readSeed(const po::variables_map &vm, uint64_t &out) {
  if (!vm.count("seed"))
    return true;
  const std::string &text = vm["seed"].as<std::string>();
  uint64_t seed = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seed);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    std::cerr << "dnnc: error: --seed takes an integer from 0 to 2^64 - 1, not '" << text << "'\n";
    return false;
  }
  out = seed;
  return true;
}

bool writesApart(const std::string &option, const std::string &out,
                 const std::vector<std::pair<std::string, std::string>> &others) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (auto &[what, path] : others) {
    bool same = fs::exists(out, ec) && fs::exists(path, ec)
                    ? fs::equivalent(out, path, ec)
                    : fs::weakly_canonical(out, ec) == fs::weakly_canonical(path, ec);
    if (same) {
      std::cerr << "dnnc: error: " << option << " '" << out << "' is " << what << " ('" << path << "')\n";
      return false;
    }
  }
  return true;
}


// NAME=FILE pairs of a repeatable option; false with the error printed.
bool readNamedFiles(const std::vector<std::string> &given, const char *option,
                    std::vector<std::pair<std::string, std::string>> &out) {
  for (const std::string &in : given) {
    size_t eq = in.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == in.size()) {
      std::cerr << "dnnc: error: " << option << " takes NAME=FILE.npy, not '" << in << "'\n";
      return false;
    }
    std::string name = in.substr(0, eq);
    if (std::any_of(out.begin(), out.end(), [&](const auto &p) { return p.first == name; })) {
      std::cerr << "dnnc: error: " << option << " gives '" << name << "' twice\n";
      return false;
    }
    out.emplace_back(name, in.substr(eq + 1));
  }
  return true;
}

int cmdRun(int argc, char **argv) {
  CommonOptions c;
  PassFlags flags;
  RunOptions o;
  std::string bind, threads, tuneTable;
  int64_t maxIterations = 0;
  std::vector<std::string> inputs;
  po::options_description desc = commonOptions(c);
  desc.add_options()("model", po::value(&o.model), "the model to run (default: main, or the first)")(
      "weights", po::value(&o.weights)->composing(),
      "a .safetensors file, or a Hugging Face *.safetensors.index.json and its shards (repeatable): each param by its name "
      "or its `from` name")(
      "strict", "a tensor of the weights that no param uses is an error (default: one note)")(
      "random-params", "fill the params no --weights file has from their initializers (each named in a note)")(
      "input", po::value(&inputs)->composing(), "NAME=FILE.npy for an input (repeatable)")(
      "random-inputs", "fill the inputs no --input gives with seeded random values (each named in a note)")(
      "bind", po::value(&bind), "bind dims, e.g. B=2,T=8 (sizes for random inputs)")(
      "out", po::value(&o.outDir), "where out0.npy, out1.npy, ... go (default: out)")(
      "device", po::value(&o.device), "auto (the GPU if one works, else the CPU), cpu, cuda, ref (the reference interpreter), or cuda-sim (the GPU kernels on a CPU simulator, for testing)")(
      "seed", po::value<std::string>(), "seed for random weights and inputs (default 0)")(
      "threads", po::value(&threads), "CPU threads, 1 to 1024 (default: DNNC_NUM_THREADS, else one per core)")(
      "max-iterations", po::value(&maxIterations),
      "stop with an error when a while loop runs N iterations and its condition still holds (default: no limit)")(
      "repeat", po::value(&o.repeat), "run N more times and report the median time with --stats")(
      "no-memory-plan", "allocate every intermediate on its own (no planned arena)")(
      "walk-loops", "run every loop op by op from the host (no compiled loops), to compare")(
      "stats", "print the dims, kernels, ops run and arena bytes")(
      "profile", po::value(&o.profile)->implicit_value("time"),
      "print each kernel's and host op's calls, time, share, GF/s or GB/s against this CPU's peak and source lines, "
      "sorted by time (--profile=order: in program order); with --repeat, over the timed runs")(
      "tune-table", po::value(&tuneTable),
      "the GEMM cost model `dnnc tune` wrote (default: DNNC_TUNE_TABLE, else ~/.cache/dnnc/tune-<cpu>.json if there, "
      "else the built-in one)");
  desc.add(passOptions(flags));
  po::variables_map vm;
  const char *usage = "usage: dnnc run FILE [--weights W.safetensors]... [--input NAME=X.npy]... [--bind B=2,T=8] "
                      "[--out DIR] [--device auto|cpu|cuda|ref] [--seed N] [--threads N] [--random-params] [--random-inputs] "
                      "[--strict]\n";
  if (int rc = parseOptions(argc, argv, desc, usage, true, c, vm); rc >= 0)
    return rc;
  o.stats = vm.count("stats") > 0;
  o.strict = vm.count("strict") > 0;
  o.randomParams = vm.count("random-params") > 0;
  o.randomInputs = vm.count("random-inputs") > 0;
  o.compile.memoryPlan = vm.count("no-memory-plan") == 0;
  o.walkLoops = vm.count("walk-loops") > 0;
  if (!readPassOptions(vm, flags, o.compile.passes))
    return kUsage;
  if (std::string err = profileOptionError(o.profile, o.device); !err.empty()) {
    std::cerr << "dnnc: error: " << err << "\n";
    return kUsage;
  }
  if (o.repeat < 0 || o.repeat > 1000000) {
    std::cerr << "dnnc: error: --repeat takes a count from 0 to 1000000\n";
    return kUsage;
  }
  if (!readThreads(vm, threads, o.threads) || !readSeed(vm, o.seed))
    return kUsage;
  if (vm.count("max-iterations")) {
    if (std::string err = setLimit(Limit::Iterations, maxIterations); !err.empty() || maxIterations < 1) {
      std::cerr << "dnnc: error: --max-iterations takes a positive count\n";
      return kUsage;
    }
  }
  if (std::string err = parseBinding(bind, o.binding); !err.empty()) {
    std::cerr << "dnnc: error: " << err << "\n";
    return kUsage;
  }
  if (!readNamedFiles(inputs, "--input", o.inputs))
    return kUsage;
  if (std::string err = api::checkDeviceName(o.device); !err.empty()) {
    std::cerr << "dnnc: error: " << err << "\n";
    return kUsage;
  }
  if (o.threads > 0)
    rt::ThreadPool::setGlobalThreads(static_cast<unsigned>(o.threads));
  if (vm.count("tune-table")) {
    try {
      rt::setGemmTableFile(tuneTable);
    } catch (const DataError &e) {
      std::cerr << "dnnc: error: " << e.what() << "\n";
      return kUserError;
    }
  }
  if (rt::isArtifact(c.file))
    return runArtifact(c.file, o);
  Program p;
  DiagnosticEngine diags(p.sources());
  if (!loadProgram(p, c, diags))
    return kUserError;
  return runModel(p, o);
}

int cmdTrain(int argc, char **argv) {
  CommonOptions c;
  PassFlags flags;
  TrainOptions o;
  std::string threads, optimizer = "sgd";
  std::vector<std::string> data;
  int threadCount = 0;
  po::options_description desc = commonOptions(c);
  desc.add_options()("model", po::value(&o.model), "the model to train (default: main, or the first)")(
      "data", po::value(&data)->composing(),
      "NAME=FILE.npy for each input, the first axis the sample axis (repeatable); or a folder DIR of per-step batches "
      "DIR/000000/NAME.npy, DIR/000001/NAME.npy, ... each with its own shapes")(
      "batch", po::value(&o.batch), "samples per step (default 32; the last batch of an epoch may be shorter)")(
      "epochs", po::value(&o.epochs), "passes over the data (default 1)")(
      "steps", po::value(&o.steps), "steps to run instead, cycling through the data")(
      "optimizer", po::value(&optimizer), "sgd, momentum, adam or adamw (PyTorch's semantics; default sgd)")(
      "lr", po::value(&o.lr), "learning rate (default 1e-3)")(
      "weight-decay", po::value(&o.optimizer.weightDecay), "L2 penalty (decoupled for adamw; default 0)")(
      "momentum", po::value(&o.optimizer.momentum), "momentum for --optimizer momentum (default 0.9)")(
      "weights", po::value(&o.weights)->composing(),
      "initial params from .safetensors files or a *.index.json shard index, as for dnnc run (repeatable; default: each "
      "param's initializer)")("strict", "a tensor of the weights that no param uses is an error (default: one note)")(
      "save", po::value(&o.save),
      "write the trained params to OUT, a .safetensors file that dnnc run --weights reads, and the optimizer state and step "
      "to OUT.state (for --resume); after the last step, and every --save-every steps")(
      "save-every", po::value(&o.saveEvery), "also write the --save checkpoint every K steps")(
      "resume", po::value(&o.resume), "continue from a checkpoint's OUT.state file (--steps/--epochs count from the start)")(
      "verbose", "report on stderr how many kernels were compiled, and that no step after the first compiled more or "
      "allocated an output")(
      "no-in-place", "return the updated params and optimizer state as new tensors each step and copy them back, instead "
      "of updating them in place (to compare against; the results are bit for bit the same)")(
      "device", po::value(&o.device), "auto, cpu, cuda, ref or cuda-sim, as for dnnc run")(
      "seed", po::value<std::string>(), "seed for the initializers (default 0)")(
      "threads", po::value(&threads), "CPU threads, 1 to 1024 (default: DNNC_NUM_THREADS, else one per core)")(
      "log-every", po::value(&o.logEvery), "log every K steps (default 1)")("json", "log JSON lines")(
      "profile", po::value(&o.profile)->implicit_value("time"),
      "after the last step, print each kernel's and host op's calls, time, share, rate and source lines over the steps "
      "after the first, as dnnc run --profile does (--profile=order: in program order)");
  desc.add(passOptions(flags));
  po::variables_map vm;
  const char *usage = "usage: dnnc train FILE --data NAME=X.npy...|DIR [--batch N] (--epochs E | --steps S) "
                      "[--optimizer sgd|momentum|adam|adamw] [--lr 1e-3] [--weights INIT] [--save OUT [--save-every K]] "
                      "[--resume OUT.state] [--recompute auto|none|all] [--memory-budget 8GiB] [--device ...]\n";
  if (int rc = parseOptions(argc, argv, desc, usage, true, c, vm); rc >= 0)
    return rc;
  o.json = vm.count("json") > 0;
  o.strict = vm.count("strict") > 0;
  o.verbose = vm.count("verbose") > 0;
  o.inPlace = vm.count("no-in-place") == 0;
  o.optimizerName = optimizer;
  std::optional<ir::Optimizer> kind = ir::parseOptimizer(optimizer);
  std::string err;
  if (!kind)
    err = ir::unknownOptimizer(optimizer);
  else if (o.batch < 1 || o.epochs < 1 || o.steps < 0 || (vm.count("steps") && o.steps < 1) || o.logEvery < 1 || o.saveEvery < 0)
    err = "--batch, --epochs, --steps and --log-every take positive counts, --save-every a count";
  else if (vm.count("epochs") && vm.count("steps"))
    err = "--epochs and --steps both say how long to train: give one";
  else if (!o.resume.empty() && !o.weights.empty())
    err = "--resume continues from the params in its checkpoint: it takes no --weights";
  else if (o.saveEvery > 0 && o.save.empty())
    err = "--save-every needs --save OUT (where the checkpoints go)";
  else if (!std::isfinite(o.lr) || o.lr <= 0 || !std::isfinite(o.optimizer.weightDecay) || o.optimizer.weightDecay < 0 ||
           !std::isfinite(o.optimizer.momentum) || o.optimizer.momentum < 0)
    err = "--lr takes a positive number, --weight-decay and --momentum non-negative ones";
  else if (data.empty())
    err = "no --data: give NAME=FILE.npy for each input of the model";
  else if (!api::checkDeviceName(o.device).empty())
    err = api::checkDeviceName(o.device);
  else if (!profileOptionError(o.profile, o.device).empty())
    err = profileOptionError(o.profile, o.device);
  if (!err.empty()) {
    std::cerr << "dnnc: error: " << err << "\n";
    return kUsage;
  }
  o.optimizer.kind = kind->kind;
  if (data.size() == 1 && data[0].find('=') == std::string::npos) { // --data DIR
    o.dataDir = data[0];
    if (vm.count("batch")) {
      std::cerr << "dnnc: error: --batch slices NAME=X.npy data; the batches of --data " << o.dataDir << " are its step folders\n";
      return kUsage;
    }
  }
  if (!readPassOptions(vm, flags, o.compile.passes) || !readThreads(vm, threads, threadCount) || !readSeed(vm, o.seed) ||
      (o.dataDir.empty() && !readNamedFiles(data, "--data", o.data)))
    return kUsage;
  if (threadCount > 0)
    rt::ThreadPool::setGlobalThreads(static_cast<unsigned>(threadCount));
  Program p;
  DiagnosticEngine diags(p.sources());
  if (!loadProgram(p, c, diags))
    return kUserError;
  return trainModel(p, o);
}

int cmdProfile(int argc, char **argv) {
  CommonOptions c;
  PassFlags flags;
  ProfileOptions o;
  std::string bind, optimizer;
  po::options_description desc = commonOptions(c);
  desc.add_options()("model", po::value(&o.model), "the model to profile (default: main, or the first)")(
      "bind", po::value(&bind), "the binding to profile at: every dim the inputs name, e.g. B=8,T=512")(
      "train", "profile one training step (as dnnc train compiles it) instead of one call")(
      "optimizer", po::value(&optimizer), "with --train: sgd, momentum, adam or adamw (default sgd, as for dnnc train)")(
      "svg", po::value(&o.svg),
      "also draw live bytes over the op order to this SVG file (bands per category, the peak; with --train the forward and "
      "backward shaded, and with --recompute auto the curve of --recompute none beside it)")(
      "json", "print one JSON object instead of the tables")(
      "device", po::value(&o.device), "cpu (the default) or cuda-sim: where the step runs to be measured")(
      "seed", po::value<std::string>(), "seed for the random inputs and params (default 0)");
  desc.add(passOptions(flags));
  po::variables_map vm;
  const char *usage = "usage: dnnc profile FILE [--bind B=8,T=512] [--train [--optimizer sgd|momentum|adam|adamw]] "
                      "[--recompute none|auto|all] [--memory-budget 8GiB] [--svg OUT.svg] [--json] [--device cpu|cuda-sim]\n";
  if (int rc = parseOptions(argc, argv, desc, usage, true, c, vm); rc >= 0)
    return rc;
  o.train = vm.count("train") > 0;
  o.json = vm.count("json") > 0;
  std::string err;
  if (!o.train && vm.count("optimizer")) // (--recompute also acts on a grad in the model, as for dnnc run)
    err = "--optimizer is for a training step: it needs --train";
  else if (vm.count("optimizer") && !ir::parseOptimizer(optimizer))
    err = ir::unknownOptimizer(optimizer);
  else if (o.device == "ref")
    err = "--device ref: the reference interpreter has no memory plan or allocation counters to measure; profile on cpu or cuda-sim";
  else if (o.device != "cpu" && o.device != "cuda-sim" && o.device != "cuda")
    err = fmt::format("unknown device '{}' for dnnc profile (devices: cpu, cuda-sim, cuda)", o.device);
  else if (const backend::Target *t = backend::findTarget(o.device); !t || !t->probe(o.compile.target).empty())
    err = fmt::format("--device {}: {}", o.device, t ? t->probe(o.compile.target) : "no such target");
  else if (!o.svg.empty() && (o.svg.size() < 5 || o.svg.substr(o.svg.size() - 4) != ".svg"))
    err = fmt::format("--svg {}: the chart is an SVG file; give a name ending in .svg", o.svg);
  if (err.empty())
    err = parseBinding(bind, o.binding);
  if (!err.empty()) {
    std::cerr << "dnnc: error: " << err << "\n";
    return kUsage;
  }
  if (!readSeed(vm, o.seed))
    return kUsage;
  if (vm.count("optimizer")) {
    o.optimizerName = optimizer;
    o.optimizer = *ir::parseOptimizer(optimizer);
  }
  if (!readPassOptions(vm, flags, o.compile.passes))
    return kUsage;
  Program p;
  DiagnosticEngine diags(p.sources());
  if (!loadProgram(p, c, diags))
    return kUserError;
  return profileMemory(p, o);
}

int cmdBuild(int argc, char **argv) {
  CommonOptions c;
  PassFlags flags;
  std::string out, targetName = "cpu", model;
  backend::CompileOptions options;
  po::options_description desc = commonOptions(c);
  desc.add_options()("output,o", po::value(&out)->required(), "the artifact to write")(
      "target", po::value(&targetName), "cpu (this host, the default) or cuda")(
      "arch", po::value(&options.target.arch), "the GPU architecture for cuda (default sm_80)")(
      "model", po::value(&model), "the model to build (default: main, or the first)")(
      "no-memory-plan", "allocate every intermediate on its own (no planned arena)");
  desc.add(passOptions(flags));
  po::variables_map vm;
  const char *usage = "usage: dnnc build FILE -o OUT [--target cpu|cuda] [--arch sm_90] [--model M]\n";
  if (int rc = parseOptions(argc, argv, desc, usage, true, c, vm); rc >= 0)
    return rc;
  const backend::Target *target = artifactTarget(targetName);
  if (!target || !readPassOptions(vm, flags, options.passes) || !writesApart("-o", out, {{"the source being built", c.file}}))
    return kUsage;
  options.memoryPlan = vm.count("no-memory-plan") == 0;
  Program p;
  DiagnosticEngine diags(p.sources());
  if (!loadProgram(p, c, diags))
    return kUserError;
  std::string err;
  ModelInfo *m = selectModel(p, model, err);
  if (!m) {
    std::cerr << "dnnc: error: " << err << "\n";
    return kUserError;
  }
  if (!writesNoInput("-o", out)) // an imported module
    return kUsage;
  try {
    backend::buildArtifact(*m->graph, *target, options, out);
  } catch (const DataError &e) {
    std::cerr << "dnnc: error: " << e.what() << "\n";
    return kUserError;
  }
  std::cout << fmt::format("built model '{}' for {} -> {}\n", m->name, target->builtFor(options.target), out);
  return kOk;
}

int cmdImport(int argc, char **argv) {
  CommonOptions c;
  std::string out, weightsOut, modelName = "main";
  po::options_description desc("options");
  desc.add_options()("help,h", "show this help")("output,o", po::value(&out), "the .dnn file to write")(
      "weights-out", po::value(&weightsOut), "the .safetensors file for the params (default: OUT with .safetensors)")(
      "model-name", po::value(&modelName), "the model's name in the .dnn file (default main)");
  po::variables_map vm;
  const char *usage = "usage: dnnc import MODEL.onnx -o MODEL.dnn [--weights-out W.safetensors] [--model-name M]\n";
  if (int rc = parseOptions(argc, argv, desc, usage, true, c, vm); rc >= 0)
    return rc;
  if (out.empty()) {
    std::cerr << "dnnc: error: no -o OUT.dnn\n" << usage << desc;
    return kUsage;
  }
  std::string weightsOption = weightsOut.empty() ? "the weights file (-o's name with .safetensors)" : "--weights-out";
  if (weightsOut.empty())
    weightsOut = std::filesystem::path(out).replace_extension(".safetensors").string();
  if (!writesApart("-o", out, {{"the model being imported", c.file}}) ||
      !writesApart(weightsOption, weightsOut, {{"the model being imported", c.file}, {"the .dnn file -o writes", out}}))
    return kUsage;
  return importOnnx(c.file, out, weightsOut, modelName);
}

// dnnc tune: times one task of each GEMM variant at a few depths and fills on one thread,
// fits the cost model (api/GemmTune.h) and writes the per-CPU table `run` reads.
int cmdTune(int argc, char **argv) {
  CommonOptions c;
  std::string out;
  double minTime = 0.02;
  po::options_description desc("options");
  desc.add_options()("help,h", "show this help")(
      "output,o", po::value(&out), "where the table goes (default: DNNC_TUNE_TABLE, else ~/.cache/dnnc/tune-<cpu>.json)")(
      "min-time", po::value(&minTime), "seconds each measurement repeats for, 0.001 to 10 (default 0.02)")(
      "print", "print the table instead of writing it");
  po::variables_map vm;
  const char *usage = "usage: dnnc tune [-o TABLE.json] [--min-time S] [--print]\n";
  if (int rc = parseOptions(argc, argv, desc, usage, false, c, vm); rc >= 0)
    return rc;
  if (!c.file.empty()) {
    std::cerr << "dnnc: error: dnnc tune takes no input file ('" << c.file << "')\n" << usage;
    return kUsage;
  }
  if (!(minTime >= 0.001 && minTime <= 10)) {
    std::cerr << "dnnc: error: --min-time takes seconds from 0.001 to 10\n";
    return kUsage;
  }
  api::TuneReport r;
  try {
    api::GemmTimer timer;
    r = api::tuneGemm(timer, minTime, [](const rt::GemmVariant &v) {
      std::cerr << fmt::format("timing {} ({} rows x {} columns per task{})\n", v.name, v.rows, v.cols, v.packA ? ", A packed" : "");
    });
  } catch (const DataError &e) {
    std::cerr << "dnnc: error: " << e.what() << "\n";
    return kUserError;
  }
  std::string text = rt::gemmTableToJson(r.table);
  if (vm.count("print")) {
    std::cout << text;
  } else {
    if (out.empty())
      out = rt::defaultGemmTablePath();
    std::error_code ec;
    if (std::filesystem::path parent = std::filesystem::path(out).parent_path(); !parent.empty())
      std::filesystem::create_directories(parent, ec);
    if (int rc = writeOutput(out, text); rc != kOk)
      return rc;
    std::cout << fmt::format("wrote {}\n", out);
  }
  std::cout << fmt::format("tuned {} GEMM variants on {} in {:.2f} s ({} measurements)\n", r.table.costs.size(), r.table.cpu,
                           r.seconds, r.measurements);
  return kOk;
}

int cmdRepl(int argc, char **argv) {
  CommonOptions c;
  PassFlags flags;
  po::options_description desc = commonOptions(c);
  desc.add(passOptions(flags));
  po::variables_map vm;
  if (int rc = parseOptions(argc, argv, desc, "usage: dnnc repl [FILE] [-I DIR]...\n", false, c, vm); rc >= 0)
    return rc;
  ir::PassOptions passes; // for :mem, which plans memory as dnnc run does
  if (!readPassOptions(vm, flags, passes))
    return kUsage;
  return runRepl(c.file, c.includes, passes);
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::cerr << kUsageText;
    return kUsage;
  }
  std::string cmd = argv[1];
  try {
    if (cmd == "--version" || cmd == "version") {
      std::cout << "dnnc " << DNNC_VERSION << "\n";
      return kOk;
    }
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
      std::cout << kUsageText;
      return kOk;
    }
    try { // the environment, before any command reads a file by it (a pipe's error was tagged [import])
      rt::memoryLimit();
    } catch (const DataError &e) {
      std::cerr << "dnnc: error: " << e.what() << "\n";
      return kUserError;
    }
    if (cmd == "check")
      return cmdCheck(argc - 1, argv + 1);
    if (cmd == "shapes")
      return cmdShapes(argc - 1, argv + 1);
    if (cmd == "emit")
      return cmdEmit(argc - 1, argv + 1);
    if (cmd == "opt")
      return cmdOpt(argc - 1, argv + 1);
    if (cmd == "repl")
      return cmdRepl(argc - 1, argv + 1);
    if (cmd == "run")
      return cmdRun(argc - 1, argv + 1);
    if (cmd == "build")
      return cmdBuild(argc - 1, argv + 1);
    if (cmd == "train")
      return cmdTrain(argc - 1, argv + 1);
    if (cmd == "profile")
      return cmdProfile(argc - 1, argv + 1);
    if (cmd == "builtins") {
      bool markdown = argc == 3 && std::string(argv[2]) == "--markdown";
      if (argc > 3 || (argc == 3 && !markdown)) {
        std::cerr << "dnnc: error: unknown option '" << argv[2] << "'\nusage: dnnc builtins [--markdown]\n";
        return kUsage;
      }
      return printBuiltins(markdown, std::cout);
    }
    if (cmd == "import")
      return cmdImport(argc - 1, argv + 1);
    if (cmd == "tune")
      return cmdTune(argc - 1, argv + 1);
    std::cerr << "dnnc: error: unknown command '" << cmd << "'\n" << kUsageText;
    return kUsage;
  } catch (const std::exception &e) {
    std::cerr << "dnnc: internal error: " << e.what()
              << "\nThis is a bug in dnnc; please report it with the input that caused it.\n";
    return kInternal;
  }
}
