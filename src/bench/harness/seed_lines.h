// The seed harness's printed lines (spec §9.3, §9.4, §1 --trace-dir), character for character, so a
// script written against the seed cannot tell it runs moe-bench. The lines are built as strings
// (tests compare them with hand-written golden files, tests/golden/seed_lines/); main.cpp prints them.
//
// Order, as the seed prints it: devices, shape (once); per run: trace_dir (with --trace-dir), then per
// queue mode its block of mode_lines, routing_lines and the RESULT line (report.h result_text), then
// stage_lines (forward with --stage-timing). Our own lines (CHECK) follow the seed's.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "bench/harness/options.h"
#include "moe/null_routing.h"
#include "moe/routing.h"

namespace moe::bench {

// "devices=[CpuDevice(id=0)]": the seed prints jax.devices(); `device_reprs` are the devices' reprs.
std::string devices_line(const std::vector<std::string>& device_reprs);
// The devices of a job of `ranks` processes, one each, as the seed's forced host devices list them:
// "CpuDevice(id=0)" on 4 ranks -> CpuDevice(id=0) .. CpuDevice(id=3) (JAX numbers devices globally).
std::vector<std::string> world_devices(const std::string& own_repr, int ranks);

// The flags as given (Python str() of argparse's values: --topk, not the topk list; raw --impl and
// --queue-mode; floats as Python prints them; True/False).
std::string shape_line(const BenchOptions& o);

// The seed's trace subdirectory for one run: "<trace_dir>/<time_ns>_<dist>_topk<k>_<impl>_null<f>_
// <parallel_mode>_<ep_comm_path>_<pass>_<queue_mode>" (queue_mode as given on the command line).
std::string trace_run_dir(const BenchOptions& o, const MoeConfig& c, int64_t time_ns);

// The seven "[dist] mode=.. pass=.. topk=.. impl=.." lines of one queue mode, and the int8 branch's
// "... quant_mode=.." line after the backend line where --quant-mode was given (a parser written for
// either branch finds its lines; the shape line then carries quant_mode= after ep_comm_path=).
std::string mode_lines(const MoeConfig& c, std::string_view mode, double time_s, double tflops,
                       double tokens_per_s, bool quant_mode_line);

// run_stats, load_stats, capacity (cap = ceil(cf*T*K/E) whenever cf > 0, whatever the policy) and
// null_route (always; zeros when off) lines of one run.
std::string routing_lines(const MoeConfig& c, const Routing& routing, const NullRoutingStats& null_stats);

// The five --stage-timing lines (seconds per stage and their percentages of the 4-stage sum).
std::string stage_lines(const MoeConfig& c, double pack_s, double up_s, double down_s, double combine_s);
// Beyond the seed, after the stage lines of a quant run: the quantization inside up and down (mean
// seconds per up + down), and its share of their time.
std::string quant_stage_line(const MoeConfig& c, double quantize_weights_s, double quantize_rows_s,
                             double up_down_s);

}  // namespace moe::bench
