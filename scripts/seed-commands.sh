#!/usr/bin/env bash
# Runs commands from the seed logbooks (../shared/seeds/) through moe-bench, unchanged apart from the
# program name and CPU-sized shapes (tokens 32768 -> 2048, hidden 2048 -> 512, mlp-dim 1408/2048 ->
# 352/512, shared 5632 -> 1408), and records them with their output in docs/results/seed-commands.md,
# each with how its lines compare with the seed's (identical in structure, or where and why they differ).
# EP commands run under mpirun with 4 ranks, as the seed's 4 forced host devices.
set -uo pipefail
cd "$(dirname "$0")/.."
out=docs/results/seed-commands.md
cpu_shape() {
  sed -e 's/--tokens 32768/--tokens 2048/' -e 's/--hidden 2048/--hidden 512/' -e 's/--mlp-dim 1408/--mlp-dim 352/' \
    -e 's/--mlp-dim 2048/--mlp-dim 512/' -e 's/--shared-expert-dim 5632/--shared-expert-dim 1408/'
}
commands=(
  "--distribution random --tokens 32768 --hidden 2048 --mlp-dim 1408 --experts 60 --topk 2 --shared-expert-dim 5632 --backend gmm --impl fused_w13 --routing-pack-strategy argsort --queue-mode full --bench-pass forward_backward --parallel-mode none --iters 3 --warmup 1"
  "--distribution runs --tokens 32768 --hidden 2048 --mlp-dim 1408 --experts 60 --topk 8 --shared-expert-dim 5632 --backend gmm --impl fused_w13 --routing-pack-strategy argsort --queue-mode full --bench-pass forward --parallel-mode none --stage-timing --iters 3 --warmup 1"
  "--distribution random --tokens 32768 --hidden 2048 --mlp-dim 1408 --experts 60 --topk 2 --shared-expert-dim 5632 --backend gmm --impl fused_w13 --routing-pack-strategy tuple_sort --queue-mode full --bench-pass forward_backward --parallel-mode none --iters 3 --warmup 1"
  "--distribution random --tokens 32768 --hidden 2048 --mlp-dim 1408 --experts 60 --topk 2 --shared-expert-dim 5632 --backend gmm --impl fused_w13 --routing-pack-strategy argsort --queue-mode both --bench-pass forward --parallel-mode none --iters 3 --warmup 1"
  "--distribution random --tokens 32768 --hidden 2048 --mlp-dim 2048 --experts 64 --topk 8 --shared-expert-dim 5632 --shared-fused --backend gmm --impl fused_w13 --parallel-mode none --routing-pack-strategy argsort --queue-mode full --bench-pass forward --quant-mode none --iters 3 --warmup 1 --stage-timing"
  "--tokens 128 --hidden 64 --mlp-dim 32 --experts 4 --topk 2 --distribution random --backend ragged_dot --impl baseline --bench-pass forward --parallel-mode none --iters 1 --warmup 0 --dtype float32"
  "--distribution random --tokens 32768 --hidden 2048 --mlp-dim 1408 --experts 60 --topk 4 --backend gmm --impl fused_w13 --bench-pass forward_backward --parallel-mode none --queue-mode full --iters 3 --warmup 1 --null-route-frac-list 0.0,0.5 --renormalize-real-after-null"
  "--distribution random --tokens 32768 --hidden 2048 --mlp-dim 2048 --experts 64 --topk 2 --shared-expert-dim 5632 --shared-fused --backend gmm --impl fused_w13 --parallel-mode ep --routing-pack-strategy argsort --queue-mode full --bench-pass forward_backward --quant-mode none --iters 3 --warmup 1"
  "--tokens 128 --hidden 64 --mlp-dim 32 --experts 4 --topk 2 --distribution random --backend gmm --impl fused_w13 --bench-pass forward --parallel-mode none --quant-mode int8 --iters 1 --warmup 0 --dtype float32"
  "--distribution random --tokens 32768 --hidden 2048 --mlp-dim 2048 --experts 64 --topk 2 --shared-expert-dim 5632 --shared-fused --backend gmm --impl fused_w13 --parallel-mode none --routing-pack-strategy argsort --queue-mode full --bench-pass forward_backward --quant-mode int8_routed_prequant --iters 3 --warmup 1"
  "--distribution random --tokens 32768 --hidden 2048 --mlp-dim 2048 --experts 64 --topk 2 --shared-expert-dim 5632 --shared-fused --backend gmm --impl fused_w13 --parallel-mode none --routing-pack-strategy argsort --queue-mode full --bench-pass forward --quant-mode int8_all --iters 3 --warmup 1"
  "--tokens 128 --hidden 64 --mlp-dim 32 --experts 4 --topk 2 --distribution random --backend gmm --impl fused_w13 --bench-pass forward_backward --parallel-mode none --iters 1 --warmup 0 --dtype float16"
)
# How each command's lines compare with the seed's (same order as commands).
verdicts=(
  "identical in structure (the seed's e6bba2ed lines; our keys follow the seed's in RESULT)"
  "identical in structure, stage lines included"
  "identical in structure"
  "identical in structure (both queue modes' blocks)"
  "identical in structure; with --quant-mode given, also the int8 branch's quant_mode key and line (4028d08), where the main branch has none: a parser of either branch finds its lines"
  "identical in structure"
  "identical in structure (one block per null fraction)"
  "identical in structure under mpirun -np 4: devices= lists four devices, as the seed's forced host devices; the int8 branch's quant_mode line as above"
  "identical in structure plus the int8 branch's quant_mode line. Differs: without a shared expert --quant-mode int8 says on stderr that it runs none's GEMMs (the seed runs them silently)"
  "identical in structure plus the int8 branch's quant_mode line (4028d08 prints no RESULT line; ours keeps it)"
  "identical in structure plus the int8 branch's quant_mode line"
  "identical in structure: --dtype float16 runs (float16 storage, float32 accumulation; dtype=float16 as the seed prints jnp.dtype('float16')). Differs: float16 ends at 65504, and the seed's unscaled N(0,1) inputs overflow it in long sums (the logbook shapes above with a shared expert of 1408; the routed down projection at the seed's default hidden 2048 and mlp-dim 4096): where the seed prints the timings of inf values, moe-bench prints one line naming the non-finite results and no RESULT (exit 1)"
)
{
  echo "# Seed logbook commands through moe-bench"
  echo
  echo "Generated by \`scripts/seed-commands.sh\` on $(date -u +%Y-%m-%d) at commit $(git rev-parse --short=12 HEAD)."
  echo "Each command is a logbook command with the program name replaced and the shape scaled to the CPU."
  for i in "${!commands[@]}"; do
    cpu_args=$(echo "${commands[$i]}" | cpu_shape)
    launch=(build/moe-bench)
    if [[ $cpu_args == *"--parallel-mode ep"* ]]; then
      launch=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
        mpirun -np 4 --oversubscribe --bind-to none build/moe-bench)
    fi
    echo
    echo "${verdicts[$i]}:"
    echo
    echo '```'
    echo "\$ ${launch[*]/build\/moe-bench/moe-bench} $cpu_args"
    # shellcheck disable=SC2086
    "${launch[@]}" $cpu_args 2>&1
    echo "(exit ${PIPESTATUS[0]})"
    echo '```'
  done
} >"$out"
echo "wrote $out" >&2
