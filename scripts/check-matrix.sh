#!/usr/bin/env bash
# --check for every device x impl x backend x dtype x pass x remat on odd shapes (T, H, M not multiples
# of any tile, a shared expert, capacity on and off, both distributions, topk 1 and 3). One sweep per
# device and variant; the CHECK results come back as a table from the rows (`moe-bench table`), one
# line per run. Exits non-zero if any run is out of tolerance or fails.
# Devices: $DEVICES (default "cpu ref"; the ref backend takes a few minutes). Extra args go to moe-bench.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
rows=$(mktemp --suffix=.jsonl)
err=$(mktemp)
trap 'rm -f "$rows" "$err"' EXIT
shape=(--tokens 333 --hidden 96 --mlp-dim 80 --experts 7 --topk-list 1,3 --shared-expert-dim 40)
for device in ${DEVICES:-cpu ref}; do
  for extra in "--remat-mode none" "--remat-mode expert_mlp --shared-fused" \
    "--capacity-factor 0.9 --capacity-policy drop" "--capacity-factor 1.1 --capacity-policy pad"; do
    # shellcheck disable=SC2086
    build/moe-bench "${shape[@]}" --impl both --distribution both --device "$device" --backend gmm,ragged_dot \
      --dtype float32,bfloat16 --bench-pass forward,forward_backward $extra --iters 1 --warmup 0 --check "$@" \
      --format jsonl --out "$rows" >/dev/null 2>"$err"
    rc=$?
    # A failed check shows in the table; a refused or failed run ends its stderr with the error line.
    if ((rc != 0)); then
      status=1
      tail -n 1 "$err" >&2
    fi
  done
done
build/moe-bench table "$rows" --columns device,backend,dtype,bench_pass,remat_mode,shared_fused,capacity_policy,\
distribution,topk,impl,check_pass,check_worst,check_out_rel_err,check_grad_rel_err,check_tol || status=1
exit $status
