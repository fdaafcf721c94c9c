// dnnc import: reads an ONNX model, translates it (import/), type-checks the .dnn it
// made with the frontend, and only then writes the source and its weights, so a failure
// at any step leaves no file behind (interop.md §16, docs/import.md).
#include "base/Error.h"
#include "base/TensorIO.h"
#include "import/OnnxImport.h"
#include "tools/dnnc/Driver.h"

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

namespace po = boost::program_options;

namespace dnnc::tool {

int cmdImport(int argc, char **argv) {
  std::string file, out, weightsOut, modelName = "main";
  po::options_description desc("options");
  desc.add_options()("help,h", "show this help")("output,o", po::value(&out), "the .dnn file to write")(
      "weights-out", po::value(&weightsOut), "the .safetensors file for the params (default: OUT with .safetensors)")(
      "model-name", po::value(&modelName), "the model's name in the .dnn file (default main)");
  po::options_description all = desc;
  all.add_options()("file", po::value(&file), "the .onnx model");
  po::positional_options_description pos;
  pos.add("file", 1);
  const char *usage = "usage: dnnc import MODEL.onnx -o MODEL.dnn [--weights-out W.safetensors] [--model-name M]\n";
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error &e) {
    std::cerr << "dnnc: error: " << e.what() << "\n" << usage << desc;
    return kUsage;
  }
  if (vm.count("help")) {
    std::cout << usage << desc;
    return kOk;
  }
  if (file.empty() || out.empty()) {
    std::cerr << "dnnc: error: " << (file.empty() ? "no input file" : "no -o OUT.dnn") << "\n" << usage << desc;
    return kUsage;
  }
  bool identifier = !modelName.empty() && !std::isdigit(static_cast<unsigned char>(modelName[0]));
  for (char c : modelName)
    identifier = identifier && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  if (!identifier) {
    std::cerr << "dnnc: error: --model-name '" << modelName << "' is not an identifier\n";
    return kUsage;
  }
  namespace fs = std::filesystem;
  if (weightsOut.empty())
    weightsOut = fs::path(out).replace_extension(".safetensors").string();
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
