// Parses one .dnn file into the AST; syntax errors become `parse-error` diagnostics.
#pragma once

#include "frontend/Ast.h"
#include "base/Diagnostics.h"

namespace dnnc {

// Returns null when the file has syntax errors (each reported to `diags`).
std::unique_ptr<ast::Module> parseModule(const SourceManager &sm, int file, DiagnosticEngine &diags);

// Parses `file` as one expression (REPL input); null on syntax errors.
ast::ExprPtr parseExpression(const SourceManager &sm, int file, DiagnosticEngine &diags);

} // namespace dnnc
