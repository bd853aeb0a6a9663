// Command-line options of moe-bench: the seed harness's flags (spec §1) with its spellings and
// defaults, plus ours (--threads, --check, --dump, --gmm-tile-rows, --repeats, --ceiling). The seed's
// list flags expand into its nested run loop: distribution -> topk -> impl -> null fraction -> queue
// mode. A comma list given to any other flag is a sweep axis, expanded before this parser sees it
// (src/bench/research/axes.h).
#pragma once

#include <string>
#include <vector>

#include "bench/harness/report.h"
#include "bench/probes/ceiling.h"
#include "bench/probes/wait_policy.h"
#include "moe/config.h"
#include "moe/status.h"

namespace moe::bench {

enum class QueueMode { full, prequeue };
const char* name(QueueMode q);

struct BenchOptions {
  MoeConfig base;  // one run's config; the list axes below override its fields per run
  KernelConfig kernel;
  std::vector<Distribution> distributions;
  std::vector<int64_t> topks;
  int64_t topk_flag = MoeConfig{}.topk;  // --topk as given (the seed's shape line prints it)
  std::string queue_mode_flag = "full";  // --queue-mode as given, before forward_backward forces full
  // --quant-mode was given: the text lines carry the int8 branch's quant_mode line and shape key too
  bool quant_mode_given = false;
  std::vector<Impl> impls;
  std::vector<QueueMode> queue_modes;
  std::vector<double> null_fracs;  // the innermost sweep axis (spec §1 run loop)
  int iters = 5;
  int warmup = 2;
  int repeats = 1;  // separate timed blocks of warmup + iters calls per queue mode
  CeilingMode ceiling = CeilingMode::once;
  bool check = false;
  double check_perturb = 0;  // --check-perturb: proves the oracle notices a wrong output
  bool stage_timing = false;
  std::string dump_dir;
  std::string trace_dir;  // write a Chrome trace of one extra call per run here
  OutputFormat format = OutputFormat::text;
  std::string out_path;  // append rows here (locked, whole rows); stdout keeps the seed's text lines
  bool list = false;
  bool peak = false;       // --peak: print the arithmetic peaks of this CPU, then exit
  bool with_peak = false;  // --with-peak: rows carry peak_tflops and pct_of_peak (cpu backend)
  bool verbose = false;    // --verbose: say the device, threads and wait policy on stderr
  // --wait-policy: how OpenMP threads wait, one per process (bench/probes/wait_policy.h); not part of a run's
  // identity: rows carry the policy that ran (wait_policy, wait_policy_reason).
  WaitPolicy wait_policy = WaitPolicy::automatic;
  std::string command;  // the command line that asked for the run (shell-quoted), stored in every row
  std::string model;    // the --model or --hf-config the shape came from (models.h), "" where none did
};

// One flag as the sweep expander and the plan reader see it (src/bench/research/axes.h).
struct FlagSpec {
  std::string name;  // "--tokens"
  bool takes_value;  // false: a flag (--check), which takes a value only as --check=false
  bool integer;      // an integer flag: a list item may be a range (first-last+step)
};

// Parses argv into `opts`. Returns an error Status for bad input (one line, for exit code 2).
// Sets `exit_ok` when the run is done already (--help, --version printed). With `flags`, lists every
// flag there instead and parses nothing.
Status parse_options(int argc, char** argv, BenchOptions& opts, bool& exit_ok,
                     std::vector<FlagSpec>* flags = nullptr);

}  // namespace moe::bench
