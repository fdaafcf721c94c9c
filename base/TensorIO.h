// Reading and writing tensors: NumPy .npy files and .safetensors weight files. Every
// malformed or truncated file is a DataError naming the file and what is wrong.
#pragma once

#include "base/Tensor.h"

#include <map>
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

// A whole file's bytes (DataError when it cannot be read), and writing one through a
// temporary file so that a failure leaves nothing behind.
std::string readFile(const std::string &path);
void writeFileAtomically(const std::string &path, const std::string &bytes);

// Raw little-endian bytes of a tensor's values in its dtype, and back.
std::string encodeValues(const Tensor &t);
void decodeValues(Tensor &t, const char *data, size_t bytes);

} // namespace dnnc::rt
