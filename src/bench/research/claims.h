// Claims: the runs of a shared store that some sweep is running now, so that N sweeps on one store run
// each run once (docs/design.md "Research loop").
//
// Before a run, a sweep takes the claims file `STORE.claims` under its flock, reads the store's new
// rows and then either finds the run done, finds it claimed by a live process (it is deferred, and
// waited for at the end), or records its own claim: one line per run_id, "run_id host pid start renewed",
// `start` being the process's start time in clock ticks since boot (/proc/PID/stat), so a reused pid
// is not taken for the claimer, and `renewed` the wall-clock second of its last renewal. The claim is
// dropped after the run's rows are appended (rows first: another sweep sees the claim or the rows, never
// neither). A claimer that dies leaves its lines behind, and they expire: a claim of this host whose
// process is gone or started at another time is no claim, and any claim not renewed for the lease (below)
// is none either, so a claim of another host (a store on a shared file system), or of this host before a
// rename, cannot hold a sweep forever.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/research/store.h"
#include "moe/status.h"

namespace moe::bench {

// A claim holds while its claimer renews it (every kClaimRenewSeconds, from a thread of the sweep's own)
// and expires kClaimLeaseSeconds after the last renewal on any host, so a claim whose claimer is gone
// where no one can see it (another host, or this one under another name) is taken over after the lease.
// Hosts' clocks must agree to well within the lease (NTP does).
inline constexpr int64_t kClaimRenewSeconds = 30;
inline constexpr int64_t kClaimLeaseSeconds = 300;

class Claims {
 public:
  enum class Verdict { mine, done, taken };

  // Claims for the store at `store` (one a device or pipe has none: nothing is read back from it).
  explicit Claims(const std::string& store);
  Claims(const Claims&) = delete;
  Claims& operator=(const Claims&) = delete;
  ~Claims();

  // Under the claims file's lock: refreshes `index`, then the run (its queue modes' `run_ids` that
  // `index` lacks) is done, taken by a live claimer, or now claimed by this process (`missing`: the
  // run_ids it lacks).
  Status claim(const std::vector<std::string>& run_ids, StoreIndex& index, Verdict& verdict,
               std::vector<std::string>& missing);
  // Drops this process's claims of `run_ids` (after their rows are in the store).
  Status release(const std::vector<std::string>& run_ids);

 private:
  void renew_loop();

  std::string path_;  // empty: no claims (a stream store)
  std::mutex mutex_;
  std::condition_variable stop_renewing_;
  bool stop_ = false;
  std::thread renewer_;  // renews this process's claims once it holds one
};

}  // namespace moe::bench
