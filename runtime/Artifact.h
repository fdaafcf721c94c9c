// Built artifacts (`dnnc build`): one file holding a model's graph (its host part), the
// launch table of its kernels and their code: a shared object for the CPU, PTX for CUDA.
//
// Layout: the 8-byte magic "DNNCART1", then three little-endian u64s (header size,
// payload size, FNV-1a hash of header and payload), the JSON header, the payload.
// Loading checks all of it first: a truncated, corrupted or foreign file is a DataError,
// and nothing in it runs unless its hash matches.
#pragma once

#include "runtime/Executable.h"

#include <map>
#include <memory>
#include <string>

namespace dnnc::rt {

struct ArtifactInfo {
  std::string target;  // "cpu" or "cuda"
  std::string arch;    // the host CPU's LLVM name, or the GPU architecture
  std::string vectorIsa; // cpu: the vector extension the kernels use ("avx512f", "avx2", "sse2")
  // cuda: each kernel that launches another kernel's entry (the same code), and that entry
  std::map<std::string, std::string> entries;
};

// Writes atomically (nothing is left behind on failure).
void writeArtifact(const std::string &path, const ir::Graph &g, const std::map<const ir::Op *, size_t> &kernelOf,
                   const std::vector<KernelInfo> &kernels, const ArenaPlan &plan, const ArtifactInfo &info,
                   const std::string &payload);
// An artifact's contents, every size, count and index in it checked, not yet on a device.
struct ArtifactContents {
  ArtifactInfo info;
  std::shared_ptr<const ir::Graph> graph;
  std::map<const ir::Op *, size_t> kernelOf;
  std::vector<KernelInfo> kernels;
  ArenaPlan plan;
  std::string code; // the payload: a shared object (cpu) or PTX (cuda)
};
// Reads an artifact from the bytes of a file (`name` names it in errors). Throws DataError.
ArtifactContents readArtifactBytes(const std::string &bytes, const std::string &name);
// The bytes of an artifact file holding `header` (JSON text) and `payload`: the magic,
// the sizes and the checksum in front.
std::string sealArtifact(const std::string &header, const std::string &payload);
// Whether `path` starts with the artifact magic.
bool isArtifact(const std::string &path);
// Loads an artifact onto its device (CPU: this machine must have its vector ISA; CUDA: a
// working GPU). `asked`: the device the user asked for ("cpu" or "cuda"), checked against
// the artifact's target before any device is opened; "auto" takes its target. Throws
// DataError.
std::unique_ptr<Executable> loadArtifact(const std::string &path, ArtifactInfo *info = nullptr, const std::string &asked = "auto");

} // namespace dnnc::rt
