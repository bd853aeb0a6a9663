#!/usr/bin/env bash
# Configures and builds moe-bench into build/ (Release, Ninja).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
cmake --build build -j "$(nproc)" >&2
