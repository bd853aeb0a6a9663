#!/usr/bin/env bash
# Everything that needs a GPU, in one run of a few minutes on a GPU machine (CUDA 13, CMake, ninja,
# PyTorch; no package installs there): configure and build with the cuda backend, the cuda op and block
# tests against `ref` and the float64 reference, issue 21's speed shapes with the in-process cuBLAS
# ceiling and the PyTorch eager peer timed alternately (scripts/vs-torch.sh DEVICE=cuda), the op tests
# under compute-sanitizer, the --check matrix on the GPU, then the rest of the suite. Fastest-answer
# steps first: a time limit cuts the tail, not the numbers. The log goes to $OUT/gpu-check.log (or
# build-gpu/gpu-check.log). Libraries the GPU image lacks come as an extracted package tree:
# MOE_DEPS_PREFIX=/path/usr (default: .devdeps/usr, made by scripts/gpu-deps.sh; carry it with the call).
# MOE_PREBUILT=DIR runs a build with the cuda backend staged here (scripts/stage-prebuilt.sh) instead of
# building there.
# GPU_CHECK_STEPS (default "tests speed sanitizer matrix suite"; "tables" adds scripts/gpu-tables.sh, the
# seed's tables for docs/results/gpu.md, a few minutes of its own) picks steps; GPU_CHECK_STREAMS (default
# "4 1") the --cuda-gemm-streams values the speed shapes are timed with.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/remote-steps.sh
remote_steps gpu-check build-gpu
steps=" ${GPU_CHECK_STEPS:-tests speed sanitizer matrix suite} "
want() { [[ $steps == *" $1 "* ]]; }
step nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv
export LD_LIBRARY_PATH="$prefix/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
build="build-gpu"
if ! use_prebuilt; then
  step cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_BUILD_MICROBENCH=OFF \
    "-DCMAKE_PREFIX_PATH=$prefix" -DCMAKE_CUDA_ARCHITECTURES=90a
  step cmake --build build-gpu -j "$(nproc)"
fi
[[ $build -ef build ]] || ln -sfn "$build" build  # the scripts below run build/moe-bench
step "$build/moe-bench" --list
if want tests; then
  step timeout 240 "$build/moe_tests" --gtest_filter='*/cuda:*Cli*' --gtest_brief=1
fi
if want speed; then
  shape=(--hidden 2048 --mlp-dim 2048 --experts 64 --tokens 32768 --impl fused_w13 --backend ragged_dot
    --dtype bfloat16 --distribution random --iters 20 --warmup 3 --device cuda)
  for k in 8 2; do
    for pass in forward forward_backward; do
      for streams in ${GPU_CHECK_STREAMS:-4 1}; do
        step timeout 120 "$build/moe-bench" "${shape[@]}" --topk "$k" --bench-pass "$pass" \
          --cuda-gemm-streams "$streams"
      done
    done
  done
  # A mid-size shape (vector paths of every kernel) against the float64 reference.
  step timeout 120 "$build/moe-bench" --tokens 1024 --hidden 512 --mlp-dim 256 --experts 8 --topk 2 \
    --shared-expert-dim 256 --impl both --dtype float32,bfloat16 --bench-pass forward,forward_backward \
    --device cuda --iters 1 --warmup 0 --check
  if command -v python3 >/dev/null && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    step timeout 240 env DEVICE=cuda TORCH_PYTHON=python3 SHAPES="gpu_k8 gpu_k2" REPEATS=1 PEER_ITERS=10 \
      scripts/vs-torch.sh --iters 10 --warmup 2
  else
    echo "   (no PyTorch with CUDA on this machine: peer skipped)" | tee -a "$log"
  fi
fi
if want tables; then
  # docs/results/gpu.md's tables (issue 21 item 6), written under $OUT to bring back.
  step timeout 400 env OUT_DIR="${OUT:-build-gpu}/results" scripts/gpu-tables.sh
fi
if want sanitizer && command -v compute-sanitizer >/dev/null; then
  step timeout 180 compute-sanitizer --tool memcheck --error-exitcode 9 "$build/moe_tests" \
    --gtest_filter='Backends/OpsOnBackend.*/cuda' --gtest_brief=1
fi
if want matrix; then
  step timeout 240 env DEVICES=cuda scripts/check-matrix.sh
  step timeout 60 env DEVICES=cuda scripts/check-matrix.sh --matmul-precision highest --shared-expert-dim 40
fi
if want suite; then
  step timeout 300 ctest --test-dir "$build" --output-on-failure -j 8 --timeout 200 -E '/cuda'
fi
grep -E "^== |FAILED|tests passed|tests failed|SKIPPED|PASSED|ERROR SUMMARY|^CHECK|^\| " "$log" | cut -c1-300 | tail -60
grep "^RESULT" "$log" | awk '{ line = ""; for (i = 1; i <= NF; ++i)
  if ($i ~ /^(pass|topk|tflops|ceiling_tflops|pct_of_ceiling|check_pass)=/) line = line " " $i; print line }'
exit $status
