#!/usr/bin/env bash
# A/B of two builds of moe-bench on this machine, timed alternately so that a noisy machine hits both
# sides alike (how docs/kernels.md's "against main" figures are taken). BASE is a commit, built in a git
# worktree under $AB_DIR; NEW is a commit too or, by default, this work tree as it is now (uncommitted
# changes included). Both are built the same way in $AB_DIR (Release, no MPI, no CUDA, no tests; kept, so
# a rerun rebuilds only what changed; AB_CMAKE_FLAGS adds flags to both). Each round runs every selected
# shape, dtype and pass in one process per side with the dense ceiling timed before each run, the sides'
# order flipping every round; each side tunes auto into its own fresh tuning file in its first run (where
# the build has measured auto). Ends with `moe-bench compare` of the two stores by pct_of_ceiling and by
# TF/s (the timed calls of all rounds pooled, a delta inside both sides' spread marked noise), run by NEW's
# binary, or BASE's where only BASE's reader takes both stores (src/bench/research/store.cpp).
# Usage: scripts/ab-commits.sh BASE [NEW] [-- extra moe-bench flags, e.g. --gemm-variant avx2]
# ROUNDS (default 3), SHAPES (names in issue10-shapes.sh, default reference), DTYPES (default
# bfloat16,float32), PASSES (default forward,forward_backward), AB_DIR (default .ab). The stores
# ($AB_DIR/<label>.jsonl) start afresh each time.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "ab-commits.sh: error: $*" >&2; exit 2; }
(($# >= 1)) && [[ $1 != -- ]] || die "usage: scripts/ab-commits.sh BASE [NEW] [-- moe-bench flags]"
base_ref=$1
shift
new_ref=.
if (($# >= 1)) && [[ $1 != -- ]]; then new_ref=$1; shift; fi
if (($# >= 1)); then shift; fi  # the --
extra=("$@")
# Every argument is checked before anything is built (a bad one is one line, exit 2).
[[ ${ROUNDS:-3} =~ ^[1-9][0-9]{0,2}$ ]] || die "ROUNDS must be a count from 1 to 999, not '${ROUNDS}'"
IFS=, read -r -a ab_dtypes <<<"${DTYPES:-bfloat16,float32}"
for d in "${ab_dtypes[@]}"; do
  [[ $d == bfloat16 || $d == float32 ]] || die "DTYPES: '$d' is not bfloat16 or float32"
done
IFS=, read -r -a ab_passes <<<"${PASSES:-forward,forward_backward}"
for p in "${ab_passes[@]}"; do
  [[ $p == forward || $p == forward_backward ]] || die "PASSES: '$p' is not forward or forward_backward"
done
ab_dir=$(realpath -m "${AB_DIR:-.ab}")
mkdir -p "$ab_dir" 2>/dev/null && [[ -w $ab_dir ]] || die "AB_DIR $ab_dir cannot be made or written"
source scripts/issue10-shapes.sh
source scripts/settle.sh
# shellcheck disable=SC2206
shapes=(${SHAPES:-reference})
for name in "${shapes[@]}"; do [[ -n ${issue10_shapes[$name]:-} ]] || die "SHAPES: no shape named $name"; done
# A side's label: its commit's short hash, or "worktree-<HEAD>[-dirty]" for "." (the work tree as it is).
label_of() {
  local ref=$1 sha
  if [[ $ref == . ]]; then
    echo "worktree-$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- 2>/dev/null || echo -dirty)"
    return
  fi
  sha=$(git rev-parse --verify --quiet "$ref^{commit}") || return 1
  git rev-parse --short=12 "$sha"
}
base_checked=$(label_of "$base_ref") || die "$base_ref is not a commit here"
new_checked=$(label_of "$new_ref") || die "$new_ref is not a commit here"
[[ $base_checked != "$new_checked" ]] || die "BASE and NEW are the same build ($base_checked)"

declare -A bin_of tuning_of  # by a side's label: its binary; its tuning file, empty where it has none
# Builds one side and sets side_label. "." is the work tree, anything else a commit.
build_side() {
  local ref=$1 src label
  label=$(label_of "$ref")
  if [[ $ref == . ]]; then
    src=$PWD
  else
    src=$ab_dir/src-$label
    if [[ ! -d $src ]]; then
      git worktree prune
      git worktree add --detach --quiet "$src" "$label" >&2
    fi
  fi
  local build=$ab_dir/build-$label
  echo "ab-commits: building $ref ($label) in $build" >&2
  # shellcheck disable=SC2086  # AB_CMAKE_FLAGS splits into flags on purpose
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_WITH_MPI=OFF -DMOE_WITH_CUDA=OFF \
    -DMOE_BUILD_TESTS=OFF -DMOE_BUILD_MICROBENCH=OFF ${AB_CMAKE_FLAGS:-} >"$build.log" 2>&1 &&
    cmake --build "$build" --target moe-bench >>"$build.log" 2>&1 || die "building $ref failed: see $build.log"
  side_label=$label
  bin_of[$label]=$build/moe-bench
  # A build older than measured auto (issue 24) has no tuning file to give.
  tuning_of[$label]=
  if "$build/moe-bench" --help 2>/dev/null | grep -q -- --tuning-file; then tuning_of[$label]=$ab_dir/$label.tuning.json; fi
}
build_side "$base_ref"
base_label=$side_label
build_side "$new_ref"
new_label=$side_label
for label in "$base_label" "$new_label"; do rm -f "$ab_dir/$label.jsonl" "$ab_dir/$label.tuning.json"; done

run_side() {
  local label=$1 name=$2 round=$3 tuning=()
  [[ -z ${tuning_of[$label]} ]] || tuning=(--tuning-file "${tuning_of[$label]}")
  settle
  echo "ab-commits: round $round $name $label" >&2
  # shellcheck disable=SC2046  # the shape's flags split into words on purpose
  "${bin_of[$label]}" $(issue10_flags "$name") --impl fused_w13 --backend gmm --distribution random \
    --dtype "${DTYPES:-bfloat16,float32}" --bench-pass "${PASSES:-forward,forward_backward}" --iters 3 --warmup 1 \
    --ceiling every-run "${tuning[@]}" "${extra[@]}" --format jsonl \
    --out "$ab_dir/$label.jsonl" >/dev/null 2>"$ab_dir/$label.err" ||
    die "round $round $name: $label exited $?: $(tail -1 "$ab_dir/$label.err")"
}
for round in $(seq "${ROUNDS:-3}"); do
  for name in "${shapes[@]}"; do
    if ((round % 2)); then
      run_side "$base_label" "$name" "$round"
      run_side "$new_label" "$name" "$round"
    else
      run_side "$new_label" "$name" "$round"
      run_side "$base_label" "$name" "$round"
    fi
  done
done
echo "## A/B on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), ${ROUNDS:-3} rounds alternately," \
  "$(date -u +%Y-%m-%dT%H:%MZ): BASE $base_label, NEW $new_label"
echo
echo "scripts/ab-commits.sh $base_ref $new_ref${extra[*]:+ -- ${extra[*]}} (SHAPES=${shapes[*]}" \
  "DTYPES=${DTYPES:-bfloat16,float32} PASSES=${PASSES:-forward,forward_backward})"
# NEW's reader, else BASE's: a reader refuses rows that lack a key it needs and cannot fill
# (src/bench/research/store.cpp), which between two builds can go either way.
for metric in pct_of_ceiling tflops; do
  echo
  for label in "$new_label" "$base_label" ""; do
    [[ -n $label ]] || die "neither build's compare reads both stores: $(tail -1 "$ab_dir/compare.err")"
    "${bin_of[$label]}" compare "$ab_dir/$base_label.jsonl" "$ab_dir/$new_label.jsonl" --metric "$metric" \
      2>"$ab_dir/compare.err" && break
  done
done
