#!/usr/bin/env bash
# The roofline of one model's MoE layer on this machine: the bf16 forward at tokens 1, 2, 4, ... up to
# MAX_TOKENS (32768), one sweep (`moe-bench sweep --model MODEL`, rows with --with-peak: the arithmetic
# and bandwidth peaks measured in the process), then two charts through `moe-bench plot`: TF/s against
# tokens with the arithmetic peak and the dense GEMM ceiling as lines, GB/s moved (compulsory bytes:
# weights of the touched experts, x, out) against tokens with the streaming-read peak as a line. Where few
# tokens reach each expert the block reads weights (memory-bound: GB/s near the bandwidth line); from the
# ridge point on it multiplies (TF/s near the peak line). Rows name the CPU (cpu_model, isa).
# Writes $OUT_DIR/roofline-MODEL.jsonl, roofline-MODEL-tflops.svg and roofline-MODEL-gbps.svg, and
# prints the table.
# Usage: [OUT_DIR=docs/results] [ITERS=3] [MAX_TOKENS=32768] scripts/roofline.sh MODEL   (moe-bench --list: models)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: scripts/roofline.sh MODEL (moe-bench --list names the models)}
out_dir=${OUT_DIR:-docs/results}
iters=${ITERS:-3}
max_tokens=${MAX_TOKENS:-32768}
bench=build/moe-bench
mkdir -p "$out_dir"
rows=$out_dir/roofline-$model.jsonl
rm -f "$rows" "$rows.claims"  # the charts are this run's rows only
"$bench" sweep --model "$model" --tokens "1-$max_tokens*2" --bench-pass forward --dtype bfloat16 \
  --impl fused_w13 --distribution random --iters "$iters" --warmup 1 --with-peak --out "$rows"
"$bench" table "$rows" --columns tokens,tflops,pct_of_peak,gbps,pct_of_bw_peak,pct_of_roofline,bound,time_s,gemm_kernels
"$bench" plot "$rows" --x tokens --y tflops --logx --logy --ref peak_tflops --ref ceiling_tflops \
  --title "$model MoE layer, bf16 forward: TF/s" -o "$out_dir/roofline-$model-tflops.svg"
"$bench" plot "$rows" --x tokens --y gbps --logx --logy --ref bw_peak_gbps \
  --title "$model MoE layer, bf16 forward: GB/s moved" -o "$out_dir/roofline-$model-gbps.svg"
