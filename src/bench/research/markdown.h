// Markdown tables, the form of every report the research tools print (compare, table, log).
#pragma once

#include <string>
#include <vector>

namespace moe::bench {

struct MarkdownTable {
  std::vector<std::string> head;
  std::vector<bool> numeric;  // per column: right-aligned
  std::vector<std::vector<std::string>> rows;

  void column(std::string name, bool is_numeric) {
    head.push_back(std::move(name));
    numeric.push_back(is_numeric);
  }
  std::string str() const;
};

}  // namespace moe::bench
