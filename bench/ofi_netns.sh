#!/usr/bin/env bash
# Runs `sluice perf --transport ofi` across two network namespaces joined by
# a veth pair, so that flows, the kernel TCP peer and the latency pairs cross
# a (virtual) network link between two "hosts":
#
#   ns A: 198.18.200.1/24  registry, source ranks, TCP writer
#   ns B: 198.18.200.2/24  target ranks, TCP reader
#
# sluice perf starts every process itself with `ip netns exec`: the registry
# as `sluice-perf registry --bind 198.18.200.1:0 --world N` (secret in SLUICE_SECRET) in A, the
# ranks as `sluice-perf worker ...` with SLUICE_RANK / SLUICE_WORLD_SIZE /
# SLUICE_REGISTRY / SLUICE_SECRET / SLUICE_TRANSPORT=ofi set by hand (sources
# in A, targets in B), and the TCP peer as `sluice-perf tcp --listen` in B and
# `--connect` in A. It prints the same table and JSON as on one host.
#
# Usage (as root):  bench/ofi_netns.sh [SLUICE_BINARY] [sluice perf options...]
#   default binary: build/bin/sluice; default options:
#   --segment-bytes 65536 --sizes 64,1024 --shapes 1x1,2x2 --repeats 5 --mbytes 512
# Example: bench/ofi_netns.sh build-perf2/bin/sluice --json /tmp/ofi_netns.json
#
# The namespaces carry this shell's pid in their names and are removed by a
# trap on exit, failure or Ctrl-C. Runtime is bounded by `timeout`
# (OFI_NETNS_TIMEOUT seconds, default 900).
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
  echo "bench/ofi_netns.sh: skipped: needs root (network namespaces and veth links)" >&2
  exit 0
fi
if ! command -v ip >/dev/null; then
  echo "bench/ofi_netns.sh: skipped: no \`ip\` program (iproute2)" >&2
  exit 0
fi

here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/build/bin/sluice}
[[ $# -gt 0 ]] && shift
bin=$(readlink -f "$bin")
if [[ ! -x $bin ]]; then
  echo "bench/ofi_netns.sh: no sluice binary at $bin (build first, or pass its path)" >&2
  exit 2
fi
opts=("$@")
if [[ ${#opts[@]} -eq 0 ]]; then
  opts=(--segment-bytes 65536 --sizes 64,1024 --shapes 1x1,2x2 --repeats 5 --mbytes 512)
fi

tag=$$
ns_a=sluice-perf-$tag-a
ns_b=sluice-perf-$tag-b
veth_a=sp${tag}a
veth_b=sp${tag}b
ip_a=198.18.200.1
ip_b=198.18.200.2

cleanup() {
  local rc=$?
  for ns in "$ns_a" "$ns_b"; do
    # Processes left inside would keep the namespace alive.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns delete "$ns" 2>/dev/null || true
  done
  ip link delete "$veth_a" 2>/dev/null || true
  exit $rc
}
trap cleanup EXIT INT TERM HUP

ip netns add "$ns_a"
ip netns add "$ns_b"
ip link add "$veth_a" type veth peer name "$veth_b"
ip link set "$veth_a" netns "$ns_a"
ip link set "$veth_b" netns "$ns_b"
ip -n "$ns_a" addr add $ip_a/24 dev "$veth_a"
ip -n "$ns_b" addr add $ip_b/24 dev "$veth_b"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set "$veth_a" up
ip -n "$ns_b" link set "$veth_b" up
# veth links pass traffic as soon as both ends are up (the TCP peer and the
# registry clients retry their connects in any case).
sleep 0.2
echo "bench/ofi_netns.sh: $ns_a ($ip_a) <-veth-> $ns_b ($ip_b); MTU $(ip -n "$ns_a" -o link show "$veth_a" | sed -n 's/.*mtu \([0-9]*\).*/\1/p')" >&2

cmd=("$bin" perf --transport ofi --netns "$ns_a=$ip_a,$ns_b=$ip_b" "${opts[@]}")
echo "bench/ofi_netns.sh: ${cmd[*]}" >&2
timeout --kill-after=10 "${OFI_NETNS_TIMEOUT:-900}" "${cmd[@]}"
