#!/usr/bin/env bash
# Issue 10's shapes (the seed's own configurations on the CPU): pct_of_ceiling forward and
# forward_backward, fused_w13, random routing, every dtype and grouped-GEMM backend: one sweep per
# shape into one store, tabulated by `moe-bench table` (each row names its CPU and commit in the
# store). Ratios, not TF/s, because the dense ceiling is measured in the same process, right before
# each run (--ceiling every-run: once per shape let one slow moment, such as the host reclaiming the
# previous shape's huge pages, skew all of that shape's rows). Takes 20-40 minutes on 2 cores: run it on
# a quiet machine. SHAPES (names in issue10-shapes.sh), DTYPES and
# BACKENDS (comma lists) narrow it; extra args go to moe-bench after ours (a later flag wins). STORE
# keeps the rows. Before each shape it waits for the machine to settle (scripts/settle.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/issue10-shapes.sh
# shellcheck disable=SC2206
selected=(${SHAPES:-${issue10_order[*]}})
rows=${STORE:-$(mktemp --suffix=.jsonl)}
[[ -n ${STORE:-} ]] || trap 'rm -f "$rows"' EXIT
source scripts/settle.sh
for name in "${selected[@]}"; do
  settle
  echo "cpu-targets: $name" >&2
  # shellcheck disable=SC2046  # the flags split into words on purpose
  build/moe-bench $(issue10_flags "$name") --impl fused_w13 --distribution random --backend "${BACKENDS:-gmm,ragged_dot}" \
    --dtype "${DTYPES:-bfloat16,float32}" --bench-pass forward,forward_backward --iters 3 --warmup 1 --ceiling every-run "$@" \
    --format jsonl --out "$rows" >/dev/null
done
build/moe-bench table "$rows" --columns tokens,hidden,mlp_dim,experts,topk,shared_expert_dim,dtype,backend,pass,\
tflops,ceiling_tflops,pct_of_ceiling,threads,cpu_model,git_commit
