#!/usr/bin/env bash
# Issue 10's shapes (the seed's own configurations on the CPU): pct_of_ceiling forward and
# forward_backward, fused_w13, random routing, every dtype and grouped-GEMM backend: one sweep per
# shape into one store, tabulated by `moe-bench table` (each row names its CPU and commit in the
# store). Ratios, not TF/s, because the dense ceiling is measured in the same process. Takes 20-40
# minutes on 2 cores: run it on a quiet machine. SHAPES (names below), DTYPES and BACKENDS (comma
# lists) narrow it; extra args go to moe-bench after ours (a later flag wins). STORE keeps the rows.
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A shapes=(
  [reference]="--tokens 8192 --hidden 1024 --mlp-dim 1024 --experts 16 --topk 2"
  [seed_routed]="--tokens 32768 --hidden 2048 --mlp-dim 1408 --experts 60 --topk 2"
  [seed_baseline]="--tokens 32768 --hidden 2048 --mlp-dim 1408 --experts 60 --topk 2 --shared-expert-dim 5632"
  [seed_t4096]="--tokens 4096 --hidden 2048 --mlp-dim 1408 --experts 60 --topk 2"
  [seed_t4096_shared]="--tokens 4096 --hidden 2048 --mlp-dim 1408 --experts 60 --topk 2 --shared-expert-dim 5632"
  [seed_t4096_k8]="--tokens 4096 --hidden 2048 --mlp-dim 1408 --experts 60 --topk 8"
  [fine_e64]="--tokens 4096 --hidden 1024 --mlp-dim 512 --experts 64 --topk 8"
  [fine_e128]="--tokens 2048 --hidden 2048 --mlp-dim 768 --experts 128 --topk 8"
)
order=(reference seed_routed seed_baseline seed_t4096 seed_t4096_shared seed_t4096_k8 fine_e64 fine_e128)
# shellcheck disable=SC2206
selected=(${SHAPES:-${order[*]}})
rows=${STORE:-$(mktemp --suffix=.jsonl)}
[[ -n ${STORE:-} ]] || trap 'rm -f "$rows"' EXIT
for name in "${selected[@]}"; do
  echo "cpu-targets: $name" >&2
  # shellcheck disable=SC2086
  build/moe-bench ${shapes[$name]} --impl fused_w13 --distribution random --backend "${BACKENDS:-gmm,ragged_dot}" \
    --dtype "${DTYPES:-bfloat16,float32}" --bench-pass forward,forward_backward --iters 3 --warmup 1 "$@" \
    --format jsonl --out "$rows" >/dev/null
done
build/moe-bench table "$rows" --columns tokens,hidden,mlp_dim,experts,topk,shared_expert_dim,dtype,backend,pass,\
tflops,ceiling_tflops,pct_of_ceiling,threads,cpu_model,git_commit
