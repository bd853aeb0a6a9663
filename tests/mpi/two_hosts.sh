#!/usr/bin/env bash
# Two hosts made on this machine: network namespaces joined by a veth pair (10.77.x.1 and .2), OpenMPI's
# TCP transport between them (no shared memory: the ranks are on different "nodes" of the hostfile), and
# a launch agent (mpirun's rsh agent, in place of ssh) that starts the remote daemon inside the other
# host's namespace. moe-bench runs 2 ranks, one per host, with --check. Exits 77 (CTest: SKIPPED) with
# the reason where namespaces or veth pairs cannot be made (no CAP_NET_ADMIN, no `ip`).
#   usage: two_hosts.sh MOE_BENCH MPIRUN
set -u
bench=$1
mpirun=$2
id=$$
net=$((id % 200 + 20))  # 10.77.<net>.0/24: concurrent runs do not share a subnet
a=moe_a_$id b=moe_b_$id
work=$(mktemp -d)
cleanup() {
  ip netns del "$a" 2>/dev/null
  ip netns del "$b" 2>/dev/null
  ip link del "va$id" 2>/dev/null  # a veth end not moved into a namespace yet
  rm -rf "$work"
}
trap cleanup EXIT
skip() {
  echo "SKIPPED: $1"
  exit 77
}
command -v ip >/dev/null || skip "no ip command (iproute2) to make network namespaces"
err=$(ip netns add "$a" 2>&1) || skip "cannot make a network namespace (ip netns add: $err)"
ip netns add "$b" || skip "cannot make a second network namespace"
err=$(ip link add "va$id" type veth peer name "vb$id" 2>&1) || skip "cannot make a veth pair: $err"
ip link set "va$id" netns "$a" && ip link set "vb$id" netns "$b" || skip "cannot move the veth ends"
for side in "$a va$id 1" "$b vb$id 2"; do
  set -- $side
  ip -n "$1" addr add "10.77.$net.$3/24" dev "$2" && ip -n "$1" link set "$2" up && ip -n "$1" link set lo up ||
    skip "cannot configure $2 in $1"
done
ip netns exec "$a" ping -c 1 -W 2 "10.77.$net.2" >/dev/null 2>&1 || echo "note: ping between the hosts failed"

# The launch agent: called as `agent HOST COMMAND...` (ssh's form); runs the command in HOST's namespace.
cat >"$work/agent" <<AGENT
#!/bin/sh
host=\$1; shift
case "\$host" in
  10.77.$net.1) ns=$a ;;
  10.77.$net.2) ns=$b ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
echo "\$host \$ns" >>"$work/launched"
exec ip netns exec "\$ns" /bin/sh -c "\$*"
AGENT
chmod +x "$work/agent"
printf '10.77.%s.1 slots=1\n10.77.%s.2 slots=1\n' "$net" "$net" >"$work/hosts"

out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 ip netns exec "$a" "$mpirun" \
  -np 2 --hostfile "$work/hosts" --map-by node --bind-to none \
  --mca plm_rsh_agent "$work/agent" --mca btl tcp,self --mca btl_tcp_if_include "10.77.$net.0/24" \
  --mca oob_tcp_if_include "10.77.$net.0/24" -x OMP_NUM_THREADS=1 -x MOE_TUNING_FILE -x XDG_CACHE_HOME \
  "$bench" --tokens 37 --hidden 32 --mlp-dim 24 --experts 8 --topk 2 --impl fused_w13 \
  --distribution random --iters 2 --warmup 1 --ceiling off --parallel-mode ep --ep-comm-path all_to_all \
  --dtype float32 --bench-pass forward_backward --check 2>&1)
rc=$?
echo "$out"
echo "launched: $(cat "$work/launched" 2>/dev/null)"
[ $rc -eq 0 ] || { echo "FAIL: mpirun over two namespaces exited $rc"; exit 1; }
grep -q "CHECK pass=true" <<<"$out" || { echo "FAIL: no CHECK pass=true"; exit 1; }
grep -q "world_size=2" <<<"$out" || { echo "FAIL: not 2 ranks"; exit 1; }
grep -q "10.77.$net.2 $b" "$work/launched" || { echo "FAIL: the agent did not start the second host"; exit 1; }
echo "PASS: 2 ranks on 2 network namespaces over TCP"
