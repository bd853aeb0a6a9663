// The block's inputs and parameters (spec §2.1), deterministic from MoeConfig::seed, and the
// gradients a forward_backward pass returns. All N(0, 1), unscaled, stored in cfg.dtype.
#pragma once

#include "moe/config.h"
#include "moe/quantize.h"
#include "moe/tensor.h"

namespace moe {

struct MoeInputs {
  Tensor x;     // x   (T, H)
  Tensor w1;    // w1  (E, H, M)  gate projection (silu applied)
  Tensor w3;    // w3  (E, H, M)  up projection
  Tensor w2;    // w2  (E, M, H)  down projection
  Tensor w13;   // w13 (E, H, 2M) = [w1 | w3] along the last dim (gate half first)
  Tensor sw1;   // shared w1  (H, S)   empty when S == 0
  Tensor sw3;   // shared w3  (H, S)
  Tensor sw2;   // shared w2  (S, H)
  Tensor sw13;  // shared w13 (H, 2S) = [sw1 | sw3]
  // int8_routed_prequant: the routed weights quantized once, per expert (q13 for fused impls, q1 and q3
  // for the others: a run's impls share its inputs); empty in every other mode.
  QuantizedWeight q13 = {}, q1 = {}, q3 = {}, q2 = {};
};

// Fills every tensor from the seed's streams (rng.h) in host memory; w13/sw13 are built by concatenation.
MoeInputs make_inputs(const MoeConfig& cfg);
// The x rows [token_begin, + tokens) and routed weights of experts [expert_begin, + experts) of
// make_inputs(cfg), element for element (a rank of a parallel run draws only its slices), and the
// whole shared expert.
MoeInputs make_inputs_slice(const MoeConfig& cfg, int64_t token_begin, int64_t tokens, int64_t expert_begin,
                            int64_t experts);
// The inputs in `memory` (shared, not copied, where they already are).
MoeInputs to_memory(const MoeInputs& in, MemorySpace& memory);

// w13 (E, R, 2N) = concat(w1 (E, R, N), w3 (E, R, N)) along the last dim; E may be 1 for the shared expert.
void concat_last_dim(Tensor& w13, const Tensor& w1, const Tensor& w3);
// The inverse: splits d13 (E, R, 2N) into d1 and d3 (E, R, N).
void split_last_dim(Tensor& d1, Tensor& d3, const Tensor& d13);

// Gradients of loss = mean(square(y)) w.r.t. the seed's differentiated arguments
// (x, w1, w2, w3, shared w1/w2/w3), in the input dtype. Fused impls produce dw13 internally and split it.
struct MoeGrads {
  Tensor dx;    // (T, H)
  Tensor dw1;   // (E, H, M)
  Tensor dw3;   // (E, H, M)
  Tensor dw2;   // (E, M, H)
  Tensor dsw1;  // (H, S)
  Tensor dsw3;  // (H, S)
  Tensor dsw2;  // (S, H)
};

MoeGrads make_grads(const MoeConfig& cfg, MemorySpace& memory = host_memory());  // uninitialised
MoeGrads to_host(const MoeGrads& grads);

}  // namespace moe
