#!/usr/bin/env bash
# Issue 40 item 5's grid on this CPU, in one command: Qwen3-30B-A3B's and OLMoE-1B-7B's MoE layers, bf16
# forward, tokens 1, 8, 64 and 512 under random and runs routing, measured auto, --with-peak (a memory-bound
# row reads a probe just before each timed call: its % of the bandwidth peak is against its own moments'
# memory). One process per model and round, ROUNDS rounds (default 3): the VM's memory moves by 2x within
# seconds, so one round says little. Prints a line per row: the model, tokens, routing, bound, then for a
# memory-bound row the % of the bandwidth peak with its GB/s and the probes' GB/s and the % of the per-expert
# roofline (pct_of_roofline: uneven groups put some experts past the ridge), for a compute-bound one TF/s
# and the % of the arithmetic peak; a row whose calls met a busy host (steal, switches) adds its
# noise_note. The rows themselves go to $OUT_DIR/few-tokens.jsonl (default
# build/), the CPU named in each (cpu_id: cpuid vendor, family, model).
# BIN (default build/moe-bench), THREADS (default: the process's), extra moe-bench flags after --.
#   scripts/few-tokens.sh [-- --gemm-variant gemv]
#   MOE_MAX_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 BIN=build-avx2/moe-bench scripts/few-tokens.sh   # as an AVX2 CPU
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "few-tokens.sh: error: $*" >&2; exit 2; }
if (($# >= 1)); then
  [[ $1 == -- ]] || die "unexpected argument '$1' (usage: scripts/few-tokens.sh [-- moe-bench flags])"
  shift
fi
[[ ${ROUNDS:-3} =~ ^[1-9][0-9]{0,2}$ ]] || die "ROUNDS must be a count from 1 to 999, not '${ROUNDS}'"
bin=${BIN:-build/moe-bench}
[[ -x $bin ]] || die "BIN $bin is not an executable (build it: scripts/test.sh, or set BIN)"
threads=()
if [[ -n ${THREADS:-} ]]; then
  [[ $THREADS =~ ^[1-9][0-9]{0,3}$ ]] || die "THREADS must be a count from 1 to 9999, not '${THREADS}'"
  threads=(--threads "$THREADS")
fi
out_dir=${OUT_DIR:-build}
mkdir -p "$out_dir" 2>/dev/null && [[ -w $out_dir ]] || die "OUT_DIR $out_dir cannot be made or written"
rows=$out_dir/few-tokens.jsonl
: >"$rows"
for round in $(seq "${ROUNDS:-3}"); do
  for model in qwen3-30b-a3b olmoe-1b-7b; do
    "$bin" --model "$model" --tokens 1,8,64,512 --distribution random,runs --impl fused_w13 --iters 5 \
      --warmup 2 --with-peak "${threads[@]}" --out "$rows" --format jsonl "$@" 2>/dev/null |
      awk -v model="$model" -v round="$round" '/^RESULT / {
        for (i = 2; i <= NF; ++i) { eq = index($i, "="); v[substr($i, 1, eq - 1)] = substr($i, eq + 1) }
        if (v["bound"] == "memory")
          what = sprintf("%5.1f %% of the bandwidth peak (%.1f of %.1f GB/s), %5.1f %% of the roofline",
                         v["pct_of_bw_peak"], v["gbps"], v["bw_peak_gbps"], v["pct_of_roofline"])
        else
          what = sprintf("%.3f TF/s, %.1f %% of the arithmetic peak", v["tflops"], v["pct_of_peak"])
        noise = v["noise_note"] == "quiet" ? "" : "  (" v["noise_note"] ")"
        printf "round %d  %-14s T %-4s %-7s %-8s %s%s\n", round, model, v["tokens"], v["distribution"],
               v["bound"], what, noise
      }'
  done
done
echo "rows: $rows ($(grep -c . "$rows") rows; $(grep -o '"cpu_id":"[^"]*"' "$rows" | sort -u | head -1))"
