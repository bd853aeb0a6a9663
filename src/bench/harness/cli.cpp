#include "bench/harness/cli.h"

#include <fmt/format.h>

#include <cstdio>

#include "moe/comm.h"

namespace moe::bench {

int fail(const Status& s) {
  fmt::print(stderr, "moe-bench: error: {}\n", s.message());
  return 2;
}

Status parse_cli(CLI::App& app, int argc, char** argv, bool& exit_ok) {
  exit_ok = false;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    // Under mpirun every rank parses; one copy of the help is enough.
    if (launched_rank() == 0) std::fputs(app.help().c_str(), stdout);
    exit_ok = true;
  } catch (const CLI::CallForVersion& e) {
    if (launched_rank() == 0) std::puts(e.what());
    exit_ok = true;
  } catch (const CLI::ExtrasError& e) {
    // argparse's words, the arguments in the order given (CLI11 lists them last first).
    std::string extras;
    for (const std::string& a : app.remaining()) extras += (extras.empty() ? "" : " ") + a;
    return Status::error("unrecognized arguments: " + extras);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    for (char& ch : msg)
      if (ch == '\n') ch = ' ';
    return Status::error(msg);
  }
  return Status::ok();
}

std::string shell_quote(const std::vector<std::string>& args) {
  std::string s;
  for (const std::string& a : args) {
    const bool plain = !a.empty() && a.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789_-+=.,:/@%") == std::string::npos;
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    s += (s.empty() ? "" : " ") + (plain ? a : q + "'");
  }
  return s;
}

}  // namespace moe::bench
