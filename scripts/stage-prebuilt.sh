#!/usr/bin/env bash
# Usage: scripts/stage-prebuilt.sh BUILD_DIR [STAGE_DIR]   (STAGE_DIR default .prebuilt, git-ignored)
# Copies what running a build needs (its executables and CTest's files) without its objects, for a device
# call to carry to a machine we cannot install on: scripts/cpu-remote-check.sh with MOE_PREBUILT=STAGE_DIR
# runs it there instead of building. Make BUILD_DIR portable and without MPI (the GPU machine's image has
# no OpenMPI): -DMOE_NATIVE=OFF -DMOE_WITH_MPI=OFF -DMOE_WITH_CUDA=OFF. Not stripped: IsaIsolation reads
# the function symbols (without them objdump files each kernel under the exported symbol before it).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: $0 BUILD_DIR [STAGE_DIR]}
stage=${2:-.prebuilt}
exclude=.git/info/exclude
if ! grep -qx "/$stage/" "$exclude" 2>/dev/null; then
  [[ -s $exclude && $(tail -c1 "$exclude") != "" ]] && echo >>"$exclude"
  echo "/$stage/" >>"$exclude"
fi
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
