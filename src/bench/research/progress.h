// The progress line of a sweep on stderr: runs done, skipped (already in the store), elapsed time and
// an ETA from the mean time of the runs done in this process (skipped runs cost nothing).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace moe::bench {

class Progress {
 public:
  // `always`: a line after every run; otherwise only once a run of several takes over 3 s in all.
  Progress(size_t total, bool always) : total_(total), always_(always) {}
  void skipped() { ++skipped_; }
  // A line for the run just done (`what` names it).
  void done(const std::string& what);
  size_t ran() const { return done_; }
  size_t skipped_runs() const { return skipped_; }

 private:
  size_t total_, done_ = 0, skipped_ = 0;
  bool always_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace moe::bench
