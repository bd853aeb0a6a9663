// Every flag a list (llama-bench's habit): a comma list given to a flag that describes a run makes it a
// sweep axis, and the command runs the cartesian product of its axes, one "point" per combination.
//
//   moe-bench --tokens 256,512 --dtype float32,bfloat16 ...   four points
//   moe-bench --tokens 256-1024*2 ...                          256, 512, 1024
//
// Integer flags also take ranges as list items: first-last (step 1), first-last+step, first-last*factor.
// Loop order: the axes in the order their flags first appear (a plan: the order of its "axes"), the
// first outermost; inside each point the seed's own loop runs unchanged (distribution -> topk -> impl ->
// null fraction -> queue mode), so the seed's list flags keep their meaning and are not axes:
// --topk-list, --null-route-frac-list (and --null-route-sweep, and "both" of --impl, --distribution and
// --queue-mode). The output flags (--out, --format, --dump, --trace-dir) and --list, --help, --version
// take one value: a comma in a path is a comma. A repeated flag counts once, with its last value, as
// argparse reads it. A flag without a value (--check) is swept as --check=false,true.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/harness/options.h"
#include "moe/status.h"

namespace moe::bench {

constexpr size_t kMaxPoints = 100000;
// The longest value a list item may hold (names, numbers; paths are no axis), and the most bytes the
// points' arguments may take in all.
constexpr size_t kMaxValueLength = 1024;
constexpr size_t kMaxPointBytes = size_t(256) << 20;

struct Point {
  std::vector<std::string> args;                          // the point's arguments (no program name)
  std::vector<std::pair<std::string, std::string>> axes;  // (flag, value) per axis, outermost first
};

// Every flag of moe-bench (options.h parse_options).
const std::vector<FlagSpec>& flag_specs();
const FlagSpec* find_flag(std::string_view name);

// argparse's abbreviations, which the seed's scripts may use: a long flag that names no flag but begins
// exactly one (`--tok 1024`, `--tok=1024`) is that flag. Where it begins several, the one flag of the
// seed's script among them wins (a seed command stays unambiguous beside our extra flags); otherwise it is
// argparse's error, "ambiguous option: --t could match --tokens, --topk, ...". Other words stay as they are.
Status expand_abbreviations(std::vector<std::string>& args);
// Whether a comma list given to `flag` is a sweep axis (see above).
bool is_axis_flag(std::string_view flag);

// The items of one list value of `flag` ("1, 2,8-32*2" -> 1 2 8 16 32); blank items are skipped, as in
// the seed's lists.
Status expand_list(const FlagSpec& flag, std::string_view text, std::vector<std::string>& values);

// The points of a command line (without the program name). Arguments that are not axes pass through
// unchanged: parse_options judges them.
Status expand_axes(const std::vector<std::string>& args, std::vector<Point>& points);

}  // namespace moe::bench
