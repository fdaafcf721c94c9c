// `from` names and near matches (see WeightNames.h).
#include "base/WeightNames.h"

#include <fmt/format.h>

#include <algorithm>

namespace dnnc {

std::string FromName::expand(const std::vector<int64_t> &index) const {
  std::string out = text[0];
  for (size_t k = 0; k < slots.size(); ++k)
    out += std::to_string(index[slots[k]]) + text[k + 1];
  return out;
}

std::string escapeBraces(const std::string &name) {
  std::string out;
  for (char c : name) {
    out += c;
    if (c == '{' || c == '}')
      out += c;
  }
  return out;
}

std::string quoteString(const std::string &text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string FromName::pattern() const {
  std::string out = escapeBraces(text[0]);
  for (size_t k = 0; k < slots.size(); ++k)
    out += "{" + placeholders[slots[k]] + "}" + escapeBraces(text[k + 1]);
  return out;
}

std::string parseFromName(const std::string &pattern, FromName &out, size_t &at) {
  out = FromName{};
  out.text.emplace_back();
  for (size_t i = 0; i < pattern.size(); ++i) {
    at = i;
    char c = pattern[i];
    if ((c == '{' || c == '}') && i + 1 < pattern.size() && pattern[i + 1] == c) { // {{ and }}: the brace itself
      out.text.back() += c;
      ++i;
      continue;
    }
    if (c == '}')
      return "'}' closes no placeholder (a brace in a name is written twice: '}}')";
    if (c != '{') {
      out.text.back() += c;
      continue;
    }
    size_t close = pattern.find_first_of("{}", i + 1);
    if (close == std::string::npos || pattern[close] == '{')
      return "'{' opens a placeholder that is not closed";
    std::string name = pattern.substr(i + 1, close - i - 1);
    bool ident = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                 std::all_of(name.begin(), name.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; });
    if (!ident)
      return fmt::format("'{{{}}}' is not a placeholder: a placeholder is a name in braces, e.g. {{l}}", name);
    auto it = std::find(out.placeholders.begin(), out.placeholders.end(), name);
    if (it == out.placeholders.end()) {
      out.placeholders.push_back(name);
      out.offsets.push_back(i);
      it = out.placeholders.end() - 1;
    }
    out.slots.push_back(static_cast<size_t>(it - out.placeholders.begin()));
    out.text.emplace_back();
    i = close;
  }
  at = 0;
  if (pattern.empty())
    return "the name is empty";
  return "";
}

size_t editDistance(const std::string &a, const std::string &b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t prev = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cur = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] != b[j - 1])});
      prev = cur;
    }
  }
  return row[b.size()];
}

std::vector<std::string> closestNames(const std::string &name, const std::vector<std::string> &candidates, size_t n) {
  std::vector<std::pair<size_t, std::string>> scored;
  for (const std::string &c : candidates)
    if (size_t d = editDistance(name, c); 2 * d < std::max(name.size(), c.size()))
      scored.push_back({d, c});
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> out;
  for (size_t k = 0; k < scored.size() && k < n; ++k)
    out.push_back(scored[k].second);
  return out;
}

} // namespace dnnc
