#!/usr/bin/env bash
# moe-bench against a PyTorch eager MoE block, the peer issue 10 names (argsort, index_select,
# torch._grouped_mm, SwiGLU, index_add): same shapes, dtype (bfloat16), routing distribution (random
# logits, top-k, softmax over the selected) and thread count, the two timed alternately in one run of
# this script, so a noisy machine hits both. PyTorch is a benchmark peer only: it comes from PyPI into a
# virtual environment this script makes ($TORCH_VENV, default .venv-torch/, about 4 GB with the CUDA
# wheels PyPI's torch depends on), never a dependency of moe-bench or its tests.
# Prints a Markdown table: per shape and pass the median time of each and torch / moe-bench (> 1: we
# are faster). Usage: scripts/vs-torch.sh [extra moe-bench flags]; THREADS (default 2), SHAPES
# (names in issue10-shapes.sh), REPEATS (default 2) narrow or widen it; DTYPE=float32 times both in float32
# (default bfloat16; PyTorch 2.15's bf16 _grouped_mm on an AVX2 CPU took over 2 minutes a forward call at
# the reference shape, where moe-bench took 1.7 s). DEVICE=cuda times both on the GPU (PyTorch
# synchronizes around each call as moe-bench does); TORCH_PYTHON names a Python that already has torch
# (the GPU machine's image) instead of the virtual environment; PEER_ITERS (default 3) sets the peer's
# timed calls.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${TORCH_VENV:-.venv-torch}
python=${TORCH_PYTHON:-$venv/bin/python}
if [[ -z ${TORCH_PYTHON:-} ]] && { [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import torch' 2>/dev/null; }; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "torch==${TORCH_VERSION:-2.15.0}" numpy >&2
fi
device=${DEVICE:-cpu}
threads=${THREADS:-2}
dtype=${DTYPE:-bfloat16}
source scripts/issue10-shapes.sh
# seed_routed (the baseline without its shared expert) is left out by default: minutes of torch.
order=(reference seed_baseline seed_t4096 seed_t4096_shared seed_t4096_k8 fine_e64 fine_e128)
# shellcheck disable=SC2206
selected=(${SHAPES:-${order[*]}})
peer=$(mktemp --suffix=.py)
rows=$(mktemp)
trap 'rm -f "$peer" "$rows"' EXIT
cat >"$peer" <<'PY'
# The peer: one MoE block in PyTorch eager, fused w13 like moe-bench's fused_w13, bf16 storage.
import sys, time, statistics, torch
import torch.nn.functional as F
T, H, M, E, K, S, threads, iters, warmup = map(int, sys.argv[1:10])
backward = sys.argv[10] == "forward_backward"
run_dtype = torch.float32 if sys.argv[11] == "float32" else torch.bfloat16
device = sys.argv[12]
torch.set_default_device(device)
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
torch.manual_seed(0)
torch.set_num_threads(threads)
bf16 = run_dtype  # the run's storage dtype (the name kept from the bf16-only peer)
def param(*shape):
    return torch.randn(*shape, dtype=bf16).requires_grad_(backward)
x, w1, w3, w2 = param(T, H), param(E, H, M), param(E, H, M), param(E, M, H)
sw1, sw3, sw2 = (param(H, S), param(H, S), param(S, H)) if S else (None, None, None)
logits = torch.randn(T, E)
top_logits, top_ids = logits.topk(K, dim=1)
top_w = torch.softmax(top_logits, dim=1)
def block():
    flat = top_ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    token = order // K
    offs = torch.bincount(flat, minlength=E).cumsum(0).to(torch.int32)
    xs = x.index_select(0, token)
    w13 = torch.cat([w1, w3], dim=-1)
    h = torch._grouped_mm(xs, w13, offs=offs)
    g = F.silu(h[:, :M]) * h[:, M:]
    ys = torch._grouped_mm(g, w2, offs=offs) * top_w.reshape(-1)[order].unsqueeze(1).to(bf16)
    y = torch.zeros(T, H, dtype=torch.float32).index_add_(0, token, ys.float())
    if S:  # bf16 operands, f32 accumulation: moe-bench's default matmul precision
        y = y + ((F.silu(x @ sw1) * (x @ sw3)) @ sw2).float()
    return y.to(bf16)
def step():
    if backward:
        for p in (x, w1, w3, w2, sw1, sw3, sw2):
            if p is not None: p.grad = None
        y = block()
        (y.float() ** 2).mean().backward()
    else:
        with torch.no_grad():
            block()
for _ in range(1 + warmup): step()
times = []
for _ in range(iters):
    sync(); t0 = time.perf_counter(); step(); sync(); times.append(time.perf_counter() - t0)
print(statistics.median(times))
PY
for name in "${selected[@]}"; do
  read -r T H M E K S <<<"${issue10_shapes[$name]}"
  for pass in forward forward_backward; do
    for rep in $(seq "${REPEATS:-2}"); do
      ours=$(build/moe-bench --tokens "$T" --hidden "$H" --mlp-dim "$M" --experts "$E" --topk "$K" \
        --shared-expert-dim "$S" --impl fused_w13 --backend ragged_dot --distribution random --dtype "$dtype" \
        --bench-pass "$pass" --iters 3 --warmup 1 --threads "$threads" --device "$device" --format jsonl "$@" 2>/dev/null |
        grep -o '"time_median_s":[^,}]*' | cut -d: -f2)
      theirs=$("$python" "$peer" "$T" "$H" "$M" "$E" "$K" "$S" "$threads" "${PEER_ITERS:-3}" 1 "$pass" "$dtype" "$device")
      echo "$name $pass $ours $theirs" >>"$rows"
      echo "vs-torch: $name $pass rep $rep: moe-bench ${ours}s torch ${theirs}s" >&2
    done
  done
done
if [[ $device == cuda ]]; then where="GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"; else
  where="CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $threads threads"; fi
echo "$where, $dtype, torch $("$python" -c 'import torch; print(torch.__version__)'), moe-bench $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown), $(date -u +%Y-%m-%d)"
echo
echo "| shape | pass | moe-bench median (s) | torch median (s) | torch / moe-bench |"
echo "|---|---|---:|---:|---:|"
# The best (lowest) median of the repetitions on each side.
sort -k1,1 -k2,2 "$rows" | awk '{ key = $1 " | " $2; if (!(key in a) || $3 < a[key]) a[key] = $3;
  if (!(key in b) || $4 < b[key]) b[key] = $4; if (!(key in seen)) { seen[key] = 1; keys[++n] = key } }
  END { for (i = 1; i <= n; ++i) printf "| %s | %.4f | %.4f | %.2fx |\n", keys[i], a[keys[i]], b[keys[i]], b[keys[i]] / a[keys[i]] }'
