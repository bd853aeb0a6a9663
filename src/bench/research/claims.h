// Claims: the runs of a shared store that some sweep is running now, so that N sweeps on one store run
// each run once (docs/design.md "Research loop").
//
// Before a run, a sweep takes the claims file `STORE.claims` under its flock, reads the store's new
// rows and then either finds the run done, finds it claimed by a live process (it is deferred, and
// waited for at the end), or records its own claim: one line per run_id, "run_id host pid start",
// `start` being the process's start time in clock ticks since boot (/proc/PID/stat), so a reused pid
// is not taken for the claimer. The claim is dropped after the run's rows are appended (rows first:
// another sweep sees the claim or the rows, never neither). A claimer that dies leaves its lines
// behind, and they expire: a claim of this host whose process is gone or started at another time is
// no claim. Claims of another host (a store on a shared file system) are honoured until that host's
// sweep drops them.
#pragma once

#include <string>
#include <vector>

#include "bench/research/store.h"
#include "moe/status.h"

namespace moe::bench {

class Claims {
 public:
  enum class Verdict { mine, done, taken };

  // Claims for the store at `store` (one a device or pipe has none: nothing is read back from it).
  explicit Claims(const std::string& store);

  // Under the claims file's lock: refreshes `index`, then the run (its queue modes' `run_ids` that
  // `index` lacks) is done, taken by a live claimer, or now claimed by this process (`missing`: the
  // run_ids it lacks).
  Status claim(const std::vector<std::string>& run_ids, StoreIndex& index, Verdict& verdict,
               std::vector<std::string>& missing);
  // Drops this process's claims of `run_ids` (after their rows are in the store).
  Status release(const std::vector<std::string>& run_ids);

 private:
  std::string path_;  // empty: no claims (a stream store)
};

}  // namespace moe::bench
