#include "bench/list.h"

#include <fmt/format.h>

#include "moe/backend.h"
#include "moe/gemm.h"

namespace moe::bench {

void print_list(const MoeConfig& c) {
  fmt::print("backends (--device; first = default), for this configuration:\n");
  for (Backend* b : registered_backends()) {
    fmt::print("  {}: {}\n", b->name(), b->description());
    for (OpKind op : kAllOps) {
      const Status s = b->supports(op, c);
      fmt::print("    {:<14} {}\n", name(op), s ? "yes" : "no: " + s.message());
    }
  }
  fmt::print("impls:");
  for (Impl i : kAllImpls) fmt::print(" {}", name(i));
  fmt::print(
      "\ngrouped_gemm backends: gmm (contiguous layout, tile-padded groups) ragged_dot (exact groups)\n");
  fmt::print("gemm variants of the cpu backend (first = default):\n");
  for (const GemmVariant& v : gemm_variants())
    fmt::print("  {}: {} [{}]\n", v.name, v.description, v.version());
  fmt::print("routing_pack_strategy: argsort tuple_sort expert_score_sort\n");
  fmt::print("dispatch_permute_mode: direct_take repeat_sort\ncombine: scatter unsort\n");
}

}  // namespace moe::bench
