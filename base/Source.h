// Source files and locations shared by the parser, the diagnostics and the IR.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace dnnc {

struct SourceLoc {
  int file = -1; // index into SourceManager; -1 means "no location"
  int line = 0, col = 0; // 1-based
  bool valid() const { return file >= 0; }
};

// A span on one or more lines; `caret` marks the exact culprit inside it.
struct SourceRange {
  SourceLoc begin, end, caret; // end is exclusive
  bool valid() const { return begin.valid(); }
};

class SourceManager {
public:
  int add(std::string path, std::string text);
  const std::string &path(int file) const { return files_.at(file).path; }
  const std::string &text(int file) const { return files_.at(file).text; }
  std::string line(int file, int line) const;
  int find(const std::string &path) const;

private:
  struct File {
    std::string path, text;
  };
  std::vector<File> files_;
};

} // namespace dnnc
