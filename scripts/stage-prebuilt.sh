#!/usr/bin/env bash
# Usage: scripts/stage-prebuilt.sh BUILD_DIR [STAGE_DIR]   (STAGE_DIR default .prebuilt, git-ignored)
# Copies what running a build needs (its executables and CTest's files) without its objects, for a device
# call to carry to a machine we cannot install on: scripts/cpu-remote-check.sh with MOE_PREBUILT=STAGE_DIR
# runs it there instead of building, and so does scripts/gpu-check.sh where the build has the cuda backend.
# Make BUILD_DIR portable and without MPI (the GPU machine's image has no OpenMPI): -DMOE_NATIVE=OFF
# -DMOE_WITH_MPI=OFF (and -DMOE_WITH_CUDA=OFF for the CPU checks alone). Not stripped: IsaIsolation reads
# the function symbols (without them objdump files each kernel under the exported symbol before it).
# A call carries at most 64 MiB and oneDNN's library alone is 40 MB: PACK=FILE also packs the staged build
# and the shared libraries of the package tree (.devdeps/usr/lib, from scripts/gpu-deps.sh) into one xz
# tarball to carry instead (its folder git-ignored too) and unpack there with `tar xJf FILE`.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: $0 BUILD_DIR [STAGE_DIR]}
stage=${2:-.prebuilt}
exclude=.git/info/exclude
# Adds folder $1 (relative to the repository) to git's local ignore list, once.
ignore_folder() {
  grep -qx "/$1/" "$exclude" 2>/dev/null && return
  [[ -s $exclude && $(tail -c1 "$exclude") != "" ]] && echo >>"$exclude"
  echo "/$1/" >>"$exclude"
}
ignore_folder "$stage"
if [[ ! -x $build/moe-bench || ! -f $build/CTestTestfile.cmake ]]; then
  echo "stage-prebuilt: $build is no moe-bench build folder (no moe-bench or CTestTestfile.cmake)" >&2
  exit 2
fi
if grep -q 'libmpi' < <(ldd "$build/moe-bench"); then
  echo "stage-prebuilt: $build links MPI, which the remote image lacks: build it with -DMOE_WITH_MPI=OFF" >&2
  exit 2
fi
rm -rf "$stage"
mkdir -p "$stage"
find "$build" -maxdepth 1 -type f -executable -exec cp {} "$stage/" \;
find "$build" -maxdepth 1 -type f -name '*.cmake' -exec cp {} "$stage/" \;
echo "stage-prebuilt: $stage ready ($(du -sh "$stage" | cut -f1)) from $build" >&2
if [[ -n ${PACK:-} ]]; then
  [[ -d .devdeps/usr/lib ]] || { echo "stage-prebuilt: no .devdeps/usr/lib (run scripts/gpu-deps.sh)" >&2; exit 2; }
  pack_dir=$(dirname "$PACK")
  [[ $pack_dir == . ]] || ignore_folder "$pack_dir"
  mkdir -p "$pack_dir"
  XZ_OPT=-T0 tar cJf "$PACK" "$stage" .devdeps/usr/lib
  echo "stage-prebuilt: $PACK ready ($(du -sh "$PACK" | cut -f1))" >&2
fi
