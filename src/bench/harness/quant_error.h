// quant_rel_err (issue 23 item 4): how far a quant mode's results are from quant_mode none on the same
// inputs and routing. The float block runs once, untimed, before the quant run's timed calls, and only
// its results are kept (host doubles, not tensors: the timed calls' memory counters see none of it).
// Over several ranks both runs' global results are compared on rank 0 (gathered from the ranks' slices,
// as --check does), so the error is the single-process run's.
#pragma once

#include <optional>
#include <vector>

#include "moe/backend.h"
#include "moe/comm.h"
#include "moe/config.h"
#include "moe/inputs.h"
#include "moe/routing.h"

namespace moe::bench {

struct FloatResults {
  std::vector<double> out;                 // (T, H) global: rank 0's; empty on other ranks
  std::vector<std::vector<double>> grads;  // dx, dw1, dw3, dw2, dsw1, dsw3, dsw2 (forward_backward)
};
struct QuantError {
  std::optional<double> out_rel_err, grad_rel_err;  // grad: the worst gradient
};

// c's block with quant_mode none, one call, on every rank of comm (each rank's in and routing: its
// slices). REQUIRES: c.quant_mode != none.
Status float_results(FloatResults& f, const MoeConfig& c, Backend& backend, Comm& comm, const MoeInputs& in,
                     const RoutingTensors& routing);
// The global results of a run on rank 0: its ranks' host slices gathered (every rank calls it; the
// others get nothing), or the one rank's own.
Status global_results(Comm& comm, const MoeConfig& c, const Tensor& out, const MoeGrads* grads,
                      Tensor& global_out, std::optional<MoeGrads>& global_grads);
// The quant run's errors from its global results (rank 0's, global_results) against f's.
QuantError quant_error(const FloatResults& f, const Tensor& global_out, const MoeGrads* global_grads);

}  // namespace moe::bench
