// FLOP accounting exactly as the seed (spec §9.2): routed FLOPs from real assignments (or E*cap
// rows under capacity=pad), shared expert FLOPs, x3 for forward_backward. Router, sort, gather,
// combine and remat recompute are not counted.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "moe/config.h"

namespace moe::bench {

inline double seed_flops(const MoeConfig& c, int64_t real_assignments) {
  const double H = double(c.hidden), M = double(c.mlp_dim);
  double routed = c.capacity_active() && c.capacity_policy == CapacityPolicy::pad
                      ? 6.0 * H * M * double(c.experts) * double(c.capacity())
                      : 6.0 * H * M * double(real_assignments);
  double shared = 6.0 * double(c.tokens) * H * double(c.shared_expert_dim);
  double fwd = routed + shared;
  return c.bench_pass == BenchPass::forward ? fwd : 3.0 * fwd;
}

// The streaming bandwidths a call's bytes move at (bench/probes/bandwidth.h), GB/s: reads, writes of
// values, writes of zeros (a machine may write zeros faster).
struct BandwidthPeaks {
  double read_gbps, write_gbps, zero_write_gbps;
};

// The bytes a call must move: read, written as values, written as zeros (the weight gradients of experts no
// row reached).
struct Traffic {
  double read = 0, written = 0, zeros = 0;
  double bytes() const { return read + written + zeros; }
  // The seconds these bytes take at the peaks.
  double seconds(const BandwidthPeaks& bw) const {
    return read / (bw.read_gbps * 1e9) + written / (bw.write_gbps * 1e9) + zeros / (bw.zero_write_gbps * 1e9);
  }
  // The one bandwidth at which all the bytes would take as long: what a row's % of the bandwidth peak is
  // against (the read peak for a call that writes nothing).
  double mixed_gbps(const BandwidthPeaks& bw) const { return bytes() / seconds(bw) / 1e9; }
};

// The bytes a call must move at the least (the memory roofline's traffic): the weights of every expert
// that has a routed row (int8_routed_prequant's routed weights as int8, the others in the run dtype) and
// the shared expert's, read once per pass that multiplies by them, x read and out written; forward_backward
// reads those weights twice (forward and the data gradients), writes every expert's weight gradient (run
// dtype; zeros where no row reached the expert: the call's output holds them all) and the shared expert's,
// and reads dout and writes dx. Intermediates (h, g, the dispatched rows) are not counted: a fused kernel
// need not write them.
inline Traffic compulsory_traffic(const MoeConfig& c, int64_t experts_touched) {
  const double e = double(dtype_size(c.dtype)), expert_elements = 3.0 * double(c.hidden) * double(c.mlp_dim);
  const double routed_elements = double(experts_touched) * expert_elements;
  const double shared_elements = 3.0 * double(c.hidden) * double(c.shared_expert_dim);
  const double routed_weight_bytes = c.quant_mode == QuantMode::int8_routed_prequant ? 1.0 : e;
  const double weights = routed_elements * routed_weight_bytes + shared_elements * e;
  const double activation = double(c.tokens) * double(c.hidden) * e;  // x, out, dout or dx
  if (c.bench_pass == BenchPass::forward) return {weights + activation, activation, 0.0};
  const double gradients = (routed_elements + shared_elements) * e;
  const double zeros = double(c.experts - experts_touched) * expert_elements * e;
  return {2.0 * weights + 2.0 * activation, gradients + 2.0 * activation, zeros};
}

inline double compulsory_bytes(const MoeConfig& c, int64_t experts_touched) {
  return compulsory_traffic(c, experts_touched).bytes();
}

// The time a machine of its peaks allows a call that takes its experts one after another (the per-expert
// roofline): each routed expert's weights cost the longer of their traffic at the bandwidths (reads, and
// gradients written: values, or zeros where no row reached it) and its rows' FLOPs at the arithmetic peak,
// the shared expert's likewise, the activations their traffic. An expert with few rows is bound by reading
// its weights, one with many by multiplying, and a core's caches hold too little of an expert's weights for
// the memory left idle under one expert's multiplies to serve the next one's reads, so uneven groups allow
// more time than the totals against the peaks (memory_bound) say. (Threads on different experts at once
// could beat it where one core reads more than its share of the bandwidth; a 2-core Zen 4 reads 23-26 GB/s
// on one core, 32-49 on two.) expert_rows: rows (real assignments) per routed expert, as seed_flops counts
// them (capacity pad: every expert's capacity). Traffic and FLOPs sum to compulsory_traffic and seed_flops.
inline double roofline_seconds(const MoeConfig& c, const std::vector<int64_t>& expert_rows,
                               const BandwidthPeaks& bw, double peak_tflops) {
  const double e = double(dtype_size(c.dtype)), H = double(c.hidden);
  const bool forward = c.bench_pass == BenchPass::forward;
  const double flop_passes = forward ? 1.0 : 3.0;
  // A projection set of width W that rows reach (`read`; else only its zero gradient is written), read (in
  // forward_backward read again and its gradient written), weight elements of bytes_each.
  auto weight_traffic = [&](double W, double bytes_each, bool read = true) {
    const double elements = 3.0 * H * W, reads = read ? elements * bytes_each : 0.0;
    if (forward) return Traffic{reads, 0.0, 0.0};
    return read ? Traffic{2.0 * reads, elements * e, 0.0} : Traffic{0.0, 0.0, elements * e};
  };
  auto longer = [&](const Traffic& bytes, double flops) {
    return std::max(bytes.seconds(bw), flops * flop_passes / (peak_tflops * 1e12));
  };
  const bool pad = c.capacity_active() && c.capacity_policy == CapacityPolicy::pad;
  const double routed_each = c.quant_mode == QuantMode::int8_routed_prequant ? 1.0 : e;
  double seconds = 0;
  for (int64_t rows : expert_rows) {
    const double flop_rows = pad ? double(c.capacity()) : double(rows);
    seconds += longer(weight_traffic(double(c.mlp_dim), routed_each, rows > 0),
                      6.0 * H * double(c.mlp_dim) * flop_rows);
  }
  const double S = double(c.shared_expert_dim), T = double(c.tokens);
  seconds += longer(weight_traffic(S, e), 6.0 * T * H * S);
  const double activation = T * H * e, passes = forward ? 1.0 : 2.0;
  return seconds + Traffic{passes * activation, passes * activation, 0.0}.seconds(bw);
}

}  // namespace moe::bench
