// dnnc import: an ONNX model (OnnxModel.h) translated into readable .dnn source plus the
// tensors of its params (interop.md §16, docs/import.md).
#pragma once

#include "base/Tensor.h"
#include "import/OnnxModel.h"

#include <map>
#include <string>

namespace dnnc::onnx {

struct ImportOptions {
  std::string modelName = "main";
  std::string sourceName;  // the .onnx file, for the header comment
  std::string outputName;  // the .dnn file and
  std::string weightsName; // the weights file, for the header comment's run line
};

struct ImportResult {
  std::string source;                          // the .dnn text
  std::map<std::string, rt::Tensor> weights;   // each param's tensor under its ONNX name
};

// Translates `m`. Every op type the importer does not translate is listed in one
// DataError (op type, then each node where it occurs, subgraphs included) before anything
// is translated; an op used in a way the language cannot express (a negative slice step,
// a Conv with per-axis dilations) is a DataError naming the node and why.
ImportResult importModel(const Model &m, const ImportOptions &o);

} // namespace dnnc::onnx
