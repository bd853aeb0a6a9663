#!/usr/bin/env bash
# The bench tools' bad arguments (the plain-C++ ones: bench/bench_args.h; scripts/ab-commits.sh): each
# gets exactly one line on stderr that names the tool and says "error", nothing on stdout, and exit 2,
# before any work is done (ab-commits.sh: before it builds anything).
#   usage: bench_tools_bad_args.sh MOE_BENCH_NN_S8 MOE_BENCH_SWIGLU_PASSES AB_COMMITS_SH MOE_BENCH_FEW_ROWS
#          FEW_TOKENS_SH MOE_BENCH
set -u
nn_s8=$1
passes=$2
ab_commits=$3
few_rows=$4
few_tokens=$5
export BIN=$6  # few-tokens.sh's moe-bench
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
failed=0
expect_refusal() {
  local tool=$1
  shift
  timeout 20 "$tool" "$@" >"$out" 2>"$err"
  local rc=$? lines
  lines=$(wc -l <"$err")
  if [[ $rc != 2 || $lines != 1 || -s $out ]] || ! grep -q "^$(basename "$tool"): error: " "$err"; then
    echo "FAIL: $(basename "$tool") $*: exit $rc, $lines stderr lines, $(wc -c <"$out") stdout bytes:"
    cat "$err"
    failed=1
  else
    echo "ok: $(basename "$tool") $* -> $(cat "$err")"
  fi
}
expect_refusal "$nn_s8" x
expect_refusal "$nn_s8" 0
expect_refusal "$nn_s8" 3x
expect_refusal "$nn_s8" 1001
expect_refusal "$nn_s8" 3 4
expect_refusal "$nn_s8" 3 seeds
expect_refusal "$nn_s8" 3 seed 1
expect_refusal "$passes" -1
expect_refusal "$passes" 5 15
expect_refusal "$passes" 5 abc
expect_refusal "$passes" 5 16384 0
expect_refusal "$passes" 5 16384 99999999999999999999
expect_refusal "$passes" 5 268435456 1024
expect_refusal "$passes" 5 16384 1024 7
expect_refusal "$few_rows" x
expect_refusal "$few_rows" 3 0
expect_refusal "$few_rows" 3 rows
expect_refusal "$few_rows" 3 257
expect_refusal "$few_rows" 3 4 1
expect_refusal "$few_rows" 3 4 gemv,nope
expect_refusal "$few_rows" 3 4 gemv,
expect_refusal "$few_rows" 3 4 gemv all
expect_refusal "$few_rows" 3 4 gemv 0
expect_refusal "$few_rows" 3 4 gemv 65
expect_refusal "$few_rows" 3 4 gemv 2 nn_swiglu
expect_refusal "$few_rows" 3 4 gemv 2 nt extra
AB_DIR=$(mktemp -d)
export AB_DIR
expect_refusal "$ab_commits"
expect_refusal "$ab_commits" -- --iters 1
expect_refusal "$ab_commits" no-such-ref-of-moe-bench
SHAPES=no_such_shape expect_refusal "$ab_commits" HEAD
# issue 41 item 10: refused before anything is built
expect_refusal "$ab_commits" HEAD no-such-ref-of-moe-bench
expect_refusal "$ab_commits" HEAD HEAD
ROUNDS=abc expect_refusal "$ab_commits" HEAD
ROUNDS=0 expect_refusal "$ab_commits" HEAD
DTYPES=float16 expect_refusal "$ab_commits" HEAD
PASSES=backward expect_refusal "$ab_commits" HEAD
AB_DIR=/proc/version/ab expect_refusal "$ab_commits" HEAD
rm -rf "$AB_DIR"
# scripts/few-tokens.sh: refused before any run
expect_refusal "$few_tokens" --iters 1
ROUNDS=x expect_refusal "$few_tokens"
THREADS=0 expect_refusal "$few_tokens"
BIN=/nonexistent/moe-bench expect_refusal "$few_tokens"
OUT_DIR=/proc/version/x expect_refusal "$few_tokens"
exit $failed
