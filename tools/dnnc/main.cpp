// dnnc: the command-line driver (check, shapes, emit, repl).
#include "frontend/Ast.h"
#include "backend/Build.h"
#include "backend/llvm/CpuBackend.h"
#include "runtime/Artifact.h"
#include "base/TensorIO.h"
#include "runtime/ThreadPool.h"
#include "base/Limits.h"
#include "backend/llvm/NvptxBackend.h"
#include "backend/gpu/GpuMapping.h"
#include "backend/lower/Lower.h"
#include "ir/transforms/Pipeline.h"
#include "ir/transforms/MemoryPlan.h"
#include "frontend/Parser.h"
#include "tools/dnnc/Driver.h"

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

namespace po = boost::program_options;
using namespace dnnc;
using namespace dnnc::tool;

namespace {

const char *kUsageText = R"(usage: dnnc <command> [options]

commands:
  check FILE                      parse and type-check
  shapes FILE [--model M] [--bind B=4,T=16] [--json]
                                  every named value with its type and shape class
  emit FILE --emit=ast|ir|opt|kernels|llvm|ptx|plan [--target cpu|cuda] [--arch sm_90] [--no-fuse] [-o OUT]
                                  print a compiler stage as text
  build FILE -o OUT [--target cpu|cuda] [--arch sm_90]
                                  compile a model into an artifact the runtime loads
  run FILE [--weights W] [--input NAME=X.npy]... [--bind B=2] [--out DIR] [--device auto|cpu|cuda|ref] [--seed N]
                                  compile a model (or load an artifact) and run it
  repl [FILE]                     the shape-query REPL

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

// --target: cpu or cuda; false (with the error printed) otherwise.
bool knownTarget(const std::string &target) {
  if (target == "cpu" || target == "cuda")
    return true;
  std::cerr << "dnnc: error: unknown target '" << target << "' (targets: cpu, cuda)\n";
  return false;
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
  po::options_description desc = commonOptions(c);
  po::variables_map vm;
  if (int rc = parseOptions(argc, argv, desc, "usage: dnnc check FILE [-I DIR]...\n", true, c, vm); rc >= 0)
    return rc;
  Program p;
  DiagnosticEngine diags(p.sources());
  return loadProgram(p, c, diags) ? kOk : kUserError;
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
  std::string stage, out, target = "cpu", arch = "sm_80";
  po::options_description desc = commonOptions(c);
  desc.add_options()("emit", po::value(&stage)->required(), "the stage: ast, ir, opt (after fusion), kernels, llvm, ptx or plan (the memory plan)")(
      "target", po::value(&target), "for --emit=llvm: cpu (this host, the default) or cuda")(
      "arch", po::value(&arch), "the GPU architecture for PTX (default sm_80)")("no-fuse", "one kernel per op (no fusion)")(
      "output,o", po::value(&out),
                                                                              "write to this file, not stdout");
  po::variables_map vm;
  const char *usage = "usage: dnnc emit FILE --emit=ast|ir|opt|kernels|llvm|ptx|plan [--target cpu|cuda] [--arch sm_90] [--no-fuse] [-o OUT]\n";
  if (int rc = parseOptions(argc, argv, desc, usage, true, c, vm); rc >= 0)
    return rc;
  const std::vector<std::string> stages{"ast", "ir", "opt", "kernels", "llvm", "ptx", "plan"};
  if (std::find(stages.begin(), stages.end(), stage) == stages.end()) {
    std::cerr << "dnnc: error: unknown stage '" << stage << "' for --emit (this build emits: ast, ir, opt, kernels, llvm, ptx, plan)\n";
    return kUsage;
  }
  if (!knownTarget(target))
    return kUsage;
  Program p;
  DiagnosticEngine diags(p.sources());
  if (!loadProgram(p, c, diags))
    return kUserError;
  std::string text;
  if (stage == "ast") {
    DiagnosticEngine parseDiags(p.sources());
    auto m = parseModule(p.sources(), p.sources().find(c.file), parseDiags);
    m->name = std::filesystem::path(c.file).stem().string();
    text = ast::print(*m);
  } else if (stage == "ir") {
    for (const ModelInfo &m : p.models())
      text += ir::print(*m.graph);
  } else {
    for (ModelInfo &m : p.models())
      ir::optimize(*m.graph, {vm.count("no-fuse") == 0, true});
    try {
      for (const ModelInfo &m : p.models()) {
        if (stage == "opt") {
          text += ir::print(*m.graph);
          continue;
        }
        lower::LoweredGraph lowered = lower::lowerGraph(*m.graph, target == "cuda" || stage == "ptx" ? lower::kGpuSchedule : lower::kCpuSchedule);
        std::vector<const kir::Kernel *> kernels = lowered.kernelPointers();
        if (stage == "kernels")
          for (const kir::Kernel *k : kernels) // on the GPU, each with how it maps onto the grid
            text += (target == "cuda" ? "// " + gpu::describeLaunch(*k) + "\n" : "") + kir::print(*k);
        if (stage == "plan") {
          text += ir::print(lowered.memoryPlan(*m.graph), *m.graph);
        } else if (stage == "ptx" || (stage == "llvm" && target == "cuda")) {
          backend::PtxModule ptx = backend::compilePtx(kernels, arch);
          text += stage == "ptx" ? ptx.ptx : ptx.llvmIR;
        } else if (stage == "llvm") {
          text += backend::CpuModule::compile(kernels)->llvmIR();
        }
      }
    } catch (const DataError &e) {
      std::cerr << "dnnc: error: " << e.what() << "\n";
      return kUserError;
    }
  }
  return writeOutput(out, text);
}

int cmdRun(int argc, char **argv) {
  CommonOptions c;
  RunOptions o;
  std::string bind, threads;
  int64_t maxIterations = 0;
  std::vector<std::string> inputs;
  po::options_description desc = commonOptions(c);
  desc.add_options()("model", po::value(&o.model), "the model to run (default: main, or the first)")(
      "weights", po::value(&o.weights), "a .safetensors file with every param, by name")(
      "input", po::value(&inputs)->composing(), "NAME=FILE.npy for an input (repeatable); others are random")(
      "bind", po::value(&bind), "bind dims, e.g. B=2,T=8 (sizes for random inputs)")(
      "out", po::value(&o.outDir), "where out0.npy, out1.npy, ... go (default: out)")(
      "device", po::value(&o.device), "auto (the GPU if one works, else the CPU), cpu, cuda, ref (the reference interpreter), or cuda-sim (the GPU kernels on a CPU simulator, for testing)")(
      "seed", po::value(&o.seed), "seed for random weights and inputs (default 0)")(
      "threads", po::value(&threads), "CPU threads, 1 to 1024 (default: DNNC_NUM_THREADS, else one per core)")(
      "max-iterations", po::value(&maxIterations),
      "stop with an error when a while loop runs N iterations and its condition still holds (default: no limit)")(
      "repeat", po::value(&o.repeat), "run N more times and report the median time with --stats")(
      "no-memory-plan", "allocate every intermediate on its own (no planned arena)")(
      "no-fuse", "one kernel per op (no fusion)")("stats", "print the dims, kernels, ops run and arena bytes");
  po::variables_map vm;
  const char *usage = "usage: dnnc run FILE [--weights W.safetensors] [--input NAME=X.npy]... [--bind B=2,T=8] "
                      "[--out DIR] [--device auto|cpu|cuda|ref] [--seed N] [--threads N]\n";
  if (int rc = parseOptions(argc, argv, desc, usage, true, c, vm); rc >= 0)
    return rc;
  o.stats = vm.count("stats") > 0;
  o.memoryPlan = vm.count("no-memory-plan") == 0;
  o.fuse = vm.count("no-fuse") == 0;
  if (o.repeat < 0 || o.repeat > 1000000) {
    std::cerr << "dnnc: error: --repeat takes a count from 0 to 1000000\n";
    return kUsage;
  }
  if (vm.count("threads")) {
    unsigned n = 0;
    if (std::string err = rt::ThreadPool::parseThreads(threads, "--threads", n); !err.empty()) {
      std::cerr << "dnnc: error: " << err << "\n";
      return kUsage;
    }
    o.threads = static_cast<int>(n);
  } else if (const char *env = std::getenv("DNNC_NUM_THREADS"); env && *env) {
    unsigned n = 0;
    if (std::string err = rt::ThreadPool::parseThreads(env, "DNNC_NUM_THREADS", n); !err.empty()) {
      std::cerr << "dnnc: error: " << err << "\n";
      return kUsage;
    }
  }
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
  for (const std::string &in : inputs) {
    size_t eq = in.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == in.size()) {
      std::cerr << "dnnc: error: --input takes NAME=FILE.npy, not '" << in << "'\n";
      return kUsage;
    }
    o.inputs.emplace_back(in.substr(0, eq), in.substr(eq + 1));
  }
  if (o.device != "auto" && o.device != "ref" && o.device != "cpu" && o.device != "cuda" && o.device != "cuda-sim") {
    std::cerr << "dnnc: error: unknown device '" << o.device << "' (devices: auto, cpu, cuda, ref, cuda-sim)\n";
    return kUsage;
  }
  if (o.threads > 0)
    rt::ThreadPool::setGlobalThreads(static_cast<unsigned>(o.threads));
  if (rt::isArtifact(c.file))
    return runArtifact(c.file, o);
  Program p;
  DiagnosticEngine diags(p.sources());
  if (!loadProgram(p, c, diags))
    return kUserError;
  return runModel(p, o);
}

int cmdBuild(int argc, char **argv) {
  CommonOptions c;
  std::string out, target = "cpu", arch = "sm_80", model;
  po::options_description desc = commonOptions(c);
  desc.add_options()("output,o", po::value(&out)->required(), "the artifact to write")(
      "target", po::value(&target), "cpu (this host, the default) or cuda")("arch", po::value(&arch),
                                                                            "the GPU architecture for cuda (default sm_80)")(
      "model", po::value(&model), "the model to build (default: main, or the first)")(
      "no-memory-plan", "allocate every intermediate on its own (no planned arena)")("no-fuse", "one kernel per op (no fusion)");
  po::variables_map vm;
  const char *usage = "usage: dnnc build FILE -o OUT [--target cpu|cuda] [--arch sm_90] [--model M]\n";
  if (int rc = parseOptions(argc, argv, desc, usage, true, c, vm); rc >= 0)
    return rc;
  if (!knownTarget(target))
    return kUsage;
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
  try {
    ir::optimize(*m->graph, {vm.count("no-fuse") == 0, true});
    backend::buildArtifact(*m->graph, target, arch, out, vm.count("no-memory-plan") == 0);
  } catch (const DataError &e) {
    std::cerr << "dnnc: error: " << e.what() << "\n";
    return kUserError;
  }
  std::cout << fmt::format("built model '{}' for {} -> {}\n", m->name, target == "cuda" ? arch : "this CPU", out);
  return kOk;
}

int cmdRepl(int argc, char **argv) {
  CommonOptions c;
  po::options_description desc = commonOptions(c);
  po::variables_map vm;
  if (int rc = parseOptions(argc, argv, desc, "usage: dnnc repl [FILE] [-I DIR]...\n", false, c, vm); rc >= 0)
    return rc;
  return runRepl(c.file, c.includes);
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
    if (cmd == "check")
      return cmdCheck(argc - 1, argv + 1);
    if (cmd == "shapes")
      return cmdShapes(argc - 1, argv + 1);
    if (cmd == "emit")
      return cmdEmit(argc - 1, argv + 1);
    if (cmd == "repl")
      return cmdRepl(argc - 1, argv + 1);
    if (cmd == "run")
      return cmdRun(argc - 1, argv + 1);
    if (cmd == "build")
      return cmdBuild(argc - 1, argv + 1);
    std::cerr << "dnnc: error: unknown command '" << cmd << "'\n" << kUsageText;
    return kUsage;
  } catch (const std::exception &e) {
    std::cerr << "dnnc: internal error: " << e.what()
              << "\nThis is a bug in dnnc; please report it with the input that caused it.\n";
    return kInternal;
  }
}
