// moe-bench: runs the seed harness's loop (distribution -> topk -> impl -> queue mode) on a backend and
// prints the seed's lines (spec §9.3) with our extra keys appended to RESULT; every flag may be a list
// (a sweep, sweep.h). The research loop's commands read the result stores back: sweep (resumable),
// compare (A/B tables), plot (gnuplot charts), table and log (logbook entries). Results on stdout,
// progress and errors on stderr. Exit codes: 0 ok, 1 a --check failed or a result was not finite,
// 2 bad input (including a configuration the chosen backend or comm cannot run, and memory that
// cannot be allocated).
#include <cstdio>
#include <cstring>

#include "bench/research/compare.h"
#include "bench/research/logbook.h"
#include "bench/research/plot.h"
#include "bench/research/sweep.h"
#include "bench/research/table.h"
#include "moe/comm.h"
#include "moe/fatal_signal.h"
#include "moe/tensor.h"

namespace moe::bench {
namespace {

int dispatch(int argc, char** argv) {
  struct Command {
    const char* name;
    int (*main)(int, char**);
  };
  // Subcommands take their own flags; argv[0] becomes "moe-bench <command>" for their --help.
  static const Command kCommands[] = {
      {"compare", compare_main}, {"plot", plot_main}, {"table", table_main}, {"log", log_main}};
  if (argc > 1 && std::strcmp(argv[1], "sweep") == 0) return sweep_main(argc, argv);
  for (const Command& c : kCommands)
    if (argc > 1 && std::strcmp(argv[1], c.name) == 0) return c.main(argc - 1, argv + 1);
  return bench_main(argc, argv);
}

}  // namespace
}  // namespace moe::bench

int main(int argc, char** argv) {
  moe::install_fatal_signal_report();
  int code = 2;
  try {
    code = moe::bench::dispatch(argc, argv);
  } catch (const moe::AllocationError& e) {
    // A real allocation failure is a resource the user asked for, not a bug: one line, exit 2. Under
    // mpirun only this rank may have met it: the job ends (no other rank waits for it).
    std::fprintf(stderr, "moe-bench: error: %s\n", e.what());
    if (moe::world_comm().size() > 1) moe::world_comm().abort(2);
  }
  // Under mpirun: MPI_Finalize (every rank gets here, or the job was aborted).
  moe::finalize_world_comm();
  return code;
}
