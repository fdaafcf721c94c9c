// Reading and writing tensors: NumPy .npy files and .safetensors weight files. Every
// malformed or truncated file is a DataError naming the file and what is wrong.
#pragma once

#include "base/Tensor.h"

#include <map>
#include <optional>
#include <string>

namespace dnnc::rt {

Tensor readNpy(const std::string &path);
// The same from a file's bytes; `name` names it in errors.
Tensor readNpyBytes(const std::string &bytes, const std::string &name);
// Writes through a temporary file, so a failed write leaves nothing behind.
void writeNpy(const std::string &path, const Tensor &t);

// Tensors by name; "__metadata__" is skipped.
std::map<std::string, Tensor> readSafetensors(const std::string &path);
std::map<std::string, Tensor> readSafetensorsBytes(const std::string &bytes, const std::string &name);
void writeSafetensors(const std::string &path, const std::map<std::string, Tensor> &tensors);
// The bytes of a .safetensors file of `tensors` (what writeSafetensors writes).
std::string encodeSafetensors(const std::map<std::string, Tensor> &tensors);

// A .safetensors file with its header validated, each tensor decoded when asked for: what
// the weights loader reads, converting float tensors (F64 too, which no DType holds) to a
// param's dtype.
class SafetensorsFile {
public:
  struct Entry {
    DType dtype = DType::F32; // F32 for an F64 tensor, which `f64` marks
    bool f64 = false;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;
  };
  std::string path;
  std::map<std::string, Entry> entries; // "__metadata__" is skipped

  std::string typeText(const Entry &e) const; // "bf16[4, 3]", "f64[2]"
  bool isFloat(const Entry &e) const;
  // The tensor `name` (an entry's name) in its own dtype; not for F64 entries.
  Tensor tensor(const std::string &name) const;
  // The float tensor `name` rounded to the float dtype `as`.
  Tensor tensorAs(const std::string &name, DType as) const;

private:
  friend SafetensorsFile parseSafetensors(std::string bytes, const std::string &path);
  std::string bytes_;
  uint64_t dataStart_ = 0;
};
SafetensorsFile openSafetensors(const std::string &path);
SafetensorsFile parseSafetensors(std::string bytes, const std::string &path);

// A whole file's bytes (DataError when it cannot be read), and writing one through a
// temporary file so that a failure leaves nothing behind.
std::string readFile(const std::string &path);
// The file readFile read in this process that `path` names, if any: what a command must
// not write over (its sources and data).
std::optional<std::string> readEarlier(const std::string &path);
void writeFileAtomically(const std::string &path, const std::string &bytes);
// A name beside `path` for a file on its way there: "PATH.WHAT.PID-N", unique per process
// and call.
std::string besidePath(const std::string &path, const char *what);
// Renames each (from, to) in turn; if one fails, undoes those made (the files they replaced
// put back), so that the places end all new or all as they were. DataError naming the one.
void moveAllIntoPlace(const std::vector<std::pair<std::string, std::string>> &moves);
// Several files (path, bytes), each written in full beside its place before any is moved
// there (moveAllIntoPlace): a failure to write one leaves all as they were.
void writeFilesAtomically(const std::vector<std::pair<std::string, std::string>> &files);

// Raw little-endian bytes of a tensor's values in its dtype, and back.
std::string encodeValues(const Tensor &t);
void decodeValues(Tensor &t, const char *data, size_t bytes);

} // namespace dnnc::rt
