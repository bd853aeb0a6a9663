#!/usr/bin/env bash
# The worked example of docs/recipes/research-loop.md, end to end on the CPU at a small shape (seconds):
# a baseline with --check, an A/B sweep and its compare table, a top-k sweep from a plan and its resume,
# a chart and two logbook entries. Prints each command and its output, as the recipe shows them (the
# sweeps' seed lines go to WORK_DIR/*.txt).
# Usage: scripts/research-loop-example.sh [WORK_DIR]   (default: a new temporary directory)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-$(mktemp -d)}
mkdir -p "$work"
bench=build/moe-bench
shape=(--distribution random --tokens 1024 --hidden 256 --mlp-dim 256 --experts 8 --topk 2 --impl fused_w13
  --bench-pass forward_backward --dtype bfloat16 --iters 5 --warmup 1 --threads 1)
# show [--to FILE] COMMAND...: prints the command as typed, then runs it (stdout to FILE if given).
show() {
  local to=""
  if [[ $1 == --to ]]; then
    to=$2
    shift 2
  fi
  echo "\$ ${*@Q}${to:+ > $to}" | sed "s/'\([-A-Za-z0-9_.,:=/]*\)'/\1/g"
  if [[ -n $to ]]; then "$@" >"$to"; else "$@"; fi 2>&1
  echo
}
show "$bench" "${shape[@]}" --backend gmm --repeats 3 --check
show --to "$work/ab.txt" "$bench" sweep "${shape[@]}" --backend gmm,ragged_dot --repeats 3 --out "$work/ab.jsonl"
show "$bench" compare "$work/ab.jsonl:backend=gmm" "$work/ab.jsonl:backend=ragged_dot"
show --to "$work/topk.txt" "$bench" sweep --plan docs/recipes/research-loop.plan.json --out "$work/topk.jsonl"
show "$bench" sweep --plan docs/recipes/research-loop.plan.json --out "$work/topk.jsonl"
show "$bench" compare "$work/topk.jsonl:backend=gmm" "$work/topk.jsonl:backend=ragged_dot" --metric tokens_per_s
show "$bench" plot "$work/topk.jsonl" --x topk --y tflops --series backend -o "$work/topk.png"
show "$bench" log --id RL-CPU-001 --title "gmm vs ragged_dot at topk=2" --logbook "$work/logbook.md" \
  --hypothesis "exact groups (ragged_dot) beat tile-padded ones (gmm) at this shape" \
  --base "$work/ab.jsonl:backend=gmm" --store "$work/ab.jsonl:backend=ragged_dot"
show "$bench" log --id RL-CPU-002 --title "top-k sweep" --logbook "$work/logbook.md" \
  --hypothesis "TF/s grows with topk as the per-expert GEMMs grow" --store "$work/topk.jsonl"
echo "outputs in $work" >&2
