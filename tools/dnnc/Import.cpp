// dnnc import: reads an ONNX model, translates it (import/), type-checks the .dnn it
// made with the frontend, and only then writes the source and its weights, so a failure
// at any step leaves no file behind (interop.md §16, docs/import.md).
#include "base/Error.h"
#include "base/TensorIO.h"
#include "import/OnnxImport.h"
#include "tools/dnnc/Driver.h"

#include <fmt/format.h>

#include <cctype>
#include <filesystem>
#include <iostream>

namespace dnnc::tool {

int importOnnx(const std::string &file, const std::string &out, const std::string &weightsOut, const std::string &modelName) {
  bool identifier = !modelName.empty() && !std::isdigit(static_cast<unsigned char>(modelName[0]));
  for (char c : modelName)
    identifier = identifier && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  if (!identifier) {
    std::cerr << "dnnc: error: --model-name '" << modelName << "' is not an identifier\n";
    return kUsage;
  }
  namespace fs = std::filesystem;
  onnx::ImportOptions opts;
  opts.modelName = modelName;
  opts.sourceName = file;
  opts.outputName = fs::path(out).filename().string();
  opts.weightsName = fs::path(weightsOut).filename().string();
  onnx::ImportResult result;
  try {
    result = onnx::importModel(onnx::readModel(rt::readFile(file), file), opts);
  } catch (const DataError &e) {
    std::cerr << "dnnc: error: " << e.what() << "\n";
    return kUserError;
  }
  // The source must check before anything is written: an import that the language cannot
  // hold is reported, not left for `dnnc run` to find.
  Program p;
  DiagnosticEngine diags(p.sources());
  if (!p.loadText(out, result.source, diags)) {
    std::cerr << "dnnc: error: " << file << ": the translated model does not type-check; nothing was written:\n";
    diags.render(std::cerr);
    std::cerr << "--- the translation ---\n" << result.source;
    return kUserError;
  }
  try {
    if (!result.weights.empty())
      rt::writeSafetensors(weightsOut, result.weights);
    rt::writeFileAtomically(out, result.source);
  } catch (const DataError &e) {
    std::error_code ec;
    if (!result.weights.empty())
      fs::remove(weightsOut, ec); // no half an import
    std::cerr << "dnnc: error: " << e.what() << "\n";
    return kUserError;
  }
  ModelInfo *m = p.model(modelName);
  size_t inputs = 0;
  if (m)
    for (const NamedValue &v : m->values)
      inputs += v.role == "input";
  std::cout << fmt::format("imported {} -> {} (model '{}', {} input{}, {} param{}{})\n", file, out, modelName, inputs,
                           inputs == 1 ? "" : "s", result.weights.size(), result.weights.size() == 1 ? "" : "s",
                           result.weights.empty() ? "" : " -> " + weightsOut);
  return kOk;
}

} // namespace dnnc::tool
