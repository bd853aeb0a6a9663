# Sourced by the scripts that run on a machine we cannot install on (gpu-check.sh, cpu-remote-check.sh):
# `remote_steps NAME DEFAULT_DIR` sets up $log ($OUT/NAME.log, or DEFAULT_DIR/NAME.log), $prefix (the
# carried package tree, MOE_DEPS_PREFIX or .devdeps/usr) and $status; `step CMD...` runs one step into the
# log and marks $status failed when it fails, so every step runs and the summary shows which failed.
remote_steps() {
  local out_dir=${OUT:-$2}
  mkdir -p "$out_dir"
  log="$out_dir/$1.log"
  prefix=${MOE_DEPS_PREFIX:-$PWD/.devdeps/usr}
  status=0
  : >"$log"
}
# `use_prebuilt`: where MOE_PREBUILT names a staged build (scripts/stage-prebuilt.sh) that runs here, sets
# $build to the build folder it was built in and makes that path and its source folder's lead here (CTest's
# files and the tests name them), then succeeds; otherwise fails, and the caller builds.
use_prebuilt() {
  [[ -n ${MOE_PREBUILT:-} ]] || return 1
  if ! "$MOE_PREBUILT/moe-bench" --version >>"$log" 2>&1; then
    echo "== prebuilt $MOE_PREBUILT does not run here: building" | tee -a "$log"
    return 1
  fi
  local source_dir
  source_dir=$(sed -n 's/^# Source directory: //p' "$MOE_PREBUILT/CTestTestfile.cmake")
  build=$(sed -n 's/^# Build directory: //p' "$MOE_PREBUILT/CTestTestfile.cmake")
  [[ -e $source_dir ]] || { mkdir -p "$(dirname "$source_dir")" && ln -s "$PWD" "$source_dir"; }
  [[ -e $build ]] || ln -s "$PWD/$MOE_PREBUILT" "$build"
  echo "== prebuilt: $MOE_PREBUILT as $build" | tee -a "$log"
}
step() {
  echo "== $*" | tee -a "$log"
  "$@" >>"$log" 2>&1 || { echo "   FAILED (exit $?)" | tee -a "$log"; status=1; }
}
# `trace_spans DIR`: each --trace-dir trace under DIR (in run order), its spans' total milliseconds by name
# (nested spans count in their parent too: quantize_rows and swiglu inside up), for a log without the files.
trace_spans() {
  local f
  for f in $(find "$1" -name trace.json | sort); do
    echo "   $(basename "$(dirname "$f")")"
    awk '/"dur":/ { d = $2; gsub(/[",]/, "", d) }
         /"name":/ && d != "" { k = $2; gsub(/[",]/, "", k); if (!(k in ms)) order[++n] = k; ms[k] += d / 1000; d = "" }
         END { for (i = 1; i <= n; ++i) printf "     %-20s %10.3f ms\n", order[i], ms[order[i]] }' "$f"
  done
}
