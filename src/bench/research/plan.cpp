#include "bench/research/plan.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>

#include "bench/research/axes.h"
#include "moe/file_io.h"
#include "moe/parse.h"

namespace moe::bench {
namespace {

using Json = nlohmann::ordered_json;

// Flags a plan cannot hold: where rows go is the command line's business, and the rest runs nothing.
bool plan_may_set(const std::string& flag) {
  for (const char* f : {"--out", "--format", "--list", "--help", "--version"})
    if (flag == f) return false;
  return true;
}

Status scalar_text(const std::string& where, const Json& v, std::string& text) {
  if (v.is_string())
    text = v.get<std::string>();
  else if (v.is_boolean())
    text = v.get<bool>() ? "true" : "false";
  else if (v.is_number())
    text = v.dump();  // integers as integers, floats in their shortest round-trip form
  else
    return Status::error(fmt::format("{}: expected a string, number or true/false, got {}", where, v.dump()));
  return Status::ok();
}

class PlanReader {
 public:
  explicit PlanReader(std::string path) : path_(std::move(path)) {}

  Status flag_of(const std::string& section, const std::string& key, const FlagSpec*& spec) const {
    const std::string flag = "--" + key;
    spec = find_flag(flag);
    if (key.rfind("-", 0) == 0 || !spec)
      return error(
          fmt::format("\"{}\" in \"{}\" is not a moe-bench flag (keys are flag names without the "
                      "leading dashes; see moe-bench --help)",
                      key, section));
    if (!plan_may_set(flag))
      return error(fmt::format("\"{}\" cannot be set in a plan: give {} on the command line", key, flag));
    return Status::ok();
  }

  // One value of `key`; a comma would silently turn it into a list (or an axis).
  Status value_text(const std::string& where, const FlagSpec& spec, const Json& v, std::string& text) const {
    MOE_RETURN_IF_ERROR(scalar_text(fmt::format("plan {}: {}", path_, where), v, text));
    if (is_axis_flag(spec.name) && text.find(',') != std::string::npos)
      return error(
          fmt::format("{}: value \"{}\" holds a comma; a list of values belongs in \"axes\"", where, text));
    return Status::ok();
  }

  Status fixed(const Json& section, std::vector<std::string>& args) const {
    for (auto it = section.begin(); it != section.end(); ++it) {
      const FlagSpec* spec = nullptr;
      MOE_RETURN_IF_ERROR(flag_of("fixed", it.key(), spec));
      const std::string where = fmt::format("fixed \"{}\"", it.key());
      std::string text;
      if (it.value().is_array()) {
        if (is_axis_flag(spec->name))
          return error(fmt::format("{} is a list; a list of values belongs in \"axes\"", where));
        for (const Json& item : it.value()) {
          std::string one;
          MOE_RETURN_IF_ERROR(value_text(where, *spec, item, one));
          text += (text.empty() ? "" : ",") + one;
        }
      } else {
        MOE_RETURN_IF_ERROR(value_text(where, *spec, it.value(), text));
      }
      args.push_back(spec->name + "=" + text);
    }
    return Status::ok();
  }

  Status axes(const Json& section, const Json& fixed_section, std::vector<std::string>& args) const {
    for (auto it = section.begin(); it != section.end(); ++it) {
      const FlagSpec* spec = nullptr;
      MOE_RETURN_IF_ERROR(flag_of("axes", it.key(), spec));
      const std::string where = fmt::format("axes \"{}\"", it.key());
      if (!is_axis_flag(spec->name))
        return error(fmt::format("{}: {} takes one value, it cannot be an axis", where, spec->name));
      if (fixed_section.contains(it.key()))
        return error(fmt::format("\"{}\" is both fixed and an axis", it.key()));
      if (!it.value().is_array() || it.value().empty())
        return error(fmt::format("{}: expected a non-empty array of values", where));
      std::string text;
      for (const Json& item : it.value()) {
        std::string one;
        MOE_RETURN_IF_ERROR(value_text(where, *spec, item, one));
        text += (text.empty() ? "" : ",") + one;
      }
      // One value is a fixed value; the trailing comma keeps a single-valued axis from being read as
      // a range.
      args.push_back(spec->name + "=" + text + (it.value().size() == 1 ? "," : ""));
    }
    return Status::ok();
  }

  Status error(const std::string& message) const {
    return Status::error(fmt::format("plan {}: {}", path_, message));
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The plan's JSON. nlohmann keeps the last of duplicate keys; a plan that says a thing twice is
// refused instead, as is a number no double holds (nlohmann's out_of_range, not a parse_error).
Status parse_plan(const PlanReader& plan, const std::string& text, Json& j) {
  std::vector<std::set<std::string>> open;  // the keys of each object being parsed, innermost last
  std::string duplicate;
  auto note = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) open.emplace_back();
    if (event == Json::parse_event_t::object_end) open.pop_back();
    if (event == Json::parse_event_t::key && !open.back().insert(parsed.get<std::string>()).second &&
        duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  if (json_depth(text) > kMaxJsonDepth)
    return plan.error(fmt::format("nested deeper than {} levels", kMaxJsonDepth));
  try {
    j = Json::parse(text, note);
  } catch (const Json::exception& e) {
    return plan.error(fmt::format("not JSON: {}", e.what()));
  }
  if (!duplicate.empty())
    return plan.error(fmt::format("duplicate key \"{}\" (each key once per object)", duplicate));
  return Status::ok();
}

}  // namespace

Status plan_args(const std::string& path, std::vector<std::string>& args) {
  const PlanReader plan(path);
  std::string text;
  if (Status s = read_regular_file(path, 0, text, "plan"); !s)
    return Status::error(fmt::format("{} (cannot be read)", s.message()));
  Json j;
  MOE_RETURN_IF_ERROR(parse_plan(plan, text, j));
  if (!j.is_object()) return plan.error("expected a JSON object with \"fixed\", \"axes\" and \"repeats\"");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "fixed" && it.key() != "axes" && it.key() != "repeats" && it.key() != "description")
      return plan.error(
          fmt::format("unknown key \"{}\" (expected fixed, axes, repeats, description)", it.key()));
  const Json none = Json::object();
  const Json& fixed = j.contains("fixed") ? j["fixed"] : none;
  const Json& axes = j.contains("axes") ? j["axes"] : none;
  if (!fixed.is_object()) return plan.error("\"fixed\" must be an object of flag: value");
  if (!axes.is_object()) return plan.error("\"axes\" must be an object of flag: [values]");
  args.clear();
  MOE_RETURN_IF_ERROR(plan.fixed(fixed, args));
  MOE_RETURN_IF_ERROR(plan.axes(axes, fixed, args));
  if (j.contains("repeats")) {
    if (fixed.contains("repeats") || axes.contains("repeats"))
      return plan.error("\"repeats\" is given twice (top level and in fixed or axes)");
    if (!j["repeats"].is_number_integer())
      return plan.error(fmt::format("\"repeats\": expected an integer, got {}", j["repeats"].dump()));
    args.push_back("--repeats=" + j["repeats"].dump());
  }
  return Status::ok();
}

}  // namespace moe::bench
