// The host back end: kernels emitted by KernelEmitter, the O3 pipeline for this machine,
// and in-process compilation with ORC LLJIT.
#include "backend/llvm/CpuBackend.h"

#include "runtime/GpuSimulator.h"

#include "backend/llvm/GemmMicroKernel.h"
#include "backend/llvm/KernelEmitter.h"
#include "backend/llvm/ObjectCache.h"
#include "base/Error.h"

#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Linker/Linker.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <fmt/format.h>

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <numeric>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>

namespace dnnc::backend {
namespace {

void initializeLLVM() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

} // namespace

struct CpuModule::Impl {
  std::unique_ptr<llvm::orc::LLJIT> jit; // null when every code was compiled before
  // Each kernel's code, by its symbol (a hash of the code, codeSymbol below): kernels with
  // the same code have the same symbol.
  std::unordered_map<std::string, std::string> symbols;
  // Codes an earlier module of this process compiled, kept alive, by symbol.
  std::unordered_map<std::string, std::shared_ptr<const Impl>> borrowed;

  KernelFn code(const std::string &symbol) const {
    if (auto it = borrowed.find(symbol); it != borrowed.end())
      return it->second->code(symbol);
    if (!jit)
      throw InternalError("code " + symbol + " was not compiled");
    auto sym = jit->lookup(symbol);
    if (!sym)
      throw InternalError("code " + symbol + " did not compile: " + errorText(sym.takeError()));
    return sym->toPtr<KernelFn>();
  }
  KernelFn lookup(const std::string &name) const {
    auto it = symbols.find(name);
    if (it == symbols.end())
      throw InternalError("kernel " + name + " was not compiled");
    return code(it->second);
  }
};

CpuModule::CpuModule(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
CpuModule::~CpuModule() = default;

namespace {

// The host's target description: position-independent code in the small code model, what
// LLJIT asks for when it links with JITLink (x86-64 ELF) and what a shared object needs.
// (A JIT target machine left to its defaults would use the large code model: every
// constant and call through a 64-bit absolute address.)
llvm::orc::JITTargetMachineBuilder hostTarget() {
  initializeLLVM();
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb)
    throw InternalError("LLVM cannot describe this host: " + errorText(jtmb.takeError()));
  jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  jtmb->setRelocationModel(llvm::Reloc::PIC_);
  jtmb->setCodeModel(llvm::CodeModel::Small);
  return std::move(*jtmb);
}

// Distinct codes optimized and compiled by LLVM in this process (not those from the cache).
std::atomic<size_t> distinctCodesCompiled{0};

std::unique_ptr<llvm::TargetMachine> targetMachine(llvm::orc::JITTargetMachineBuilder &jtmb) {
  auto tm = jtmb.createTargetMachine();
  if (!tm)
    throw InternalError("LLVM has no target machine for this host: " + errorText(tm.takeError()));
  return std::move(*tm);
}

std::unique_ptr<llvm::Module> emptyModule(llvm::LLVMContext &ctx, const llvm::TargetMachine &tm) {
  auto module = std::make_unique<llvm::Module>("dnnc", ctx);
  module->setDataLayout(tm.createDataLayout());
  module->setTargetTriple(tm.getTargetTriple().str());
  return module;
}

std::unique_ptr<llvm::LLVMContext> newContext(bool names) {
  auto ctx = std::make_unique<llvm::LLVMContext>();
  // Optimization remarks ("loop not vectorized") are not the user's business.
  ctx->setDiagnosticHandlerCallBack([](const llvm::DiagnosticInfo *, void *) {});
  ctx->setDiscardValueNames(!names);
  return ctx;
}

// A module holding kernel `k` alone. `lanes`: the CPU kernels' vector width.
std::unique_ptr<llvm::Module> moduleOf(const kir::Kernel &k, llvm::LLVMContext &ctx, const llvm::TargetMachine &tm,
                                       bool simulatedGpu, unsigned lanes) {
  auto alone = emptyModule(ctx, tm);
  if (simulatedGpu)
    emitSimulatedGpuKernel(*alone, k);
  else
    emitCpuKernel(*alone, k, lanes);
  return alone;
}

// A module for LLVM to optimize and compile, in an LLVM context of its own, so that modules
// optimize and compile on threads of their own.
struct HostModule {
  std::unique_ptr<llvm::LLVMContext> ctx;
  std::unique_ptr<llvm::Module> module;
};

// A distinct code to compile: its symbol, a kernel with it or the GEMM micro-kernel it is,
// and its key's bytes (a measure of the work).
struct Code {
  std::string symbol;
  const kir::Kernel *kernel;
  MicroKernelShape microKernel;
  size_t keyBytes;
};

// The micro-kernels that the kernels of `m` call, by symbol (GemmMicroKernel.h).
std::map<std::string, MicroKernelCode> microKernelsCalled(const llvm::Module &m) {
  std::map<std::string, MicroKernelCode> called;
  for (const llvm::Function &f : m)
    if (f.isDeclaration())
      if (std::optional<MicroKernelCode> code = microKernelNamed(f.getName().str()))
        called.emplace(f.getName().str(), *code);
  return called;
}

// The codes in one module, each under its symbol. Not yet optimized.
HostModule moduleOfCodes(const std::vector<Code> &codes, const llvm::TargetMachine &tm, bool simulatedGpu, unsigned lanes) {
  HostModule host{newContext(false), nullptr};
  host.module = emptyModule(*host.ctx, tm);
  for (const Code &code : codes) {
    if (!code.kernel) {
      defineMicroKernel(*host.module, code.microKernel, code.symbol);
      continue;
    }
    auto alone = moduleOf(*code.kernel, *host.ctx, tm, simulatedGpu, lanes);
    alone->getFunction(code.kernel->name)->setName(code.symbol);
    if (llvm::Linker::linkModules(*host.module, std::move(alone)))
      throw InternalError("LLVM cannot link kernel " + code.kernel->name + " into the module");
  }
  return host;
}

size_t keyBytes(const std::vector<Code> &codes) {
  size_t bytes = 0;
  for (const Code &code : codes)
    bytes += code.keyBytes;
  return bytes;
}

// How many threads this process may run at once: the cores it may run on, 16 at most.
size_t coresAllowed() {
  cpu_set_t allowed;
  size_t cores = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : std::thread::hardware_concurrency();
  return std::clamp<size_t>(cores, 1, 16);
}

// Each object's codes as an object file for the host, in their order: from the object
// cache when it has it (named by the codes' symbols, each a hash of the code's key, and
// `tm`'s target), else built, then optimized (O3) and compiled by LLVM on a pool of threads
// (one per core), and cached. The modules are built on the calling thread: emitting a
// kernel may make dims in the process's one symbolic context (ir/sym), which has no lock.
std::vector<std::string> objectFiles(const std::vector<std::vector<Code>> &objectCodes, llvm::orc::JITTargetMachineBuilder &jtmb,
                                     const llvm::TargetMachine &tm, bool simulatedGpu, unsigned lanes) {
  std::optional<ObjectCache> cache = ObjectCache::fromEnvironment();
  std::string target = fmt::format("{}\n{}\n{}\nrelocation {}\n", tm.getTargetTriple().str(), tm.getTargetCPU().str(),
                                   tm.getTargetFeatureString().str(), static_cast<int>(tm.getRelocationModel()));
  // The largest modules first: the threads then finish together.
  std::vector<size_t> bySize(objectCodes.size());
  std::iota(bySize.begin(), bySize.end(), 0);
  std::stable_sort(bySize.begin(), bySize.end(),
                   [&](size_t a, size_t b) { return keyBytes(objectCodes[a]) > keyBytes(objectCodes[b]); });
  std::vector<std::string> objects(objectCodes.size()), keys;
  std::vector<size_t> toCompile;
  for (size_t i : bySize) {
    std::string contents = target;
    for (const Code &code : objectCodes[i])
      contents += "code " + code.symbol + "\n";
    std::string key = cache ? cache->keyOf(contents) : "";
    if (std::optional<std::string> object = cache ? cache->load(key) : std::nullopt) {
      objects[i] = std::move(*object);
      continue;
    }
    toCompile.push_back(i);
    keys.push_back(std::move(key));
  }
  std::vector<std::unique_ptr<llvm::TargetMachine>> machines; // one per worker
  for (size_t w = 0; w < std::min(toCompile.size(), coresAllowed()); ++w)
    machines.push_back(targetMachine(jtmb));
  std::vector<HostModule> modules;
  for (size_t i : toCompile)
    modules.push_back(moduleOfCodes(objectCodes[i], tm, simulatedGpu, lanes));
  std::vector<std::exception_ptr> failures(toCompile.size());
  std::atomic<size_t> next{0};
  auto work = [&](llvm::TargetMachine &tm) {
    for (size_t j; (j = next++) < toCompile.size();)
      try {
        llvm::Module &m = *modules[j].module;
        optimize(m, tm);
        llvm::SmallString<0> object;
        llvm::raw_svector_ostream os(object);
        llvm::legacy::PassManager pm;
        if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
          throw InternalError("LLVM cannot emit object code for this host");
        pm.run(m);
        objects[toCompile[j]] = object.str().str();
      } catch (...) {
        failures[j] = std::current_exception();
      }
  };
  std::vector<std::thread> threads;
  threads.reserve(machines.size());
  for (size_t w = 1; w < machines.size(); ++w)
    try {
      threads.emplace_back(work, std::ref(*machines[w]));
    } catch (const std::system_error &) { // out of threads (a container's pids limit): fewer workers
      break;
    }
  if (!machines.empty())
    work(*machines[0]);
  for (std::thread &t : threads)
    t.join();
  for (size_t j = 0; j < toCompile.size(); ++j) {
    if (failures[j])
      std::rethrow_exception(failures[j]);
    distinctCodesCompiled += objectCodes[toCompile[j]].size();
    if (cache)
      cache->store(keys[j], objects[toCompile[j]]);
  }
  if (cache && !toCompile.empty())
    cache->trim();
  return objects;
}

// Codes compiled by earlier modules of this process, by symbol, for as long as the module lives.
std::mutex compiledCodeMutex;
std::unordered_map<std::string, std::weak_ptr<const CpuModule::Impl>> compiledCode;

// The module of this process that has compiled `symbol` and still lives, if any.
std::shared_ptr<const CpuModule::Impl> compiledBefore(const std::string &symbol) {
  std::lock_guard lock(compiledCodeMutex);
  auto it = compiledCode.find(symbol);
  if (it == compiledCode.end())
    return nullptr;
  std::shared_ptr<const CpuModule::Impl> owner = it->second.lock();
  if (!owner)
    compiledCode.erase(it);
  return owner;
}

// The objects a module's codes go into by their hash: most models get about one code per
// object, so an edit recompiles little more than its new codes. (A warm run of the example
// transformer took 0.25 s with its 34 codes in 23 objects as in 4.)
constexpr size_t kObjects = 64;

// The kernels' codes as objects for this host: each kernel's code symbol into `symbols`,
// and the object files of the codes that `borrow(symbol)` does not claim, each distinct
// code once, compiled on a thread per core or read from the object cache.
std::vector<std::string> codeObjects(const std::vector<const kir::Kernel *> &kernels, bool simulatedGpu,
                                     llvm::orc::JITTargetMachineBuilder &jtmb,
                                     std::unordered_map<std::string, std::string> &symbols,
                                     const std::function<bool(const std::string &)> &borrow) {
  unsigned lanes = hostVectorWidth();
  auto tm = targetMachine(jtmb);
  // The codes go into kObjects objects by their symbols' hash (the empty ones left out),
  // each object's in the order of their symbols: an added or changed code changes one object.
  std::vector<std::vector<Code>> objectCodes(kObjects);
  std::set<std::string> seen;
  auto scratch = newContext(false); // each kernel's key, once
  auto add = [&](Code code) { objectCodes[std::stoul(code.symbol.substr(5, 8), nullptr, 16) % kObjects].push_back(std::move(code)); };
  for (const kir::Kernel *k : kernels) {
    std::unique_ptr<llvm::Module> alone = moduleOf(*k, *scratch, *tm, simulatedGpu, lanes);
    std::string key = codeKey(*alone, k->name, simulatedGpu ? "simulated GPU" : "CPU");
    std::string symbol = codeSymbol(key);
    symbols[k->name] = symbol;
    if (!seen.insert(symbol).second || (borrow && borrow(symbol)))
      continue;
    add({symbol, k, {}, key.size()});
    // Its micro-kernels with it: never borrowed, so that a module's objects link alone
    // (a module whose kernels all come from earlier ones calls none of its own).
    for (const auto &[called, code] : microKernelsCalled(*alone))
      if (seen.insert(called).second)
        add({called, nullptr, code.shape, code.keyBytes});
  }
  std::erase_if(objectCodes, [](const std::vector<Code> &codes) { return codes.empty(); });
  for (std::vector<Code> &codes : objectCodes)
    std::sort(codes.begin(), codes.end(), [](const Code &a, const Code &b) { return a.symbol < b.symbol; });
  return objectFiles(objectCodes, jtmb, *tm, simulatedGpu, lanes);
}

} // namespace

std::unique_ptr<CpuModule> CpuModule::compile(const std::vector<const kir::Kernel *> &kernels, bool simulatedGpu) {
  llvm::orc::JITTargetMachineBuilder jtmb = hostTarget();
  auto impl = std::make_shared<Impl>();
  std::vector<std::string> objects = codeObjects(kernels, simulatedGpu, jtmb, impl->symbols, [&](const std::string &symbol) {
    // The simulator's shared memory is a mutable global of the module: modules that may
    // run at once on two threads must not share it.
    std::shared_ptr<const Impl> owner = simulatedGpu ? nullptr : compiledBefore(symbol);
    if (!owner)
      return false;
    impl->borrowed.emplace(symbol, std::move(owner));
    return true;
  });
  if (objects.empty())
    return std::unique_ptr<CpuModule>(new CpuModule(std::move(impl)));
  auto jit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(jtmb)).create();
  if (!jit)
    throw InternalError("cannot start the LLVM JIT: " + errorText(jit.takeError()));
  impl->jit = std::move(*jit);
  auto &dylib = impl->jit->getMainJITDylib();
  auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(impl->jit->getDataLayout().getGlobalPrefix());
  if (!process)
    throw InternalError("cannot resolve libm for the JIT: " + errorText(process.takeError()));
  dylib.addGenerator(std::move(*process));
  if (simulatedGpu) { // the simulator's hooks, by address: the executable need not export them
    llvm::orc::SymbolMap hooks;
    for (const auto &[name, address] : rt::simulatorHooks())
      hooks[impl->jit->mangleAndIntern(name)] = {llvm::orc::ExecutorAddr::fromPtr(address), llvm::JITSymbolFlags::Exported};
    if (auto err = dylib.define(llvm::orc::absoluteSymbols(std::move(hooks))))
      throw InternalError("cannot give the JIT the GPU simulator's hooks: " + errorText(std::move(err)));
  }
  for (const std::string &object : objects)
    if (auto err = impl->jit->addObjectFile(llvm::MemoryBuffer::getMemBufferCopy(object, "dnnc-kernels")))
      throw InternalError("the JIT rejected the kernels' object: " + errorText(std::move(err)));
  if (!simulatedGpu) { // what other modules may borrow
    std::lock_guard lock(compiledCodeMutex);
    std::erase_if(compiledCode, [](const auto &entry) { return entry.second.expired(); });
    for (const auto &[kernel, symbol] : impl->symbols)
      if (!impl->borrowed.contains(symbol))
        compiledCode[symbol] = impl;
  }
  return std::unique_ptr<CpuModule>(new CpuModule(std::move(impl)));
}

HostObjects compileHostObjects(const std::vector<const kir::Kernel *> &kernels) {
  auto jtmb = hostTarget();
  HostObjects out;
  std::unordered_map<std::string, std::string> symbols;
  out.objects = codeObjects(kernels, false, jtmb, symbols, {});
  out.symbols.insert(symbols.begin(), symbols.end());
  return out;
}

std::string hostLLVMIR(const std::vector<const kir::Kernel *> &kernels, bool simulatedGpu) {
  auto jtmb = hostTarget();
  auto tm = targetMachine(jtmb);
  auto ctx = newContext(true); // the values keep the kernel IR's names, for reading
  auto module = emptyModule(*ctx, *tm);
  unsigned lanes = hostVectorWidth();
  for (const kir::Kernel *k : kernels)
    if (llvm::Linker::linkModules(*module, moduleOf(*k, *ctx, *tm, simulatedGpu, lanes)))
      throw InternalError("LLVM cannot link kernel " + k->name + " into the module");
  for (const auto &[symbol, code] : microKernelsCalled(*module))
    defineMicroKernel(*module, code.shape, symbol);
  optimize(*module, *tm);
  std::string ir;
  llvm::raw_string_ostream os(ir);
  module->print(os, nullptr);
  return ir;
}

KernelFn CpuModule::lookup(const std::string &name) const { return impl_->lookup(name); }

size_t CpuModule::codesCompiled() { return distinctCodesCompiled; }

std::vector<KernelFn> CpuModule::lookup(const std::vector<const kir::Kernel *> &kernels) const {
  std::vector<KernelFn> fns;
  for (const kir::Kernel *k : kernels)
    fns.push_back(lookup(k->name));
  return fns;
}

unsigned widestHostVectorWidth() {
  llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
  return features.lookup("avx512f") ? 16 : features.lookup("avx") ? 8 : 4;
}

unsigned hostVectorWidth() {
  unsigned widest = widestHostVectorWidth();
  const char *env = std::getenv("DNNC_VECTOR_WIDTH");
  if (!env || !*env)
    return widest;
  std::string text(env);
  if (text != "4" && text != "8" && text != "16")
    throw DataError(fmt::format("DNNC_VECTOR_WIDTH: '{}' is not a vector width (4, 8 or 16 f32 lanes)", text));
  unsigned lanes = static_cast<unsigned>(std::stoul(text));
  if (lanes > widest)
    throw DataError(fmt::format("DNNC_VECTOR_WIDTH: {} lanes, but this CPU's vectors hold {}", lanes, widest));
  return lanes;
}

std::string hostCpuName() { return llvm::sys::getHostCPUName().str(); }

std::string hostDescription() {
  initializeLLVM();
  return fmt::format("{}, {}-bit vectors", hostCpuName(), hostVectorWidth() * 32);
}

} // namespace dnnc::backend
