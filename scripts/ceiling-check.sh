#!/usr/bin/env bash
# Issue 2 item 14: the block's TF/s as a fraction of a dense GEMM ceiling measured in the same
# process, at the reference CPU shape, for both dtypes and both passes, gmm and ragged_dot.
# Targets on the 2-core dev box: forward >= 75 %, forward_backward >= 65 % (pct_of_ceiling).
set -euo pipefail
cd "$(dirname "$0")/.."
for backend in gmm ragged_dot; do
  for dtype in bfloat16 float32; do
    for pass in forward forward_backward; do
      build/moe-bench --tokens 8192 --hidden 1024 --mlp-dim 1024 --experts 16 --topk 2 --impl fused_w13 \
        --backend "$backend" --distribution random --bench-pass "$pass" --dtype "$dtype" --iters 5 --warmup 1 "$@" |
        grep '^RESULT' | tr ' ' '\n' | grep -E '^(backend|dtype|pass|tflops|ceiling_tflops|pct_of_ceiling)=' | tr '\n' ' '
      echo
    done
  done
done
