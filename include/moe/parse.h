// Text to values for every flag and comma list in the tree, with one error style:
//   invalid <what> '<text>': <reason>
// where <what> is the flag ("--tokens") or a list's item ("--topk-list entry").
//
// Numbers are read the way the seed's argparse reads them (Python's int() and float()): surrounding
// whitespace, an optional sign, '_' between digits; a float may be "inf" or "nan" and overflows to
// inf. Anything else is an error, and so is an integer outside [lo, hi]: values are never clamped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moe/status.h"

namespace moe {

Status parse_int(std::string_view what, std::string_view text, int64_t lo, int64_t hi, int64_t& out);
Status parse_double(std::string_view what, std::string_view text, double& out);

// One of a fixed set of names; `parse` maps a name to the enum and returns nullopt for an unknown one.
// `choices` lists the names for the message ("random, runs, both").
template <typename Enum, typename Parse>
Status parse_enum(std::string_view what, std::string_view text, Parse parse, std::string_view choices,
                  Enum& out);

// Comma lists ("1, 2,,4"): items are trimmed and blank items skipped, as the seed does; every item is
// read as above and reported as "<flag> entry". An empty list leaves `out` empty.
Status parse_int_list(std::string_view flag, std::string_view text, int64_t lo, int64_t hi,
                      std::vector<int64_t>& out);
Status parse_double_list(std::string_view flag, std::string_view text, std::vector<double>& out);
template <typename Enum, typename Parse>
Status parse_enum_list(std::string_view flag, std::string_view text, Parse parse, std::string_view choices,
                       std::vector<Enum>& out);

// The deepest nesting of arrays and objects in JSON text (brackets inside strings do not count); text that
// is not JSON gets some number. JSON readers refuse text deeper than kMaxJsonDepth before parsing it:
// nlohmann's values free their children recursively, and a row nested 100,000 levels deep overflowed
// the stack.
inline constexpr int64_t kMaxJsonDepth = 256;
int64_t json_depth(std::string_view text);

// The non-blank, trimmed items of a comma list.
std::vector<std::string_view> list_items(std::string_view text);

// Reads every item of a comma list with parse_item(what, item, value&) -> Status, where what is
// "<flag> entry"; the first bad item's Status is returned.
template <typename T, typename ParseItem>
Status parse_list(std::string_view flag, std::string_view text, std::vector<T>& out, ParseItem parse_item) {
  out.clear();
  const std::string what = std::string(flag) + " entry";
  for (std::string_view item : list_items(text)) {
    T v{};
    MOE_RETURN_IF_ERROR(parse_item(what, item, v));
    out.push_back(v);
  }
  return Status::ok();
}

Status invalid_value(std::string_view what, std::string_view text, std::string_view reason);

template <typename Enum, typename Parse>
Status parse_enum(std::string_view what, std::string_view text, Parse parse, std::string_view choices,
                  Enum& out) {
  auto v = parse(text);
  if (!v) return invalid_value(what, text, std::string("expected one of ") + std::string(choices));
  out = *v;
  return Status::ok();
}

template <typename Enum, typename Parse>
Status parse_enum_list(std::string_view flag, std::string_view text, Parse parse, std::string_view choices,
                       std::vector<Enum>& out) {
  return parse_list(flag, text, out, [&](std::string_view what, std::string_view item, Enum& v) {
    return parse_enum(what, item, parse, choices, v);
  });
}

}  // namespace moe
