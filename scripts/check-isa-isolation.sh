#!/usr/bin/env bash
# Usage: scripts/check-isa-isolation.sh BINARY
# For a portable build (-DMOE_NATIVE=OFF): no AVX or AVX-512 instruction outside the functions of the
# per-ISA kernel files (namespace moe::cpu::isa_<level>, templates instantiated on its types, vec_math.h's
# inline moe::cpu::vec_<level>), so the binary never executes one on a CPU without it before the ISA dispatch
# has chosen (docs/design.md, "ISA levels"). A library template instantiated in a kernel file and kept by the
# linker for the whole program is the leak this catches. Prints each offending function and exits 1.
set -euo pipefail
bin=${1:?usage: $0 BINARY}
objdump -d --no-show-raw-insn -C "$bin" | awk '
  /^[0-9a-f]+ <.*>:$/ { fn = substr($0, index($0, "<") + 1); sub(/>:$/, "", fn); next }
  /%[xyz]mm(1[6-9]|2[0-9]|3[01])|%zmm|%ymm|%k[0-7]|\{1to|vdpbf16ps|vcvtne2ps2bf16|vpdpbusd/ {
    if (fn ~ /moe::cpu::(isa|vec)_(avx2|avx512|avx512_bf16|amx)::/) next
    if (!(fn in bad)) { bad[fn] = $0; order[++n] = fn }
  }
  END {
    for (i = 1; i <= n; ++i) printf "ISA leak: %s: %s\n", order[i], bad[order[i]]
    if (n) { printf "%d functions outside the ISA kernel files use AVX/AVX-512 instructions\n", n; exit 1 }
    print "isa isolation: ok (no AVX/AVX-512 instruction outside the per-ISA kernel files)"
  }'
