// A .dnn text through the frontend, for unit tests: the program, whether it checked, and
// the rendered diagnostics when it did not.
#pragma once

#include "base/Diagnostics.h"
#include "frontend/Sema.h"

#include <memory>
#include <sstream>
#include <string>

namespace dnnc::test {

struct CheckedProgram {
  Program program;
  std::string errors;
  bool ok = false;
  ir::Graph &graph() { return *program.models().at(0).graph; }
  const sym::Analyzer &analyzer() { return program.models().at(0).analyzer; }
};

inline std::unique_ptr<CheckedProgram> checkProgram(const std::string &text) {
  auto c = std::make_unique<CheckedProgram>();
  DiagnosticEngine diags(c->program.sources());
  c->ok = c->program.loadText("test.dnn", text, diags);
  std::ostringstream os;
  diags.render(os);
  c->errors = os.str();
  return c;
}

} // namespace dnnc::test
