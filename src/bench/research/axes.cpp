#include "bench/research/axes.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <regex>
#include <set>

#include "moe/parse.h"

namespace moe::bench {
namespace {

// first-last, first-last+step, first-last*factor (integers, possibly negative).
Status expand_range(const FlagSpec& flag, std::string_view item, std::vector<std::string>& values,
                    bool& matched) {
  static const std::regex kRange(R"(^(-?[0-9]+)-(-?[0-9]+)(?:([+*])([0-9]+))?$)");
  std::cmatch m;
  matched = std::regex_match(item.begin(), item.end(), m, kRange);
  if (!matched) return Status::ok();
  const std::string what = flag.name + " range";
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min() / 4,
                    kMax = std::numeric_limits<int64_t>::max() / 4;
  int64_t first = 0, last = 0, step = 1;
  MOE_RETURN_IF_ERROR(parse_int(what, m[1].str(), kMin, kMax, first));
  MOE_RETURN_IF_ERROR(parse_int(what, m[2].str(), kMin, kMax, last));
  const bool times = m[3].matched && m[3].str() == "*";
  if (m[4].matched) MOE_RETURN_IF_ERROR(parse_int(what, m[4].str(), 0, kMax, step));
  if (first > last) return invalid_value(what, item, "first > last");
  if (times && (step < 2 || first < 1))
    return invalid_value(what, item, "first-last*factor needs first >= 1 and factor >= 2");
  if (!times && step < 1) return invalid_value(what, item, "first-last+step needs step >= 1");
  for (int64_t v = first; v <= last; v = times ? v * step : v + step) {
    if (values.size() >= kMaxPoints)
      return invalid_value(what, item, fmt::format("over {} values", kMaxPoints));
    values.push_back(std::to_string(v));
  }
  return Status::ok();
}

struct Occurrence {
  size_t index = 0;           // of the token holding the value
  bool inline_value = false;  // --flag=value
  bool has_value = false;
  std::string value;
};

}  // namespace

const std::vector<FlagSpec>& flag_specs() {
  static const std::vector<FlagSpec> specs = [] {
    std::vector<FlagSpec> s;
    BenchOptions unused;
    bool exit_ok = false;
    char program[] = "moe-bench";
    char* argv[] = {program};
    MOE_CHECK(parse_options(1, argv, unused, exit_ok, &s), "listing the flags parses nothing");
    return s;
  }();
  return specs;
}

const FlagSpec* find_flag(std::string_view name) {
  for (const FlagSpec& f : flag_specs())
    if (f.name == name) return &f;
  return nullptr;
}

Status expand_abbreviations(std::vector<std::string>& args) {
  // The flags of the seed's script (docs/harness-spec.md §1, both branches), argparse's --help with them.
  static const std::set<std::string_view> kSeedFlags = {"--backend",
                                                        "--bench-pass",
                                                        "--capacity-factor",
                                                        "--capacity-policy",
                                                        "--dispatch-permute-mode",
                                                        "--distribution",
                                                        "--dtype",
                                                        "--ep-comm-path",
                                                        "--experts",
                                                        "--hidden",
                                                        "--impl",
                                                        "--iters",
                                                        "--mlp-dim",
                                                        "--null-experts",
                                                        "--null-route-frac",
                                                        "--null-route-frac-list",
                                                        "--null-route-seed",
                                                        "--null-route-sweep",
                                                        "--null-routing-mode",
                                                        "--parallel-mode",
                                                        "--quant-mode",
                                                        "--queue-mode",
                                                        "--remat-mode",
                                                        "--renormalize-real-after-null",
                                                        "--routing-pack-strategy",
                                                        "--run-alpha",
                                                        "--run-noise-scale",
                                                        "--seed",
                                                        "--shared-expert-dim",
                                                        "--shared-fused",
                                                        "--stage-timing",
                                                        "--tokens",
                                                        "--topk",
                                                        "--topk-list",
                                                        "--trace-dir",
                                                        "--use-custom-sort-vjp",
                                                        "--warmup",
                                                        "--help"};
  for (std::string& a : args) {
    if (a.size() <= 2 || a.rfind("--", 0) != 0) continue;
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq);
    if (find_flag(name)) continue;
    std::vector<std::string_view> begun, seed_begun;
    for (const FlagSpec& f : flag_specs())
      if (f.name.rfind(name, 0) == 0) {
        begun.push_back(f.name);
        if (kSeedFlags.count(f.name)) seed_begun.push_back(f.name);
      }
    if (begun.size() > 1 && seed_begun.size() == 1) begun = seed_begun;
    if (begun.size() > 1) {
      std::string all;
      for (std::string_view b : begun) all += (all.empty() ? "" : ", ") + std::string(b);
      return Status::error(fmt::format("ambiguous option: {} could match {}", name, all));
    }
    if (begun.size() == 1) a = std::string(begun.front()) + (eq == std::string::npos ? "" : a.substr(eq));
  }
  return Status::ok();
}

bool is_axis_flag(std::string_view flag) {
  static const std::vector<std::string_view> kOneValue = {
      "--out",  "--format", "--dump",    "--trace-dir",   "--topk-list", "--null-route-frac-list",
      "--list", "--help",   "--version", "--tuning-file", "--mesh"};
  return std::find(kOneValue.begin(), kOneValue.end(), flag) == kOneValue.end();
}

Status expand_list(const FlagSpec& flag, std::string_view text, std::vector<std::string>& values) {
  values.clear();
  for (std::string_view item : list_items(text)) {
    // Each value is checked on its own before any product of the lists is made: every point holds a copy
    // of every value, so one huge value crossed with a range would take gigabytes before the first
    // point's parse refused it.
    if (item.size() > kMaxValueLength)
      return invalid_value(
          flag.name + " entry", item.substr(0, 32),
          fmt::format("{} characters, more than any value takes ({})", item.size(), kMaxValueLength));
    bool range = false;
    if (flag.integer) MOE_RETURN_IF_ERROR(expand_range(flag, item, values, range));
    if (!range) values.emplace_back(item);
  }
  return Status::ok();
}

Status expand_axes(const std::vector<std::string>& args, std::vector<Point>& points) {
  std::vector<std::string> order;  // flags by first appearance
  std::map<std::string, Occurrence> last;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& tok = args[i];
    if (tok.rfind("--", 0) != 0 || tok == "--") continue;
    const size_t eq = tok.find('=');
    const std::string name = tok.substr(0, eq);
    const FlagSpec* spec = find_flag(name);
    Occurrence occ;
    if (eq != std::string::npos) {
      occ = {i, true, true, tok.substr(eq + 1)};
    } else if (spec && spec->takes_value && i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      occ = {i + 1, false, true, args[i + 1]};
      ++i;
    }
    if (!last.count(name)) order.push_back(name);
    last[name] = occ;
  }

  struct Axis {
    std::string flag;
    Occurrence at;
    std::vector<std::string> values;
  };
  std::vector<Axis> axes;
  std::vector<std::string> base = args;
  size_t total = 1;
  for (const std::string& name : order) {
    const Occurrence& occ = last[name];
    const FlagSpec* spec = find_flag(name);
    if (!spec || !occ.has_value || !is_axis_flag(name)) continue;
    std::vector<std::string> values;
    MOE_RETURN_IF_ERROR(expand_list(*spec, occ.value, values));
    if (values.size() == 1 && values[0] != occ.value)  // "4," or "4-4": one clean value, not an axis
      base[occ.index] = occ.inline_value ? name + "=" + values[0] : values[0];
    if (values.size() < 2) continue;
    if (total > kMaxPoints / values.size())
      return Status::error(fmt::format("the flags' lists make over {} points", kMaxPoints));
    total *= values.size();
    axes.push_back({name, occ, std::move(values)});
  }

  // Every point copies the arguments: a long value anywhere (a path too) times many points is refused
  // before the copies are made.
  size_t point_bytes = 0;
  for (const std::string& a : base) point_bytes += a.size() + sizeof(std::string);
  for (const Axis& axis : axes) {
    size_t longest = 0;
    for (const std::string& v : axis.values) longest = std::max(longest, v.size());
    point_bytes += longest + axis.flag.size();
  }
  if (total * point_bytes > kMaxPointBytes)
    return Status::error(fmt::format(
        "the flags' lists make {} points of {} bytes of arguments each, over {} MiB in all: shorten the "
        "values or the lists",
        total, point_bytes, kMaxPointBytes >> 20));
  points.clear();
  std::vector<size_t> at(axes.size(), 0);
  for (size_t n = 0; n < total; ++n) {
    Point p{base, {}};
    for (size_t a = 0; a < axes.size(); ++a) {
      const Axis& axis = axes[a];
      const std::string& v = axis.values[at[a]];
      p.args[axis.at.index] = axis.at.inline_value ? axis.flag + "=" + v : v;
      p.axes.emplace_back(axis.flag, v);
    }
    points.push_back(std::move(p));
    // The innermost axis (the last) turns fastest.
    for (size_t a = axes.size(); a-- > 0;) {
      if (++at[a] < axes[a].values.size()) break;
      at[a] = 0;
    }
  }
  return Status::ok();
}

}  // namespace moe::bench
