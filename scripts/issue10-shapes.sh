# shellcheck shell=bash
# Issue 10's shapes, the seed's own configurations on the CPU, as "T H M E K S" (tokens, hidden,
# mlp_dim, experts, topk, shared_expert_dim): one list for cpu-targets.sh and vs-torch.sh. Sourced.
# shellcheck disable=SC2034
declare -A issue10_shapes=(
  [reference]="8192 1024 1024 16 2 0"
  [seed_routed]="32768 2048 1408 60 2 0"
  [seed_baseline]="32768 2048 1408 60 2 5632"
  [seed_t4096]="4096 2048 1408 60 2 0"
  [seed_t4096_shared]="4096 2048 1408 60 2 5632"
  [seed_t4096_k8]="4096 2048 1408 60 8 0"
  [fine_e64]="4096 1024 512 64 8 0"
  [fine_e128]="2048 2048 768 128 8 0"
  # Issue 21's GPU shapes (H100/H200).
  [gpu_k8]="32768 2048 2048 64 8 0"
  [gpu_k2]="32768 2048 2048 64 2 0"
)
issue10_order=(reference seed_routed seed_baseline seed_t4096 seed_t4096_shared seed_t4096_k8 fine_e64 fine_e128)

# moe-bench's shape flags for one of them.
issue10_flags() {
  local t h m e k s
  read -r t h m e k s <<<"${issue10_shapes[$1]}"
  echo "--tokens $t --hidden $h --mlp-dim $m --experts $e --topk $k --shared-expert-dim $s"
}
