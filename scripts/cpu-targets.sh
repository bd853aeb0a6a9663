#!/usr/bin/env bash
# Issue 10's shapes (the seed's own configurations on the CPU): pct_of_ceiling forward and
# forward_backward, fused_w13, random routing, for each dtype and grouped-GEMM backend, as one
# Markdown table on stdout (the run's CPU model and commit in its header). Ratios, not TF/s, because
# the dense ceiling is measured in the same process. Takes 20-40 minutes on 2 cores; run it on a quiet
# machine. Usage: scripts/cpu-targets.sh [extra moe-bench flags]   (DTYPES, BACKENDS, SHAPES narrow it)
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
rows=$(mktemp --suffix=.jsonl)
trap 'rm -f "$rows"' EXIT
for name in "${selected[@]}"; do
  for dtype in ${DTYPES:-bfloat16 float32}; do
    for backend in ${BACKENDS:-gmm ragged_dot}; do
      for pass in forward forward_backward; do
        # shellcheck disable=SC2086
        build/moe-bench ${shapes[$name]} --impl fused_w13 --distribution random --backend "$backend" \
          --dtype "$dtype" --bench-pass "$pass" --iters 3 --warmup 1 --format jsonl "$@" 2>/dev/null |
          sed "s/^{/{\"shape_name\":\"$name\",/" >>"$rows"
        echo "cpu-targets: $name $dtype $backend $pass done" >&2
      done
    done
  done
done
# One line per (shape, dtype, backend): forward and forward_backward pct side by side.
field() { grep -o "\"$1\":[^,}]*" | cut -d: -f2 | tr -d '"'; }
echo "CPU: $(head -1 "$rows" | field cpu_model), $(head -1 "$rows" | field threads) threads, commit $(head -1 "$rows" | field git_commit), $(date -u +%Y-%m-%d)"
echo
echo "| shape | dtype | backend | forward TF/s | forward pct | forward_backward TF/s | forward_backward pct |"
echo "|---|---|---|---:|---:|---:|---:|"
paste -d' ' <(field shape_name <"$rows") <(field dtype <"$rows") <(field backend <"$rows") <(field pass <"$rows") \
  <(field tflops <"$rows") <(field pct_of_ceiling <"$rows") |
  awk '{ key = $1 " | " $2 " | " $3; if ($4 == "forward") { f[key] = sprintf("%.3f | %.1f", $5, $6); keys[++n] = key }
         else b[key] = sprintf("%.3f | %.1f", $5, $6) }
       END { for (i = 1; i <= n; ++i) printf "| %s | %s | %s |\n", keys[i], f[keys[i]], b[keys[i]] }'
