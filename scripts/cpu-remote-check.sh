#!/usr/bin/env bash
# The CPU checks of a machine we cannot install on (the GPU machine's host: a 16-core Intel Xeon with
# AMX), in one run of a few minutes: build with oneDNN from the carried package tree (scripts/gpu-deps.sh
# makes .devdeps/ here; carry it), print what the ISA dispatch finds, run the CPU test suite, and time the
# reference shape per GEMM variant against the in-process ceiling. Log: $OUT/cpu-remote-check.log.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/remote-steps.sh
remote_steps cpu-remote-check build-remote
step lscpu
step cmake -S . -B build-remote -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_BUILD_MICROBENCH=OFF \
  -DMOE_WITH_CUDA=OFF "-DCMAKE_PREFIX_PATH=$prefix" "-DCMAKE_LIBRARY_PATH=$prefix/lib/x86_64-linux-gnu"
step cmake --build build-remote -j "$(nproc)"
export LD_LIBRARY_PATH="$prefix/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
step build-remote/moe-bench --list --tokens 64 --hidden 32 --mlp-dim 16 --experts 4 --topk 2
step ctest --test-dir build-remote --output-on-failure -j 8 --timeout 300 -E 'cuda'
step build-remote/moe-bench --peak --threads 1
step build-remote/moe-bench --peak --threads "${THREADS:-16}"
shape=(--tokens 8192 --hidden 1024 --mlp-dim 1024 --experts 16 --topk 2 --impl fused_w13 --backend gmm
  --distribution random --iters 5 --warmup 1 --threads "${THREADS:-16}" --with-peak)
for variant in auto onednn; do
  for pass in forward forward_backward; do
    step build-remote/moe-bench "${shape[@]}" --dtype bfloat16 --bench-pass "$pass" --gemm-variant "$variant"
  done
done
grep -E "^== |FAILED|tests passed|tests failed|isa level|here: |_(avx2|avx512|amx) |^RESULT" "$log" |
  sed -E 's/^(RESULT .*pass=[a-z_]+).* tflops=([^ ]+).* pct_of_ceiling=([^ ]+).* pct_of_peak=([^ ]+).* noise_note=([^ ]+).*/\1 tflops=\2 pct=\3 pct_of_peak=\4 noise=\5/' |
  tail -60
exit $status
