// Clang-style rendering of diagnostics and the source-file store they point into.
#include "base/Diagnostics.h"
#include "base/Utf8.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>
#include <vector>

namespace dnnc {

int SourceManager::add(std::string path, std::string text) {
  // A lone CR ends a line (old Mac files), as CRLF and LF do: the lexer counts LFs only.
  for (size_t k = 0; k < text.size(); ++k)
    if (text[k] == '\r' && (k + 1 == text.size() || text[k + 1] != '\n'))
      text[k] = '\n';
  files_.push_back({std::move(path), std::move(text)});
  return static_cast<int>(files_.size()) - 1;
}

int SourceManager::find(const std::string &path) const {
  for (size_t i = 0; i < files_.size(); ++i)
    if (files_[i].path == path)
      return static_cast<int>(i);
  return -1;
}

std::string SourceManager::line(int file, int line) const {
  const std::string &t = text(file);
  size_t pos = 0;
  for (int l = 1; l < line && pos != std::string::npos; ++l) {
    pos = t.find('\n', pos);
    if (pos != std::string::npos)
      ++pos;
  }
  if (pos == std::string::npos || pos > t.size())
    return "";
  size_t end = t.find('\n', pos);
  std::string s = t.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
  if (!s.empty() && s.back() == '\r')
    s.pop_back();
  return s;
}

const char *diagTag(DiagKind k) {
  switch (k) {
#define DIAG(name, tag, help)                                                                                          \
  case DiagKind::name: return tag;
#include "base/DiagnosticKinds.def"
#undef DIAG
  }
  return "unknown";
}

std::vector<DiagKind> allDiagKinds() {
  return {
#define DIAG(name, tag, help) DiagKind::name,
#include "base/DiagnosticKinds.def"
#undef DIAG
  };
}

void fail(DiagKind kind, SourceRange range, std::string message, std::vector<Note> notes) {
  throw CompileError(Diagnostic{kind, range, std::move(message), std::move(notes)});
}

std::string DiagnosticEngine::location(SourceLoc loc) const {
  if (!loc.valid())
    return "dnnc"; // no place in a file: the tool itself speaks
  return fmt::format("{}:{}:{}", sm_.path(loc.file), loc.line, loc.col);
}

std::string DiagnosticEngine::snippet(const SourceRange &r) const {
  SourceLoc caret = r.caret.valid() ? r.caret : r.begin;
  if (!caret.valid())
    return "";
  // One column per character keeps the caret aligned; bytes that are not well-formed
  // UTF-8 and control characters print as '?', never raw.
  std::string raw = sm_.line(caret.file, caret.line);
  std::vector<std::string> chars;
  for (size_t i = 0; i < raw.size();) {
    size_t len = utf8SequenceLength(raw, i);
    unsigned char c = static_cast<unsigned char>(raw[i]);
    chars.push_back(c == '\t' ? std::string(" ") : len == 0 || c < 0x20 || c == 0x7f ? std::string("?") : raw.substr(i, len));
    i += len ? len : 1;
  }
  if (caret.col < 1)
    caret.col = 1;
  // Underline the part of the range on the caret's line.
  int from = r.begin.line == caret.line ? std::max(r.begin.col, 1) : 1;
  int to = (r.end.valid() && r.end.line == caret.line) ? r.end.col : static_cast<int>(chars.size()) + 1;
  if (to <= from)
    to = from + 1;
  std::string marks(static_cast<size_t>(std::max(to - 1, caret.col)), ' ');
  for (int c = from; c < to; ++c)
    marks[c - 1] = '~';
  marks[caret.col - 1] = '^';
  // A long line (generated code) shows a window around the caret, as clang does.
  constexpr size_t kWidth = 160;
  size_t first = 0, columns = std::max(chars.size(), marks.size());
  if (columns > kWidth && static_cast<size_t>(caret.col) > kWidth / 2)
    first = std::min(static_cast<size_t>(caret.col) - kWidth / 2, columns - kWidth);
  size_t last = std::min(first + kWidth, chars.size());
  std::string text = first ? "..." : "";
  for (size_t k = first; k < last; ++k)
    text += chars[k];
  if (last < chars.size())
    text += "...";
  marks = (first ? "   " : "") + (first < marks.size() ? marks.substr(first, kWidth) : std::string());
  while (!marks.empty() && marks.back() == ' ')
    marks.pop_back();
  return fmt::format("{:>5} | {}\n      | {}\n", caret.line, text, marks);
}

std::string DiagnosticEngine::render(const Diagnostic &d) const {
  SourceLoc at = d.range.caret.valid() ? d.range.caret : d.range.begin;
  std::string out = fmt::format("{}: error: {} [{}]\n", location(at), d.message, diagTag(d.kind));
  out += snippet(d.range);
  for (const Note &n : d.notes) {
    SourceLoc nat = n.range.caret.valid() ? n.range.caret : n.range.begin;
    out += n.range.valid() ? fmt::format("{}: note: {}\n", location(nat), n.message) : fmt::format("note: {}\n", n.message);
  }
  return out;
}

void DiagnosticEngine::render(std::ostream &os) const {
  for (const Diagnostic &d : diags_)
    os << render(d);
}

} // namespace dnnc
