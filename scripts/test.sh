#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through CTest, twice:
#  1. as built for this machine (build/, -march=native);
#  2. as an AVX2-only machine (a Zen 3) sees it: a portable build (build-avx2/, -DMOE_NATIVE=OFF, the
#     x86-64 baseline plus the per-ISA kernel files) with our kernels and oneDNN held to AVX2 at run
#     time, so a developer on an AVX-512 machine sees what an AVX2 user sees. Skip it with
#     MOE_TEST_PASSES=native.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
echo "== test pass 1 of 2: native build, the ISA this CPU has" >&2
ctest --test-dir build --output-on-failure -j 2 --timeout 600
[[ "${MOE_TEST_PASSES:-both}" == native ]] && exit 0
cmake -S . -B build-avx2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_NATIVE=OFF -DMOE_WITH_CUDA=OFF \
  -DMOE_BUILD_MICROBENCH=OFF >&2
cmake --build build-avx2 -j "$(nproc)" >&2
echo "== test pass 2 of 2: portable build held to AVX2 (MOE_MAX_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2)" >&2
MOE_MAX_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 ctest --test-dir build-avx2 --output-on-failure -j 2 --timeout 600
