// Diagnostics as data: kinds declared once, rendered clang-style by one consumer.
#pragma once

#include "base/Error.h"
#include "base/Source.h"

#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace dnnc {

enum class DiagKind {
#define DIAG(name, tag, help) name,
#include "base/DiagnosticKinds.def"
#undef DIAG
};
const char *diagTag(DiagKind k);
std::vector<DiagKind> allDiagKinds();

struct Note {
  SourceRange range;
  std::string message;
};

struct Diagnostic {
  DiagKind kind;
  SourceRange range;
  std::string message;
  std::vector<Note> notes;
};

// Thrown to abandon compilation at the first error a stage cannot recover from.
struct CompileError : std::runtime_error {
  Diagnostic diag;
  explicit CompileError(Diagnostic d) : std::runtime_error(d.message), diag(std::move(d)) {}
};

[[noreturn]] void fail(DiagKind kind, SourceRange range, std::string message, std::vector<Note> notes = {});

class DiagnosticEngine {
public:
  explicit DiagnosticEngine(const SourceManager &sm) : sm_(sm) {}
  void report(Diagnostic d) { diags_.push_back(std::move(d)); }
  bool hasErrors() const { return !diags_.empty(); }
  const std::vector<Diagnostic> &diagnostics() const { return diags_; }
  void render(std::ostream &os) const;
  std::string render(const Diagnostic &d) const;

private:
  std::string location(SourceLoc loc) const;
  std::string snippet(const SourceRange &r) const;
  const SourceManager &sm_;
  std::vector<Diagnostic> diags_;
};

} // namespace dnnc
