// The moe-bench command itself and `moe-bench sweep`.
//
// A command line (or a plan, plan.h) expands into points (axes.h); every point is parsed and checked
// (flags, backend support, memory, output targets, the store) before anything runs, so bad input is one
// line and no output. Then each point runs the seed's loop (distribution -> topk -> impl -> null
// fraction; per run its queue modes), prints the seed's lines (the shape line once per point) and
// appends each run's rows to --out as soon as the run is done, under the file lock (report.h), so a
// crash or Ctrl-C loses at most the run in flight. Inputs are reused while consecutive points share
// shape, dtype, seed and device; the ceiling is measured once per CeilingCache key (--ceiling once).
//
// moe-bench sweep [--plan FILE] --out STORE [FLAGS]: the rows are jsonl, and a run whose rows the store
// holds already (by run_id, run_id.h) is skipped, so the same command resumes an interrupted sweep and
// several sweeps may share a store (the store is re-read before each run). Flags after the plan's
// override it (a repeated flag takes its last value). A progress line with an ETA follows every run.
#pragma once

namespace moe::bench {

int bench_main(int argc, char** argv);  // moe-bench [FLAGS]
int sweep_main(int argc, char** argv);  // moe-bench sweep ... (argv[1] == "sweep")

}  // namespace moe::bench
