// PTX through LLVM's NVPTX target (see NvptxBackend.h).
#include "backend/llvm/NvptxBackend.h"

#include "backend/llvm/KernelEmitter.h"
#include "base/Error.h"
#include "base/Tensor.h"

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/Linker/Linker.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/Transforms/IPO/Internalize.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <unordered_map>

extern "C" {
void LLVMInitializeNVPTXTargetInfo();
void LLVMInitializeNVPTXTarget();
void LLVMInitializeNVPTXTargetMC();
void LLVMInitializeNVPTXAsmPrinter();
}

namespace dnnc::backend {

const std::vector<std::string> &supportedArchs() {
  static const std::vector<std::string> archs{"sm_80", "sm_86", "sm_89", "sm_90"};
  return archs;
}

std::string findLibdevice() {
  std::vector<std::string> roots;
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *v = std::getenv(var))
      roots.push_back(v);
  roots.push_back("/usr/local/cuda");
  roots.push_back("/usr/lib/cuda"); // Debian's nvidia-cuda-toolkit
  for (const std::string &root : roots) {
    std::filesystem::path p = std::filesystem::path(root) / "nvvm" / "libdevice" / "libdevice.10.bc";
    std::error_code ec;
    if (std::filesystem::exists(p, ec))
      return p.string();
  }
  return "";
}

PtxModule compilePtx(const std::vector<const kir::Kernel *> &kernels, const std::string &arch) {
  const auto &archs = supportedArchs();
  if (std::find(archs.begin(), archs.end(), arch) == archs.end()) {
    std::string list;
    for (const std::string &a : archs)
      list += (list.empty() ? "" : ", ") + a;
    throw DataError(fmt::format("unsupported GPU architecture '{}' (dnnc emits PTX for: {})", arch, list));
  }
  std::string libdevice = findLibdevice();
  if (libdevice.empty())
    throw DataError("PTX needs CUDA's libdevice.10.bc for math functions and none was found: install the CUDA "
                        "toolkit or set CUDA_HOME");
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  const std::string triple = "nvptx64-nvidia-cuda";
  std::string error;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    throw InternalError("this LLVM has no NVPTX target: " + error);
  // PTX ISA 7.8 is the first with sm_90 and is read by every ptxas since CUDA 11.8.
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(triple, arch, "+ptx78", llvm::TargetOptions(),
                                                                      std::nullopt, std::nullopt,
                                                                      llvm::CodeGenOptLevel::Aggressive));
  llvm::LLVMContext ctx;
  ctx.setDiagnosticHandlerCallBack([](const llvm::DiagnosticInfo *, void *) {});
  auto module = std::make_unique<llvm::Module>("dnnc", ctx);
  module->setTargetTriple(triple);
  module->setDataLayout(tm->createDataLayout());
  // Each distinct code once, as the entry of the first kernel with it; its twins launch
  // that entry (PTX has no aliases of entries). The keys come from a context without
  // value names, the module keeps them.
  PtxModule out;
  std::unordered_map<std::string, std::string> entryWithKey;
  std::vector<std::string> names; // the entries
  llvm::LLVMContext scratch;
  scratch.setDiscardValueNames(true);
  for (const kir::Kernel *k : kernels) {
    llvm::Module alone("dnnc", scratch);
    alone.setTargetTriple(triple);
    alone.setDataLayout(module->getDataLayout());
    emitNvptxKernel(alone, *k);
    std::string key = codeKey(alone, k->name, "NVPTX");
    if (auto it = entryWithKey.find(key); it != entryWithKey.end()) {
      out.entries[k->name] = it->second;
      continue;
    }
    emitNvptxKernel(*module, *k);
    entryWithKey.emplace(std::move(key), k->name);
    names.push_back(k->name);
  }
  auto buffer = llvm::MemoryBuffer::getFile(libdevice);
  if (!buffer)
    throw DataError(fmt::format("cannot read '{}': {}", libdevice, buffer.getError().message()));
  auto lib = llvm::parseBitcodeFile(**buffer, ctx);
  if (!lib)
    throw DataError(fmt::format("'{}' is not LLVM bitcode: {}", libdevice, errorText(lib.takeError())));
  (*lib)->setTargetTriple(triple);
  (*lib)->setDataLayout(module->getDataLayout());
  if (llvm::Linker::linkModules(*module, std::move(*lib), llvm::Linker::LinkOnlyNeeded))
    throw InternalError("cannot link libdevice into the kernels");
  // Only the entries stay visible; libdevice's functions may be inlined away.
  llvm::internalizeModule(*module, [&](const llvm::GlobalValue &gv) {
    return std::find(names.begin(), names.end(), gv.getName().str()) != names.end();
  });
  optimize(*module, *tm);
  llvm::raw_string_ostream irText(out.llvmIR);
  module->print(irText, nullptr);
  llvm::SmallString<0> ptx;
  llvm::raw_svector_ostream os(ptx);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
    throw InternalError("the NVPTX target cannot emit PTX");
  pm.run(*module);
  out.ptx = ptx.str().str();
  if (!out.entries.empty()) // for readers: where each twin's code is
    out.ptx += "\n// kernels that launch another kernel's entry (the same code):\n";
  for (const kir::Kernel *k : kernels)
    if (auto it = out.entries.find(k->name); it != out.entries.end())
      out.ptx += "// " + k->name + " launches " + it->second + "\n";
  return out;
}

} // namespace dnnc::backend
