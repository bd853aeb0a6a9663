#include "bench/research/claims.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "moe/file_io.h"

namespace moe::bench {
namespace {

namespace fs = std::filesystem;

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// Field 22 of /proc/PID/stat: when the process started, in clock ticks since boot; empty when there is
// no such process. (Field 2, the command, may hold spaces and parentheses: count from its last ')'.)
std::string start_time(long pid) {
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(f)), {});
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
  }
  return field;
}

struct Claim {
  std::string run_id, host, start;
  long pid = 0;
};

bool parse_claim(const std::string& line, Claim& c) {
  std::istringstream in(line);
  return bool(in >> c.run_id >> c.host >> c.pid >> c.start);
}

// Whether the claimer still runs: a claim of another host is taken to.
bool alive(const Claim& c, const std::string& here) {
  if (c.host != here) return true;
  if (::kill(pid_t(c.pid), 0) != 0 && errno != EPERM) return false;
  return start_time(c.pid) == c.start;
}

// The claims that still hold, one per line.
std::vector<Claim> live_claims(const std::string& text, const std::string& here) {
  std::vector<Claim> claims;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    Claim c;
    if (parse_claim(line, c) && alive(c, here)) claims.push_back(c);
  }
  return claims;
}

std::string claims_text(const std::vector<Claim>& claims) {
  std::string text;
  for (const Claim& c : claims) text += fmt::format("{} {} {} {}\n", c.run_id, c.host, c.pid, c.start);
  return text;
}

}  // namespace

Claims::Claims(const std::string& store) {
  std::error_code ec;
  const fs::file_type type = fs::status(store, ec).type();
  if (type == fs::file_type::character || type == fs::file_type::fifo) return;
  // One claims file per store, whatever name (a symlink) a sweep gives it.
  const fs::path real = fs::weakly_canonical(store, ec);
  path_ = (ec ? store : real.string()) + ".claims";
}

Status Claims::claim(const std::vector<std::string>& run_ids, StoreIndex& index, Verdict& verdict,
                     std::vector<std::string>& missing) {
  auto decide = [&]() {
    MOE_RETURN_IF_ERROR(index.refresh());
    missing.clear();
    for (const std::string& id : run_ids)
      if (!index.contains(id)) missing.push_back(id);
    verdict = missing.empty() ? Verdict::done : Verdict::mine;
    return Status::ok();
  };
  if (path_.empty()) return decide();
  const std::string here = host_name();
  const long pid = long(::getpid());
  const std::string start = start_time(pid);
  return edit_locked(path_, "sweep claims file", [&](std::string& text) {
    MOE_RETURN_IF_ERROR(decide());
    std::vector<Claim> claims = live_claims(text, here);
    if (verdict == Verdict::mine)
      for (const Claim& c : claims)
        for (const std::string& id : missing)
          if (c.run_id == id && !(c.host == here && c.pid == pid)) verdict = Verdict::taken;
    if (verdict == Verdict::mine)
      for (const std::string& id : missing) claims.push_back({id, here, start, pid});
    text = claims_text(claims);  // expired claims go too
    return Status::ok();
  });
}

Status Claims::release(const std::vector<std::string>& run_ids) {
  if (path_.empty()) return Status::ok();
  const std::string here = host_name();
  const long pid = long(::getpid());
  return edit_locked(path_, "sweep claims file", [&](std::string& text) {
    std::vector<Claim> kept;
    for (const Claim& c : live_claims(text, here))
      if (!(c.host == here && c.pid == pid &&
            std::find(run_ids.begin(), run_ids.end(), c.run_id) != run_ids.end()))
        kept.push_back(c);
    text = claims_text(kept);
    return Status::ok();
  });
}

}  // namespace moe::bench
