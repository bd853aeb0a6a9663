// Numeric command-line options, read by moe/parse.h instead of CLI11. CLI11 clamps an out-of-range
// number silently (a 20-digit --tokens became INT64_MAX, --seed -1 and 2^70 both became 2^64-1), so
// these options are taken as text and converted after parsing, rejecting what the seed's argparse
// would not turn into a valid value.
#pragma once

#include <CLI/CLI.hpp>
#include <deque>
#include <functional>
#include <string>
#include <string_view>

#include "moe/parse.h"
#include "moe/status.h"

namespace moe::bench {

class NumericFlags {
 public:
  explicit NumericFlags(CLI::App& app) : app_(app) {}

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
