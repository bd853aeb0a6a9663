#include "bench/research/claims.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
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

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Claim {
  std::string run_id, host, start;
  long pid = 0;
  int64_t renewed = 0;  // wall-clock seconds of the claimer's last renewal (0: a line without one)
};

bool parse_claim(const std::string& line, Claim& c) {
  std::istringstream in(line);
  if (!(in >> c.run_id >> c.host >> c.pid >> c.start)) return false;
  if (!(in >> c.renewed)) c.renewed = 0;
  return true;
}

// Whether the claim holds: renewed within the lease (whatever host made it), and where its process
// can be seen (this host), that process still runs.
bool alive(const Claim& c, const std::string& here, int64_t now) {
  if (now - c.renewed > kClaimLeaseSeconds) return false;
  if (c.host != here) return true;
  if (::kill(pid_t(c.pid), 0) != 0 && errno != EPERM) return false;
  return start_time(c.pid) == c.start;
}

// The claims that still hold, one per line.
std::vector<Claim> live_claims(const std::string& text, const std::string& here) {
  std::vector<Claim> claims;
  std::istringstream lines(text);
  const int64_t now = unix_seconds();
  for (std::string line; std::getline(lines, line);) {
    Claim c;
    if (parse_claim(line, c) && alive(c, here, now)) claims.push_back(c);
  }
  return claims;
}

std::string claims_text(const std::vector<Claim>& claims) {
  std::string text;
  for (const Claim& c : claims)
    text += fmt::format("{} {} {} {} {}\n", c.run_id, c.host, c.pid, c.start, c.renewed);
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
  const Status s = edit_locked(path_, "sweep claims file", [&](std::string& text) {
    MOE_RETURN_IF_ERROR(decide());
    std::vector<Claim> claims = live_claims(text, here);
    if (verdict == Verdict::mine)
      for (const Claim& c : claims)
        for (const std::string& id : missing)
          if (c.run_id == id && !(c.host == here && c.pid == pid)) verdict = Verdict::taken;
    if (verdict == Verdict::mine)
      for (const std::string& id : missing) claims.push_back({id, here, start, pid, unix_seconds()});
    text = claims_text(claims);  // expired claims go too
    return Status::ok();
  });
  if (s && verdict == Verdict::mine && !renewer_.joinable()) renewer_ = std::thread([this] { renew_loop(); });
  return s;
}

void Claims::renew_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_renewing_.wait_for(lock, std::chrono::seconds(kClaimRenewSeconds), [this] { return stop_; })) {
    lock.unlock();
    const std::string here = host_name();
    const long pid = long(::getpid());
    // A failed renewal is retried at the next tick; the lease covers several.
    (void)edit_locked(path_, "sweep claims file", [&](std::string& text) {
      std::vector<Claim> claims = live_claims(text, here);
      for (Claim& c : claims)
        if (c.host == here && c.pid == pid) c.renewed = unix_seconds();
      text = claims_text(claims);
      return Status::ok();
    });
    lock.lock();
  }
}

Claims::~Claims() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  stop_renewing_.notify_all();
  if (renewer_.joinable()) renewer_.join();
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
