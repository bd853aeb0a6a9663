// How an enum's values are spelled on the command line, in rows and in stores: one table per enum, read
// both ways, and listed where a flag's --help or error line names the choices.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace moe {

template <typename Enum, size_t N>
struct NameTable {
  std::array<std::pair<Enum, const char*>, N> entries;

  const char* name(Enum v) const {
    for (auto& [e, s] : entries)
      if (e == v) return s;
    return "?";
  }
  std::optional<Enum> parse(std::string_view s) const {
    for (auto& [e, n] : entries)
      if (s == n) return e;
    return std::nullopt;
  }
  // The names in order, `separator` between them ("a|b|c", "a, b, c").
  std::string joined(std::string_view separator) const {
    std::string out;
    for (auto& [e, n] : entries) out += (out.empty() ? "" : std::string(separator)) + n;
    return out;
  }
};

}  // namespace moe
