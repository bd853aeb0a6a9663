#!/usr/bin/env bash
# Prepares the libraries the GPU machine's image lacks (fmt, CLI11, nlohmann-json, GoogleTest, oneDNN) as an
# extracted Debian package tree in .devdeps/ (git-ignored), for scripts/gpu-check.sh to build against.
# Run it here, on the Debian dev machine, then carry the folder with the device call
# (`carry: [".devdeps"]`). Nothing is installed on either machine.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.devdeps/' .git/info/exclude 2>/dev/null || echo '/.devdeps/' >>.git/info/exclude
debs=$(mktemp -d)
trap 'rm -rf "$debs"' EXIT
(cd "$debs" && apt-get download -q libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev libgtest-dev libdnnl-dev libdnnl2 >&2)
rm -rf .devdeps
mkdir -p .devdeps
for f in "$debs"/*.deb; do dpkg -x "$f" .devdeps; done
echo "gpu-deps: .devdeps/usr ready ($(du -sh .devdeps | cut -f1))" >&2
