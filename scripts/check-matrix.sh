#!/usr/bin/env bash
# --check for every device x impl x backend x dtype x pass x remat on odd shapes (T, H, M not multiples
# of any tile, a shared expert, capacity on and off, both distributions, topk 1 and 3). Prints one CHECK
# line per run, prefixed with its configuration; exits non-zero if any run is out of tolerance or fails.
# Devices: $DEVICES (default "cpu ref"; the ref backend takes a few minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
shape=(--tokens 333 --hidden 96 --mlp-dim 80 --experts 7 --topk-list 1,3 --shared-expert-dim 40)
for device in ${DEVICES:-cpu ref}; do
  for backend in gmm ragged_dot; do
    for dtype in float32 bfloat16; do
      for pass in forward forward_backward; do
        for extra in "--remat-mode none" "--remat-mode expert_mlp --shared-fused" \
          "--capacity-factor 0.9 --capacity-policy drop" "--capacity-factor 1.1 --capacity-policy pad"; do
          # shellcheck disable=SC2086
          out=$(build/moe-bench "${shape[@]}" --impl both --distribution both --device "$device" --backend "$backend" \
            --dtype "$dtype" --bench-pass "$pass" $extra --iters 1 --warmup 0 --check "$@" 2>&1) || status=1
          grep '^CHECK' <<<"$out" | sed "s/^/device=$device backend=$backend dtype=$dtype $extra /" || status=1
          grep -q 'moe-bench: error' <<<"$out" && { grep 'moe-bench: error' <<<"$out"; status=1; }
        done
      done
    done
  done
done
exit $status
