// The host back end: kernels emitted by KernelEmitter, the O3 pipeline for this machine,
// and in-process compilation with ORC LLJIT.
#include "backend/llvm/CpuBackend.h"

#include "runtime/GpuSimulator.h"

#include "backend/llvm/KernelEmitter.h"
#include "backend/llvm/ObjectCache.h"
#include "base/Error.h"

#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/GlobalAlias.h>
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
#include <cctype>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
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
  std::unique_ptr<llvm::orc::LLJIT> jit; // null when every kernel's code was compiled before
  // Kernels whose code an earlier module of this process compiled: that module, kept
  // alive, and the symbol it has the code under.
  std::map<std::string, std::pair<std::shared_ptr<const Impl>, std::string>> borrowed;

  KernelFn lookup(const std::string &name) const {
    if (auto it = borrowed.find(name); it != borrowed.end())
      return it->second.first->lookup(it->second.second);
    if (!jit)
      throw InternalError("kernel " + name + " was not compiled");
    auto sym = jit->lookup(name);
    if (!sym)
      throw InternalError("kernel " + name + " did not compile: " + errorText(sym.takeError()));
    return sym->toPtr<KernelFn>();
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

// What decides a kernel's code: the text of a module holding it alone (the function, the
// helpers and constants it uses, their attributes and metadata), its values unnamed and its
// own name replaced. Kernels with equal keys compile to the same code on this host: an op
// repeated in every layer, a training step's update of each param, the ops every recompute
// version shares.
std::string codeKey(const llvm::Module &m, const std::string &kernel, bool simulatedGpu) {
  std::string text;
  llvm::raw_string_ostream os(text);
  m.print(os, nullptr);
  std::string key = simulatedGpu ? "simulated GPU\n" : "CPU\n", ref = "@" + kernel;
  size_t at = 0;
  for (size_t hit; (hit = text.find(ref, at)) != std::string::npos; at = hit + ref.size()) {
    size_t after = hit + ref.size();
    bool whole = after == text.size() || !(std::isalnum(static_cast<unsigned char>(text[after])) || text[after] == '_');
    key.append(text, at, hit - at).append(whole ? "@kernel" : ref);
  }
  return key.append(text, at, std::string::npos);
}

// A share of a module's kernels, in an LLVM context of its own, so that the shares
// optimize and compile on threads of their own.
struct HostModule {
  std::unique_ptr<llvm::LLVMContext> ctx;
  std::unique_ptr<llvm::Module> module;
  std::vector<std::pair<std::string, std::string>> compiled; // kernel and key of each code compiled here
  std::string contents; // what decides the module: its kernels' names and keys, its aliases
};

// How many shares to cut `kernels` kernels into: one per core this process may run on (16
// at most), at least 16 kernels each.
size_t sharesFor(size_t kernels) {
  cpu_set_t allowed;
  size_t cores = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : std::thread::hardware_concurrency();
  return std::clamp<size_t>(kernels / 16, 1, std::clamp<size_t>(cores, 1, 16));
}

// The kernels in `shares` modules (kernel i in share i % shares), each distinct code once:
// a kernel whose key an earlier one has is an alias of it. `compiledBefore(kernel, key)`
// may claim a kernel whose code is already compiled elsewhere; the modules then leave it
// out. With `names`, values keep the kernel IR's names (for reading; equal kernels then
// rarely match). Not yet optimized.
std::vector<HostModule> hostModules(const std::vector<const kir::Kernel *> &kernels, const llvm::TargetMachine &tm,
                                    bool simulatedGpu, bool names, size_t shares,
                                    const std::function<bool(const std::string &, const std::string &)> &compiledBefore = {}) {
  std::vector<HostModule> out(shares);
  for (HostModule &share : out) {
    share.ctx = std::make_unique<llvm::LLVMContext>();
    // Optimization remarks ("loop not vectorized") are not the user's business.
    share.ctx->setDiagnosticHandlerCallBack([](const llvm::DiagnosticInfo *, void *) {});
    share.ctx->setDiscardValueNames(!names);
    share.module = emptyModule(*share.ctx, tm);
  }
  std::unordered_map<std::string, std::pair<size_t, std::string>> kernelWithKey; // the share and kernel with the code
  std::vector<std::pair<std::string, std::pair<size_t, std::string>>> aliases;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const kir::Kernel *k = kernels[i];
    HostModule &share = out[i % shares];
    auto alone = emptyModule(*share.ctx, tm);
    if (simulatedGpu)
      emitSimulatedGpuKernel(*alone, *k);
    else
      emitCpuKernel(*alone, *k, hostVectorWidth());
    std::string key = codeKey(*alone, k->name, simulatedGpu);
    if (auto it = kernelWithKey.find(key); it != kernelWithKey.end()) {
      aliases.emplace_back(k->name, it->second);
      continue;
    }
    if (compiledBefore && compiledBefore(k->name, key))
      continue;
    if (llvm::Linker::linkModules(*share.module, std::move(alone)))
      throw InternalError("LLVM cannot link kernel " + k->name + " into the module");
    kernelWithKey.emplace(key, std::make_pair(i % shares, k->name));
    share.contents += "kernel " + k->name + "\n" + key;
    share.compiled.emplace_back(k->name, std::move(key));
  }
  for (const auto &[name, target] : aliases) {
    HostModule &share = out[target.first];
    llvm::GlobalAlias::create(llvm::GlobalValue::ExternalLinkage, name, share.module->getFunction(target.second));
    share.contents += "alias " + name + " = " + target.second + "\n";
  }
  return out;
}

// Each share with code (every share with `emptyToo`) as an object file for the host: from
// the object cache when it has it, else optimized (O3) and compiled by LLVM, one thread per
// share, and then cached.
std::vector<std::string> objectFiles(std::vector<HostModule> &shares, llvm::orc::JITTargetMachineBuilder &jtmb,
                                     bool emptyToo = false) {
  std::optional<ObjectCache> cache = ObjectCache::fromEnvironment();
  std::string target;
  if (cache) {
    auto tm = targetMachine(jtmb);
    target = fmt::format("{}\n{}\n{}\nrelocation {}\n", tm->getTargetTriple().str(), tm->getTargetCPU().str(),
                         tm->getTargetFeatureString().str(), static_cast<int>(tm->getRelocationModel()));
  }
  std::vector<std::string> objects, keys;
  std::vector<size_t> toCompile;
  for (size_t i = 0; i < shares.size(); ++i) {
    if (!emptyToo && shares[i].module->empty() && shares[i].module->alias_empty())
      continue;
    std::string key = cache ? cache->keyOf(target + shares[i].contents) : "";
    if (std::optional<std::string> object = cache ? cache->load(key) : std::nullopt) {
      objects.push_back(std::move(*object));
      continue;
    }
    toCompile.push_back(i);
    keys.push_back(std::move(key));
  }
  std::vector<std::unique_ptr<llvm::TargetMachine>> machines; // one per thread
  for (size_t j = 0; j < toCompile.size(); ++j)
    machines.push_back(targetMachine(jtmb));
  std::vector<std::string> compiled(toCompile.size());
  std::vector<std::exception_ptr> failures(toCompile.size());
  auto compileShare = [&](size_t j) {
    try {
      llvm::Module &m = *shares[toCompile[j]].module;
      optimize(m, *machines[j]);
      llvm::SmallString<0> object;
      llvm::raw_svector_ostream os(object);
      llvm::legacy::PassManager pm;
      if (machines[j]->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
        throw InternalError("LLVM cannot emit object code for this host");
      pm.run(m);
      compiled[j] = object.str().str();
    } catch (...) {
      failures[j] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  std::vector<size_t> here{0}; // the shares this thread compiles: the first, and any whose thread did not start
  for (size_t j = 1; j < toCompile.size(); ++j)
    try {
      threads.emplace_back(compileShare, j);
    } catch (const std::system_error &) { // out of threads (a container's pids limit)
      here.push_back(j);
    }
  for (size_t j : here)
    if (j < toCompile.size())
      compileShare(j);
  for (std::thread &t : threads)
    t.join();
  for (size_t j = 0; j < toCompile.size(); ++j) {
    if (failures[j])
      std::rethrow_exception(failures[j]);
    distinctCodesCompiled += shares[toCompile[j]].compiled.size();
    if (cache)
      cache->store(keys[j], compiled[j]);
    objects.push_back(std::move(compiled[j]));
  }
  return objects;
}

// Code compiled by earlier modules of this process, by key, for as long as the module lives.
struct CompiledCode {
  std::weak_ptr<const CpuModule::Impl> module;
  std::string symbol;
};
std::mutex compiledCodeMutex;
std::unordered_map<std::string, CompiledCode> compiledCode;

} // namespace

std::unique_ptr<CpuModule> CpuModule::compile(const std::vector<const kir::Kernel *> &kernels, bool simulatedGpu) {
  llvm::orc::JITTargetMachineBuilder jtmb = hostTarget();
  auto impl = std::make_shared<Impl>();
  std::vector<HostModule> shares =
      hostModules(kernels, *targetMachine(jtmb), simulatedGpu, false, sharesFor(kernels.size()),
                  [&](const std::string &kernel, const std::string &key) {
                    // The simulator's shared memory is a mutable global of the module:
                    // modules that may run at once on two threads must not share it.
                    if (simulatedGpu)
                      return false;
                    std::lock_guard lock(compiledCodeMutex);
                    auto it = compiledCode.find(key);
                    if (it == compiledCode.end())
                      return false;
                    std::shared_ptr<const Impl> owner = it->second.module.lock();
                    if (!owner) {
                      compiledCode.erase(it);
                      return false;
                    }
                    impl->borrowed.emplace(kernel, std::make_pair(std::move(owner), it->second.symbol));
                    return true;
                  });
  std::vector<std::string> objects = objectFiles(shares, jtmb);
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
    std::erase_if(compiledCode, [](const auto &entry) { return entry.second.module.expired(); });
    for (HostModule &share : shares)
      for (auto &[kernel, key] : share.compiled)
        compiledCode[std::move(key)] = {impl, kernel};
  }
  return std::unique_ptr<CpuModule>(new CpuModule(std::move(impl)));
}

// One share: an artifact's shared object is linked from one object file.
std::string compileHostObject(const std::vector<const kir::Kernel *> &kernels) {
  auto jtmb = hostTarget();
  std::vector<HostModule> shares = hostModules(kernels, *targetMachine(jtmb), false, false, 1);
  return std::move(objectFiles(shares, jtmb, true).at(0));
}

std::string hostLLVMIR(const std::vector<const kir::Kernel *> &kernels, bool simulatedGpu) {
  auto jtmb = hostTarget();
  auto tm = targetMachine(jtmb);
  std::vector<HostModule> shares = hostModules(kernels, *tm, simulatedGpu, true, 1);
  optimize(*shares[0].module, *tm);
  std::string ir;
  llvm::raw_string_ostream os(ir);
  shares[0].module->print(os, nullptr);
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
