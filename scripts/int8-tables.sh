#!/usr/bin/env bash
# Reproduces the seed's int8 A/B tables (logbook 000: none vs int8 vs int8_routed vs int8_all vs
# int8_routed_prequant, shared expert on and off, topk 2 and 8, forward and forward_backward) at a CPU
# size, speed and accuracy side by side from the tool's own rows, and times issue 23's speed shape
# (T=8192 H=1024 M=1024 E=16 K=2 fused_w13 bf16). Writes $OUT_DIR/int8.jsonl (the rows) and prints the
# tables (`moe-bench table`).
# Usage: [OUT_DIR=docs/results] [ITERS=3] scripts/int8-tables.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out_dir=${OUT_DIR:-docs/results}
iters=${ITERS:-3}
mkdir -p "$out_dir"
bench=build/moe-bench
rows=$out_dir/int8.jsonl
rm -f "$rows"  # the tables are this run's rows only
common=(--distribution random --impl fused_w13 --dtype bfloat16 --iters "$iters" --warmup 1 --format jsonl
  --out "$rows")
modes=(none int8 int8_routed int8_all int8_routed_prequant)
for pass in forward forward_backward; do
  for mode in "${modes[@]}"; do
    for shared in 0 512; do
      for topk in 2 8; do
        echo "+ $bench --tokens 2048 --hidden 512 --mlp-dim 512 --experts 16 --topk $topk --shared-expert-dim $shared --quant-mode $mode --bench-pass $pass ${common[*]}" >&2
        "$bench" --tokens 2048 --hidden 512 --mlp-dim 512 --experts 16 --topk "$topk" --shared-expert-dim "$shared" \
          --quant-mode "$mode" --bench-pass "$pass" "${common[@]}" >/dev/null
      done
    done
  done
done
for pass in forward forward_backward; do
  for mode in "${modes[@]}"; do
    echo "+ $bench --tokens 8192 --hidden 1024 --mlp-dim 1024 --experts 16 --topk 2 --quant-mode $mode --bench-pass $pass ${common[*]}" >&2
    "$bench" --tokens 8192 --hidden 1024 --mlp-dim 1024 --experts 16 --topk 2 --quant-mode "$mode" \
      --bench-pass "$pass" "${common[@]}" >/dev/null
  done
done
cols=quant_mode,shared_expert_dim,topk,pass,tflops,time_s,pct_of_ceiling,quant_rel_err,quant_grad_rel_err,gemm_kernels
echo "## T=2048 H=512 M=512 E=16"
"$bench" table "$rows:tokens=2048" --columns "$cols"
echo "## T=8192 H=1024 M=1024 E=16 K=2"
"$bench" table "$rows:tokens=8192" --columns "$cols"
