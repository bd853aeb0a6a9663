// The command line's flags as one table: each flag is declared once (its name, help, default and how its
// text becomes a value), and from that row come the parsing, --help (with the default and, for names, the
// choices), the error line for a bad value and the sweep's axes (every flag that takes a value is one:
// options.h's FlagSpec). Numbers and names are taken as text and converted after CLI11 parses (CLI11
// clamps an out-of-range number silently: a 20-digit --tokens became INT64_MAX, --seed -1 and 2^70 both
// became 2^64-1), rejecting what the seed's argparse would not turn into a valid value.
#pragma once

#include <CLI/CLI.hpp>
#include <deque>
#include <functional>
#include <string>
#include <string_view>

#include "moe/name_table.h"
#include "moe/parse.h"
#include "moe/status.h"

namespace moe::bench {

class FlagTable {
 public:
  explicit FlagTable(CLI::App& app) : app_(app) {}

  // An integer option accepted in [lo, hi] and stored in `target` (any integer type holding that range).
  template <typename Int>
  CLI::Option* add(const std::string& name, Int& target, const std::string& help, int64_t lo, int64_t hi) {
    // The type name marks integer flags, whose sweep lists may hold ranges (src/bench/research/axes.h).
    return add_text(name, std::to_string(target), help,
                    [&target, name, lo, hi](std::string_view text) {
                      int64_t v = 0;
                      MOE_RETURN_IF_ERROR(parse_int(name, text, lo, hi, v));
                      target = static_cast<Int>(v);
                      return Status::ok();
                    })
        ->type_name("INT");
  }
  CLI::Option* add(const std::string& name, double& target, const std::string& help);

  // One of `names`' names: --help says them before `help`, and a name outside them is one line listing
  // them.
  template <typename Enum, size_t N>
  CLI::Option* add_name(const std::string& name, Enum& target, const NameTable<Enum, N>& names,
                        const std::string& help) {
    return add_text(name, names.name(target), names.joined("|") + (help.empty() ? "" : ": " + help),
                    [&target, &names, name](std::string_view text) {
                      return parse_enum(
                          name, text, [&](std::string_view s) { return names.parse(s); }, names.joined(", "),
                          target);
                    });
  }

  // Converts the options given on the command line (the others keep their defaults). Call after
  // CLI::App::parse.
  Status convert() const;

 private:
  struct Flag {
    std::string name, text;
    std::function<Status(std::string_view)> store;
  };
  CLI::Option* add_text(const std::string& name, std::string default_text, const std::string& help,
                        std::function<Status(std::string_view)> store);

  CLI::App& app_;
  std::deque<Flag> flags_;  // a deque: CLI11 keeps a pointer to each flag's text
};

}  // namespace moe::bench
