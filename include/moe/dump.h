// --dump: one run's inputs, routing, output and (forward_backward) gradients as .npy files beside a
// config.json, so another framework can reload the exact same problem and cross-check the numbers.
//
// Layout of `dir`: x, w1, w2, w3, [shared_w1, shared_w2, shared_w3], topk_ids (int32 (T, K)),
// topk_weights (f32 (T, K)), out, and with gradients grad_x, grad_w1, grad_w2, grad_w3,
// [grad_shared_w1/2/3], each "<name>.npy"; shared files only when S > 0. Every float tensor is stored
// as float32 (bf16 widened exactly), a float16 run's as float16 ('<f2'). config.json = MoeConfig::to_json() +
// the caller's extra fields + "files": {name: {shape, dtype (the run's dtype before widening), npy_descr}} +
// "notes". It is written last, so a directory holding it is a complete dump.
#pragma once

#include <string>

#include "moe/config.h"
#include "moe/inputs.h"
#include "moe/routing.h"
#include "moe/status.h"
#include "moe/tensor.h"

namespace moe {

// extra_json_fields: a JSON object's text (kernel config, environment, ...), "{}" for none; its keys
// are merged into config.json. grads: nullptr for a forward-only run. Creates dir (and parents).
// Fails, naming the path, when dir is an existing non-directory or a file cannot be written.
Status write_dump(const std::string& dir, const MoeConfig& cfg, const std::string& extra_json_fields,
                  const MoeInputs& in, const Routing& routing, const Tensor& out, const MoeGrads* grads);

}  // namespace moe
