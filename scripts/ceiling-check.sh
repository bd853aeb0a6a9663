#!/usr/bin/env bash
# Issue 2 item 14: the block's TF/s as a fraction of a dense GEMM ceiling measured in the same
# process, at the reference CPU shape, for both dtypes and both passes, gmm and ragged_dot: one sweep,
# tabulated by `moe-bench table` from its jsonl rows. Targets on the 2-core dev box: forward >= 75 %,
# forward_backward >= 65 % (pct_of_ceiling). Extra args go to moe-bench after ours (a later flag wins).
set -euo pipefail
cd "$(dirname "$0")/.."
rows=$(mktemp --suffix=.jsonl)
trap 'rm -f "$rows"' EXIT
build/moe-bench --tokens 8192 --hidden 1024 --mlp-dim 1024 --experts 16 --topk 2 --impl fused_w13 \
  --backend gmm,ragged_dot --dtype bfloat16,float32 --bench-pass forward,forward_backward \
  --distribution random --iters 5 --warmup 1 "$@" --format jsonl --out "$rows" >/dev/null
# The columns of a % of ceiling table, so rows paste into docs/kernels.md as they are.
build/moe-bench table "$rows" --columns date,git_commit,backend,dtype,pass,tflops,ceiling_tflops,pct_of_ceiling,ceiling_note
