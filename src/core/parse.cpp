#include "moe/parse.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <optional>

namespace moe {
namespace {

constexpr std::string_view kSpace = " \t\n\r\f\v";

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

bool is_digit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}

// Python's digit grouping ("1_000"): '_' only between two digits. The text without underscores, or
// nullopt when an underscore is misplaced.
std::optional<std::string> without_underscores(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '_') {
      out += s[i];
      continue;
    }
    if (i == 0 || i + 1 == s.size() || !is_digit(s[i - 1]) || !is_digit(s[i + 1])) return std::nullopt;
  }
  return out;
}

}  // namespace

Status invalid_value(std::string_view what, std::string_view text, std::string_view reason) {
  return Status::error(fmt::format("invalid {} '{}': {}", what, text, reason));
}

std::vector<std::string_view> list_items(std::string_view text) {
  std::vector<std::string_view> items;
  while (true) {
    const size_t comma = text.find(',');
    if (std::string_view item = trim(text.substr(0, comma)); !item.empty()) items.push_back(item);
    if (comma == std::string_view::npos) return items;
    text.remove_prefix(comma + 1);
  }
}

Status parse_int(std::string_view what, std::string_view text, int64_t lo, int64_t hi, int64_t& out) {
  const std::optional<std::string> clean = without_underscores(trim(text));
  std::string_view digits = clean ? std::string_view(*clean) : std::string_view();
  const bool negative = !digits.empty() && digits[0] == '-';
  if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) digits.remove_prefix(1);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), is_digit))
    return invalid_value(what, text, "not an integer");
  // The magnitude first, so that INT64_MIN and every overflow are handled without UB.
  uint64_t magnitude = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude);
  const uint64_t limit = negative ? uint64_t(std::numeric_limits<int64_t>::max()) + 1
                                  : uint64_t(std::numeric_limits<int64_t>::max());
  const bool in_int64 = ec == std::errc() && magnitude <= limit;
  const int64_t v = !in_int64 ? 0 : negative ? int64_t(0 - magnitude) : int64_t(magnitude);
  if (!in_int64 || v < lo || v > hi)
    return invalid_value(what, text, fmt::format("out of range, expected an integer in [{}, {}]", lo, hi));
  out = v;
  return Status::ok();
}

Status parse_double(std::string_view what, std::string_view text, double& out) {
  const std::optional<std::string> clean = without_underscores(trim(text));
  std::string_view s = clean ? std::string_view(*clean) : std::string_view();
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);  // from_chars takes '-' only
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || end != s.data() + s.size() || (ec != std::errc() && ec != std::errc::result_out_of_range))
    return invalid_value(what, text, "not a number");
  // Python's float() overflows to inf and underflows to 0; strtod rounds the same way.
  if (ec == std::errc::result_out_of_range) v = std::strtod(std::string(s).c_str(), nullptr);
  out = v;
  return Status::ok();
}

Status parse_int_list(std::string_view flag, std::string_view text, int64_t lo, int64_t hi,
                      std::vector<int64_t>& out) {
  return parse_list(flag, text, out, [&](std::string_view what, std::string_view item, int64_t& v) {
    return parse_int(what, item, lo, hi, v);
  });
}

Status parse_double_list(std::string_view flag, std::string_view text, std::vector<double>& out) {
  return parse_list(flag, text, out, parse_double);
}

int64_t json_depth(std::string_view text) {
  int64_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // an escaped character, '"' included
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace moe
