// Names of tensors in weights files (interop.md §15): a param's `from "..."` name, whose
// `{placeholders}` stack per-layer tensors on the param's leading axes, and the edit
// distance that suggests the file's names closest to a missing one. Used by sema (to check
// a name where it is written) and by the weights loader (to expand it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dnnc {

struct FromName {
  std::vector<std::string> text;         // literal pieces: one more than `slots`
  std::vector<size_t> slots;             // between text[k] and text[k + 1]: a placeholder's axis
  std::vector<std::string> placeholders; // distinct names, in order of first appearance: axis 0, 1, ...
  std::vector<size_t> offsets;           // where each placeholder first appears in the pattern

  // The name with placeholder k replaced by index[k] (index has placeholders.size() entries).
  std::string expand(const std::vector<int64_t> &index) const;
  // The pattern again ("encoder.layer.{l}.weight").
  std::string pattern() const;
};

// A tensor name as a pattern that stands for itself: its braces doubled ("{{" is a literal
// "{" in a pattern, as in Python's str.format).
std::string escapeBraces(const std::string &name);

// `text` as a .dnn string literal: in quotes, with its quotes and backslashes escaped (\"
// and \\, which the parser reads back).
std::string quoteString(const std::string &text);

// Parses `pattern` into `out`; returns an error (empty when the pattern is fine) and, in
// `at`, the byte offset of the trouble.
std::string parseFromName(const std::string &pattern, FromName &out, size_t &at);

size_t editDistance(const std::string &a, const std::string &b);
// Up to `n` of `candidates` closest to `name` by edit distance (ties: in name order), each
// within half of the longer name's length: what a "did you mean" lists.
std::vector<std::string> closestNames(const std::string &name, const std::vector<std::string> &candidates, size_t n);

} // namespace dnnc
