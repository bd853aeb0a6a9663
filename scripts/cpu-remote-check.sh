#!/usr/bin/env bash
# The CPU checks of a machine we cannot install on (the GPU machine's host: a 16-core Intel Xeon with
# AMX), in one run of a few minutes: build with oneDNN from the carried package tree (scripts/gpu-deps.sh
# makes .devdeps/ here; carry it), print what the ISA dispatch finds, run the AMX, oneDNN and int8 tests
# on that CPU's own instructions, then the CPU test suite, the peaks, issue 22's shapes against the
# in-process ceiling and PyTorch eager, and issue 23's int8 GEMM and quant modes. Fastest answers first: a
# time limit cuts the tail, not the numbers. Log: $OUT/cpu-remote-check.log (or
# build-remote/cpu-remote-check.log).
# CPU_CHECK_STEPS (default "isa-tests passes peak int8 reference suite shapes torch scaling"; on request
# few-tokens (issue 40 item 5's grid, scripts/few-tokens.sh, two rounds) and int8-ab, with
# MOE_PREBUILT_BASE=DIR another staged build to compare the int8 forward with) picks the steps
# after the build; THREADS (default 16) the threads of the timed runs. MOE_PREBUILT=DIR runs a portable
# build staged on the dev machine (scripts/stage-prebuilt.sh; carry DIR too) instead of building there,
# which saves the lease the build's minutes and the other compiler's surprises.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/remote-steps.sh
source scripts/issue10-shapes.sh
remote_steps cpu-remote-check build-remote
steps=" ${CPU_CHECK_STEPS:-isa-tests passes peak int8 reference suite shapes torch scaling} "
want() { [[ $steps == *" $1 "* ]]; }
threads=${THREADS:-16}
build=build-remote
export LD_LIBRARY_PATH="$prefix/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
step lscpu
if ! use_prebuilt; then
  step cmake -S . -B build-remote -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_BUILD_MICROBENCH=OFF \
    -DMOE_WITH_CUDA=OFF "-DCMAKE_PREFIX_PATH=$prefix" "-DCMAKE_LIBRARY_PATH=$prefix/lib/x86_64-linux-gnu"
  step cmake --build build-remote -j "$(nproc)" -- -k 0
fi
bench=$build/moe-bench
step "$bench" --list --tokens 64 --hidden 32 --mlp-dim 16 --experts 4 --topk 2
if want isa-tests; then
  # The tests of the kernels this CPU's own instructions run (AMX tiles, oneDNN's AMX and VNNI paths, the
  # int8 GEMMs, the ISA dispatch and the tuning), at the run's threads, before the whole suite.
  # Not brief: a test killed by a signal prints no summary, so the last test started names it.
  step timeout 240 env OMP_NUM_THREADS="$threads" OMP_WAIT_POLICY=passive "$build/moe_tests" \
    --gtest_filter='*amx*:*Amx*:*onednn*:*Onednn*:*Int8*:*int8*:*CpuIsa*:*Peak*:*Tuning*:*KernelTable*:*Swiglu*'
  grep -E '^\[ RUN|^\[  FAILED|moe-bench: fatal' "$log" | tail -3 | sed 's/^/   last: /' | tee -a "$log"
fi
if want passes; then
  # SwiGLU's passes per ISA level, alone and right after an int8 GEMM.
  step timeout 120 env OMP_NUM_THREADS="$threads" "$build/moe_bench_swiglu_passes" 5
fi
if want peak; then
  step "$bench" --peak --threads 1
  step "$bench" --peak --threads "$threads"
fi
common=(--backend gmm --impl fused_w13 --distribution random --threads "$threads" --with-peak)
if want int8; then
  # Issue 23 on AMX-INT8: the int8 grouped GEMM against the bf16 one (same process, interleaved), the
  # quant modes against none at its shape (prequant's forward >= 1.5x none's), and --check for each
  # mode on oneDNN's int8 path (exact only where oneDNN has VNNI or AMX).
  # The bf16 baseline named: tuning_file none's base order would run dpbf16 (AVX-512 BF16, not AMX) there.
  # Both int8 rows (oneDNN's AMX matmul, our tdpbssd kernel) against oneDNN's AMX bf16 and our amx bf16.
  for variant in onednn amx; do
    step timeout 120 env OMP_NUM_THREADS="$threads" MOE_GEMM_VARIANT="$variant" "$build/moe_bench_nn_s8" 3
  done
  step timeout 150 "$bench" $(issue10_flags reference) "${common[@]}" --iters 3 --warmup 1 --dtype bfloat16 \
    --bench-pass forward,forward_backward --quant-mode none,int8_routed_prequant,int8_routed --stage-timing
  # Where each forward's time goes, span by span (int8's SwiGLU pass and row quantizations against its
  # GEMMs, none's fused up projection), one traced call a mode, totals into the log.
  traces=$(dirname "$log")/traces
  rm -rf "$traces"
  for mode in none int8_routed_prequant; do
    step timeout 60 "$bench" $(issue10_flags reference) "${common[@]}" --iters 2 --warmup 1 --dtype bfloat16 \
      --bench-pass forward --quant-mode "$mode" --ceiling off --trace-dir "$traces/$mode"
    trace_spans "$traces/$mode" | tee -a "$log"
  done
  step timeout 60 "$bench" --tokens 512 --hidden 256 --mlp-dim 128 --experts 8 --topk 2 --shared-expert-dim 128 \
    --impl fused_w13,baseline --dtype bfloat16 --bench-pass forward,forward_backward --iters 1 --warmup 0 \
    --quant-mode int8,int8_routed,int8_all,int8_routed_prequant --threads "$threads" --check
fi
if want int8-ab && [[ -n ${MOE_PREBUILT_BASE:-} ]]; then
  # The int8 forward of this build against MOE_PREBUILT_BASE's (another commit's staged build), alternately,
  # each with a tuning file of its own (a shared one hands the second binary the first one's kernel choices).
  for round in 1 2; do
    for bin in "$MOE_PREBUILT_BASE/moe-bench" "$bench"; do
      echo "== ab $bin round $round" | tee -a "$log"
      MOE_TUNING_FILE="$(dirname "$log")/tuning-$(basename "$(dirname "$bin")").json" \
        timeout 120 "$bin" $(issue10_flags reference) "${common[@]}" --iters 5 --warmup 1 --dtype bfloat16 \
        --bench-pass forward,forward_backward --quant-mode none,int8_routed_prequant 2>>"$log" |
        tee -a "$log" | awk -v bin="$bin" '/^RESULT/ { line = ""; for (i = 1; i <= NF; ++i)
          if ($i ~ /^(pass|time_median_s|quant_rel_err|gemm_kernels)=/) line = line " " $i; print "   ab " bin line }' | tee -a "$log"
    done
  done
fi
if want few-tokens; then
  # Issue 40 item 5: Qwen3-30B-A3B's and OLMoE's layers at 1-512 tokens, each memory-bound row against read
  # probes taken before its calls.
  step timeout 900 env BIN="$bench" THREADS="$threads" ROUNDS=2 OUT_DIR="$(dirname "$log")" scripts/few-tokens.sh
fi
if want reference; then
  # The reference shape per GEMM variant (auto's measured choice against oneDNN's AMX path, and our amx
  # kernel's nn and nn_swiglu with the next rows for the other forms).
  for variant in auto onednn amx; do
    for pass in forward forward_backward; do
      step timeout 120 "$bench" $(issue10_flags reference) "${common[@]}" --iters 5 --warmup 1 \
        --dtype bfloat16 --bench-pass "$pass" --gemm-variant "$variant"
    done
  done
fi
if want suite; then
  step ctest --test-dir "$build" --output-on-failure -j 8 --timeout 300 -E 'cuda'
fi
if want shapes; then
  # Issue 22's shapes: the seed baseline, and T=4096 at topk 2 and 8 (bf16, against the ceiling).
  for shape in seed_baseline seed_t4096 seed_t4096_k8; do
    for pass in forward forward_backward; do
      step timeout 240 "$bench" $(issue10_flags "$shape") "${common[@]}" --iters 3 --warmup 1 \
        --dtype bfloat16 --bench-pass "$pass"
    done
  done
fi
if want torch; then
  if command -v python3 >/dev/null && python3 -c 'import torch' 2>/dev/null; then
    step timeout 420 env THREADS="$threads" TORCH_PYTHON=python3 REPEATS=1 \
      SHAPES="reference seed_baseline seed_t4096 seed_t4096_k8" scripts/vs-torch.sh
  else
    echo "   (no PyTorch on this machine: peer skipped)" | tee -a "$log"
  fi
fi
if want scaling; then
  # 16 threads against one at the seed baseline (issue 22: >= 12x), forward, one timed call each.
  for t in 1 "$threads"; do
    step timeout 240 "$bench" $(issue10_flags seed_baseline) --backend gmm --impl fused_w13 \
      --distribution random --threads "$t" --iters 1 --warmup 1 --ceiling off --dtype bfloat16 --bench-pass forward
  done
fi
grep -E "^== |FAILED|tests passed|tests failed|isa level|here: |_(avx2|avx512|amx) |^CHECK|stage quant|^\| |ratio|x bf16 nn|ns/elem|last: |   ab |^round [0-9]" "$log" |
  cut -c1-300 | tail -90
grep "^RESULT" "$log" | awk '{ line = ""; for (i = 1; i <= NF; ++i)
  if ($i ~ /^(pass|tokens|topk|threads|quant_mode|gemm_variant|tflops|pct_of_ceiling|pct_of_peak|quant_rel_err|noise_note)=/)
    line = line " " $i; print line }'
exit $status
