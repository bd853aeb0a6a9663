# shellcheck shell=bash
# A process's first run, started within seconds of another process's exit, measured 20-30 % low or
# noisy (a dense ceiling, or one of the block's calls): on VMs with free page reporting the kernel hands
# the freed memory to the hypervisor a few seconds after the exit, in bursts, on one of the next run's
# vCPUs. Where the kernel counts what it reported (/sys/module/page_reporting/parameters/reported_kib),
# wait until that count has held still for QUIET_S seconds (default 5; at most 90 s in all); elsewhere
# pause SETTLE_S (default 15). Sourced by the scripts that time runs one after another.
settle() {
  local counter=/sys/module/page_reporting/parameters/reported_kib
  if [[ ! -r $counter ]]; then
    sleep "${SETTLE_S:-15}"
    return
  fi
  local last now still=0 waited=0
  last=$(<"$counter")
  while ((still < ${QUIET_S:-5} && waited < 90)); do
    sleep 1
    waited=$((waited + 1))
    now=$(<"$counter")
    if [[ $now == "$last" ]]; then still=$((still + 1)); else still=0 last=$now; fi
  done
}
