#!/usr/bin/env bash
# The main job: install what is missing, build, and run the default CPU benchmark
# (forward and forward+backward, bf16 and fp32, at the reference CPU shape). Extra args go to moe-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
for pass in forward forward_backward; do
  for dtype in bfloat16 float32; do
    build/moe-bench --tokens 8192 --hidden 1024 --mlp-dim 1024 --experts 16 --topk 2 \
      --impl fused_w13 --backend gmm --distribution random --bench-pass "$pass" --dtype "$dtype" \
      --iters 5 --warmup 1 "$@"
  done
done
