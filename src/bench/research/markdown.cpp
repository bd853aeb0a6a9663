#include "bench/research/markdown.h"

#include <fmt/format.h>

namespace moe::bench {

std::string MarkdownTable::str() const {
  auto line = [](const std::vector<std::string>& cells) {
    std::string s = "|";
    for (const std::string& c : cells) s += " " + c + " |";
    return s + "\n";
  };
  std::vector<std::string> rule;
  for (bool n : numeric) rule.push_back(n ? "---:" : "---");
  std::string s = line(head);
  s += line(rule);
  for (const auto& r : rows) s += line(r);
  return s;
}

}  // namespace moe::bench
