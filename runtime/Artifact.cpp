// Writing and loading built artifacts (see Artifact.h).
#include "runtime/Artifact.h"

#include "ir/graph/Serialize.h"
#include "runtime/CpuDevice.h"
#include "runtime/CudaDevice.h"
#include "base/TensorIO.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <fstream>
#include <set>

namespace dnnc::rt {
namespace {

using nlohmann::json;

constexpr char kMagic[8] = {'D', 'N', 'N', 'C', 'A', 'R', 'T', '1'};
constexpr size_t kPrefix = sizeof kMagic + 3 * sizeof(uint64_t);
// 2: kernels carry their GPU grid; 3: CPU GEMMs their shape (runtime/GemmSelect.h); 4: and how they read B;
// 5: a GPU kernel with an earlier kernel's code names the entry it launches (optional: a
// format-4 artifact reads as one whose kernels all have entries of their own)
constexpr int kFormat = 5, kOldestFormat = 4;

uint64_t fnv1a(const char *data, size_t n, uint64_t h = 1469598103934665603ull) {
  for (size_t k = 0; k < n; ++k)
    h = (h ^ static_cast<uint8_t>(data[k])) * 1099511628211ull;
  return h;
}

void putU64(std::string &out, uint64_t v) {
  for (int k = 0; k < 8; ++k)
    out += static_cast<char>((v >> (8 * k)) & 0xff);
}
uint64_t getU64(const char *p) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; --k)
    v = (v << 8) | static_cast<uint8_t>(p[k]);
  return v;
}

// The shared object, opened from an anonymous in-memory file: nothing touches the disk.
// Its file stays open until the object is closed: the loader knows a library by its path,
// and a second artifact opened as /proc/self/fd/N with the same N (the first's closed
// file's number, reused) was handed the first one's code.
std::shared_ptr<void> openSharedObject(const std::string &bytes, const std::string &path) {
  int fd = memfd_create("dnnc-kernels", MFD_CLOEXEC);
  if (fd < 0)
    throw DataError(fmt::format("cannot load the kernels of '{}': memfd_create failed", path));
  size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = write(fd, bytes.data() + written, bytes.size() - written);
    if (n <= 0) {
      close(fd);
      throw DataError(fmt::format("cannot load the kernels of '{}': write failed", path));
    }
    written += static_cast<size_t>(n);
  }
  std::string self = fmt::format("/proc/self/fd/{}", fd);
  void *handle = dlopen(self.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    close(fd);
    throw DataError(fmt::format("cannot load the kernels of '{}': {}", path, dlerror()));
  }
  return std::shared_ptr<void>(handle, [fd](void *h) {
    dlclose(h);
    close(fd);
  });
}

bool cpuHas(const std::string &isa) {
  __builtin_cpu_init();
  if (isa == "avx512f")
    return __builtin_cpu_supports("avx512f");
  if (isa == "avx2")
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return true;
}

// How deeply the header's arrays and objects nest, read off its text (strings skipped):
// the readers of the graph and its dim expressions recurse once per level.
size_t nestingDepth(const char *text, size_t n) {
  size_t depth = 0, most = 0;
  bool inString = false;
  for (size_t k = 0; k < n; ++k) {
    char c = text[k];
    if (inString) {
      if (c == '\\')
        ++k;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      most = std::max(most, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return most;
}
constexpr size_t kMaxNesting = 512;

// An integer of the header: a JSON integer that fits in 64 bits (a float, which
// nlohmann would convert with undefined behaviour when out of range, is malformed).
int64_t intOf(const json &j, const std::string &path, const char *what) {
  if (!j.is_number_integer() || (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
    throw DataError(fmt::format("'{}' has a malformed header: {} is not a 64-bit integer", path, what));
  return j.get<int64_t>();
}

} // namespace

void writeArtifact(const std::string &path, const ir::Graph &g, const std::map<const ir::Op *, size_t> &kernelOf,
                   const std::vector<KernelInfo> &kernels, const ArenaPlan &plan, const ArtifactInfo &info,
                   const std::string &payload) {
  // Each kernel names its op by position in ir::opsPostOrder.
  std::vector<int64_t> opOf(kernels.size(), -1);
  auto ops = ir::opsPostOrder(g);
  for (size_t k = 0; k < ops.size(); ++k)
    if (auto it = kernelOf.find(ops[k]); it != kernelOf.end())
      opOf[it->second] = static_cast<int64_t>(k);
  json table = json::array();
  for (size_t k = 0; k < kernels.size(); ++k) {
    table.push_back({{"name", kernels[k].name}, {"op", opOf[k]}, {"dims", kernels[k].dims},
                     {"parallel_extent", ir::exprToJson(kernels[k].parallelExtent)}, {"work", ir::exprToJson(kernels[k].work)},
                     {"grid", {ir::exprToJson(kernels[k].gridX), ir::exprToJson(kernels[k].gridY)}},
                     {"block_threads", kernels[k].blockThreads},
                     {"gemm", {ir::exprToJson(kernels[k].gemmBatches), ir::exprToJson(kernels[k].gemmM),
                               ir::exprToJson(kernels[k].gemmN), ir::exprToJson(kernels[k].gemmK),
                               static_cast<int>(kernels[k].gemmB)}}});
    if (auto it = info.entries.find(kernels[k].name); it != info.entries.end())
      table.back()["entry"] = it->second;
  }
  json offsets = json::array();
  for (const auto &[value, offset] : plan.offsets)
    offsets.push_back({value->id, ir::exprToJson(offset), plan.late.count(value) != 0, plan.kept.count(value) != 0});
  json header = {{"format", kFormat}, {"target", info.target}, {"arch", info.arch}, {"vector_isa", info.vectorIsa},
                 {"graph", ir::toJson(g)}, {"kernels", std::move(table)},
                 {"arena", {{"bytes", ir::exprToJson(plan.bytes)}, {"late_bytes", ir::exprToJson(plan.lateBytes)},
                            {"offsets", std::move(offsets)}}}};
  writeFileAtomically(path, sealArtifact(header.dump(), payload));
}

std::string sealArtifact(const std::string &text, const std::string &payload) {
  std::string out(kMagic, sizeof kMagic);
  putU64(out, text.size());
  putU64(out, payload.size());
  putU64(out, fnv1a(payload.data(), payload.size(), fnv1a(text.data(), text.size())));
  return out + text + payload;
}

bool isArtifact(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  char magic[sizeof kMagic] = {};
  return in.read(magic, sizeof magic) && std::memcmp(magic, kMagic, sizeof magic) == 0;
}

ArtifactContents readArtifactBytes(const std::string &bytes, const std::string &path) {
  if (bytes.size() < sizeof kMagic || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    throw DataError(fmt::format("'{}' is not a dnnc artifact (build one with `dnnc build`)", path));
  if (bytes.size() < kPrefix)
    throw DataError(fmt::format("'{}' is truncated: it ends inside its header", path));
  uint64_t headerSize = getU64(bytes.data() + 8), payloadSize = getU64(bytes.data() + 16), hash = getU64(bytes.data() + 24);
  if (headerSize > bytes.size() - kPrefix || payloadSize != bytes.size() - kPrefix - headerSize)
    throw DataError(fmt::format("'{}' is truncated or has trailing bytes: its sizes do not match the file", path));
  const char *header = bytes.data() + kPrefix, *payload = header + headerSize;
  if (fnv1a(payload, payloadSize, fnv1a(header, headerSize)) != hash)
    throw DataError(fmt::format("'{}' is corrupt: its checksum does not match", path));
  if (size_t depth = nestingDepth(header, headerSize); depth > kMaxNesting)
    throw DataError(fmt::format("'{}' has a malformed header: it nests {} levels deep, more than the {} dnnc writes", path,
                                depth, kMaxNesting));
  json j = json::parse(header, header + headerSize, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw DataError(fmt::format("'{}' has a malformed header", path));
  ArtifactContents c;
  ArtifactInfo &info = c.info;
  std::vector<KernelInfo> &kernels = c.kernels;
  std::vector<int64_t> opIndex;
  std::shared_ptr<const ir::Graph> &graph = c.graph;
  ArenaPlan &plan = c.plan;
  try {
    int64_t format = j.contains("format") ? intOf(j.at("format"), path, "format") : 0;
    if (format < kOldestFormat || format > kFormat)
      throw DataError(fmt::format("'{}' has artifact format {}, this runtime reads formats {} to {} (rebuild it with this dnnc)",
                                  path, format, kOldestFormat, kFormat));
    info.target = j.at("target").get<std::string>();
    info.arch = j.at("arch").get<std::string>();
    info.vectorIsa = j.value("vector_isa", "");
    for (const json &k : j.at("kernels")) {
      kernels.push_back({k.at("name").get<std::string>(), k.at("dims").get<std::vector<std::string>>(),
                         ir::exprFromJson(k.at("parallel_extent")), ir::exprFromJson(k.at("work")),
                         ir::exprFromJson(k.at("grid").at(0)), ir::exprFromJson(k.at("grid").at(1)),
                         intOf(k.at("block_threads"), path, "block_threads")});
      const json &gemm = k.at("gemm");
      KernelInfo &last = kernels.back();
      last.gemmBatches = ir::exprFromJson(gemm.at(0)), last.gemmM = ir::exprFromJson(gemm.at(1));
      last.gemmN = ir::exprFromJson(gemm.at(2)), last.gemmK = ir::exprFromJson(gemm.at(3));
      if (!last.gemmM != !last.gemmN || !last.gemmM != !last.gemmK || !last.gemmM != !last.gemmBatches)
        throw DataError(fmt::format("'{}' has a kernel with part of a GEMM shape", path));
      int64_t b = intOf(gemm.at(4), path, "a GEMM's B");
      if (b < 0 || b > static_cast<int64_t>(GemmB::Panels))
        throw DataError(fmt::format("'{}' has a kernel whose GEMM reads B in an unknown way ({})", path, b));
      last.gemmB = static_cast<GemmB>(b);
      last.entry = k.value("entry", std::string());
      if (kernels.back().blockThreads < 1 || kernels.back().blockThreads > 1024)
        throw DataError(fmt::format("'{}' has a kernel with {} threads per block", path, kernels.back().blockThreads));
      opIndex.push_back(intOf(k.at("op"), path, "a kernel's op"));
    }
    graph = ir::fromJson(j.at("graph"));
    const json &arena = j.at("arena");
    plan.bytes = ir::exprFromJson(arena.at("bytes"));
    plan.lateBytes = ir::exprFromJson(arena.at("late_bytes"));
    for (const json &entry : arena.at("offsets")) {
      int64_t id = intOf(entry.at(0), path, "a planned value's id");
      if (id < 0 || id >= static_cast<int64_t>(graph->values().size()))
        throw DataError(fmt::format("'{}' plans a value it does not have", path));
      const ir::Value *v = graph->values()[static_cast<size_t>(id)].get();
      if (plan.offsets.count(v))
        throw DataError(fmt::format("'{}' plans value {} twice", path, id));
      plan.offsets[v] = ir::exprFromJson(entry.at(1));
      if (!plan.offsets[v])
        throw DataError(fmt::format("'{}' plans value {} without an offset", path, id));
      if (entry.at(2).get<bool>()) {
        if (!plan.lateBytes)
          throw DataError(fmt::format("'{}' plans a late value without a late arena", path));
        plan.late.insert(v);
      }
      if (entry.size() > 3 && entry.at(3).get<bool>())
        plan.kept.insert(v);
    }
  } catch (const json::exception &e) {
    throw DataError(fmt::format("'{}' has a malformed header: {}", path, e.what()));
  } catch (const std::overflow_error &e) {
    throw DataError(fmt::format("'{}' has a malformed header: {}", path, e.what()));
  }
  std::set<std::string> entries; // the kernels with entries of their own
  for (const KernelInfo &k : kernels)
    if (k.entry.empty())
      entries.insert(k.name);
  for (const KernelInfo &k : kernels)
    if (!k.entry.empty() && !entries.count(k.entry))
      throw DataError(fmt::format("'{}': kernel {} launches '{}', which is no entry of its kernels", path, k.name, k.entry));
  auto ops = ir::opsPostOrder(*graph);
  std::map<const ir::Op *, size_t> &kernelOf = c.kernelOf;
  for (size_t k = 0; k < kernels.size(); ++k) {
    if (opIndex[k] < 0 || opIndex[k] >= static_cast<int64_t>(ops.size()) || kernelOf.count(ops[static_cast<size_t>(opIndex[k])]))
      throw DataError(fmt::format("'{}' has a malformed kernel table", path));
    kernelOf[ops[static_cast<size_t>(opIndex[k])]] = k;
  }
  c.code.assign(payload, payloadSize);
  return c;
}

std::unique_ptr<Executable> loadArtifact(const std::string &path, ArtifactInfo *infoOut, const std::string &asked) {
  ArtifactContents c = readArtifactBytes(readFile(path), path);
  const ArtifactInfo &info = c.info;
  if (asked != "auto" && asked != info.target) // before opening one: no CUDA needed to say so
    throw DataError(fmt::format("'{}' was built for {}, not for --device {} (rebuild it with --target {})", path, info.target,
                                asked, asked));
  std::string &code = c.code;
  std::unique_ptr<Device> device;
  if (info.target == "cpu") {
    if (!cpuHas(info.vectorIsa))
      throw DataError(fmt::format("'{}' was built for a CPU with {} ({}); this CPU lacks it: rebuild it here", path,
                                  info.vectorIsa, info.arch));
    std::shared_ptr<void> so = openSharedObject(code, path);
    std::vector<KernelFn> fns;
    for (const KernelInfo &k : c.kernels) {
      void *fn = dlsym(so.get(), k.name.c_str());
      if (!fn)
        throw DataError(fmt::format("'{}' lacks the code of kernel {}", path, k.name));
      fns.push_back(reinterpret_cast<KernelFn>(fn));
    }
    device = std::make_unique<CpuDevice>(std::move(fns), so);
  } else if (info.target == "cuda") {
    device = std::make_unique<CudaDevice>(code, c.kernels);
  } else {
    throw DataError(fmt::format("'{}' targets '{}', which this runtime cannot run", path, info.target));
  }
  if (infoOut)
    *infoOut = info;
  const ir::Graph &ref = *c.graph;
  auto exe = std::make_unique<Executable>(ref, std::move(c.kernelOf), std::move(c.kernels), std::move(device), std::move(c.graph));
  if (c.plan.bytes)
    exe->setArenaPlan(std::move(c.plan));
  return exe;
}

} // namespace dnnc::rt
