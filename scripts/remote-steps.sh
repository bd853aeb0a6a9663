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
step() {
  echo "== $*" | tee -a "$log"
  "$@" >>"$log" 2>&1 || { echo "   FAILED (exit $?)" | tee -a "$log"; status=1; }
}
