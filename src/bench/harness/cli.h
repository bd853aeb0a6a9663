// What every moe-bench command shares on its command line. Exit codes (README): 0 ok, 1 a --check failed
// or a result was not finite, 2 bad input, reported as one line "moe-bench: error: ..." on stderr.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "moe/status.h"

namespace moe::bench {

// Prints `s` as the one error line and returns exit code 2.
int fail(const Status& s);

// Parses argv with `app`: --help and --version print on stdout and set `exit_ok`; a CLI11 parse error
// becomes a one-line Status.
Status parse_cli(CLI::App& app, int argc, char** argv, bool& exit_ok);

// The command line as a shell would need it typed back (single quotes where needed).
std::string shell_quote(const std::vector<std::string>& args);

}  // namespace moe::bench
