// The host back end: kernels emitted by KernelEmitter, the O3 pipeline for this machine,
// and in-process compilation with ORC LLJIT.
#include "backend/llvm/CpuBackend.h"

#include "runtime/GpuSimulator.h"

#include "backend/llvm/KernelEmitter.h"
#include "base/Error.h"

#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <fmt/format.h>

#include <cstdlib>
#include <mutex>
#include <string>

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
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::string ir;
};

CpuModule::CpuModule(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CpuModule::~CpuModule() = default;

namespace {

// The host's target description; position-independent code when it goes into a shared object.
llvm::orc::JITTargetMachineBuilder hostTarget(bool pic) {
  initializeLLVM();
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb)
    throw InternalError("LLVM cannot describe this host: " + errorText(jtmb.takeError()));
  jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  if (pic)
    jtmb->setRelocationModel(llvm::Reloc::PIC_);
  return std::move(*jtmb);
}

// Every kernel in one module, optimized for the host.
std::unique_ptr<llvm::Module> hostModule(const std::vector<const kir::Kernel *> &kernels, llvm::LLVMContext &ctx,
                                         llvm::TargetMachine &tm, bool simulatedGpu = false) {
  // Optimization remarks ("loop not vectorized") are not the user's business.
  ctx.setDiagnosticHandlerCallBack([](const llvm::DiagnosticInfo *, void *) {});
  auto module = std::make_unique<llvm::Module>("dnnc", ctx);
  module->setDataLayout(tm.createDataLayout());
  module->setTargetTriple(tm.getTargetTriple().str());
  for (const kir::Kernel *k : kernels)
    if (simulatedGpu)
      emitSimulatedGpuKernel(*module, *k);
    else
      emitCpuKernel(*module, *k, hostVectorWidth());
  optimize(*module, tm);
  return module;
}

} // namespace

std::unique_ptr<CpuModule> CpuModule::compile(const std::vector<const kir::Kernel *> &kernels, bool simulatedGpu) {
  llvm::orc::JITTargetMachineBuilder jtmb = hostTarget(false);
  auto tm = jtmb.createTargetMachine();
  if (!tm)
    throw InternalError("LLVM has no target machine for this host: " + errorText(tm.takeError()));
  auto ctx = std::make_unique<llvm::LLVMContext>();
  auto module = hostModule(kernels, *ctx, **tm, simulatedGpu);
  auto impl = std::make_unique<Impl>();
  llvm::raw_string_ostream os(impl->ir);
  module->print(os, nullptr);
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
  if (auto err = impl->jit->addIRModule(llvm::orc::ThreadSafeModule(std::move(module), std::move(ctx))))
    throw InternalError("the JIT rejected the module: " + errorText(std::move(err)));
  return std::unique_ptr<CpuModule>(new CpuModule(std::move(impl)));
}

std::string compileHostObject(const std::vector<const kir::Kernel *> &kernels) {
  auto tm = hostTarget(true).createTargetMachine();
  if (!tm)
    throw InternalError("LLVM has no target machine for this host: " + errorText(tm.takeError()));
  llvm::LLVMContext ctx;
  auto module = hostModule(kernels, ctx, **tm);
  llvm::SmallString<0> object;
  llvm::raw_svector_ostream os(object);
  llvm::legacy::PassManager pm;
  if ((*tm)->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
    throw InternalError("LLVM cannot emit object code for this host");
  pm.run(*module);
  return object.str().str();
}

KernelFn CpuModule::lookup(const std::string &name) const {
  auto sym = impl_->jit->lookup(name);
  if (!sym)
    throw InternalError("kernel " + name + " did not compile: " + errorText(sym.takeError()));
  return sym->toPtr<KernelFn>();
}

std::vector<KernelFn> CpuModule::lookup(const std::vector<const kir::Kernel *> &kernels) const {
  std::vector<KernelFn> fns;
  for (const kir::Kernel *k : kernels)
    fns.push_back(lookup(k->name));
  return fns;
}

const std::string &CpuModule::llvmIR() const { return impl_->ir; }

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
