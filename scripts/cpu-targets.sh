#!/usr/bin/env bash
# Issue 10's shapes (the seed's own configurations on the CPU): pct_of_ceiling forward and
# forward_backward, fused_w13, random routing, every dtype and grouped-GEMM backend: one sweep per
# shape into one store, tabulated by `moe-bench table` (each row names its CPU and commit in the
# store). Ratios, not TF/s, because the dense ceiling is measured in the same process, right before
# each run (--ceiling every-run: once per shape let one slow moment, such as the host reclaiming the
# previous shape's huge pages, skew all of that shape's rows). Takes 20-40 minutes on 2 cores: run it on
# a quiet machine. SHAPES (names in issue10-shapes.sh), DTYPES and
# BACKENDS (comma lists) narrow it; extra args go to moe-bench after ours (a later flag wins). STORE
# keeps the rows. Before each shape it waits for the machine to settle (see settle below; SETTLE_S,
# default 15, is the fixed pause where the kernel does not count reported memory).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/issue10-shapes.sh
# shellcheck disable=SC2206
selected=(${SHAPES:-${issue10_order[*]}})
rows=${STORE:-$(mktemp --suffix=.jsonl)}
[[ -n ${STORE:-} ]] || trap 'rm -f "$rows"' EXIT
# A process's first run, started within seconds of another process's exit, measured 20-30 % low or
# noisy (a dense ceiling, or one of the block's calls): on VMs with free page reporting the kernel hands
# the freed memory to the hypervisor a few seconds after the exit, in bursts, on one of the next run's
# vCPUs. Where the kernel counts what it reported (/sys/module/page_reporting/parameters/reported_kib),
# wait until that count has held still for QUIET_S seconds (default 5; at most 90 s in all); elsewhere
# pause SETTLE_S.
settle() {
  local counter=/sys/module/page_reporting/parameters/reported_kib
  if [[ ! -r $counter ]]; then
    sleep "${SETTLE_S:-15}"
    return
  fi
  local last now still=0 waited=0
  last=$(<"$counter")
  while ((still < ${QUIET_S:-5} && waited < 90)); do
    sleep 1
    waited=$((waited + 1))
    now=$(<"$counter")
    if [[ $now == "$last" ]]; then still=$((still + 1)); else still=0 last=$now; fi
  done
}
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
