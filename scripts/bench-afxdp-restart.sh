#!/bin/bash
# bench-afxdp-restart.sh - `make bench-afxdp-restart`: how long Debian's ovs-vswitchd (OVS
# 3.1, userspace datapath, no zstack-ovn code) takes to come back after a restart with N
# AF_XDP ports, the floor under every in-place ovs-vswitchd restart on an AF_XDP node
# (docs/performance.md, "ovs-vswitchd restart with AF_XDP ports").
#
# In a network namespace of its own (veth pairs, no traffic leaves it) and a state dir of
# its own: ovsdb-server + ovs-vswitchd, one netdev bridge; for N in $COUNTS, N AF_XDP
# ports on veths, then ROUNDS restarts (`ovs-appctl exit`, start) each timed from the old
# process's exit to every port attached again (ofport != -1) and the daemon answering.
# Prints each figure and its ratio to N=0 (the same script's baseline). Root; stops only
# the daemons it started, by pidfile.
set -euo pipefail
COUNTS=${COUNTS:-"0 1 2 4 8"}
ROUNDS=${ROUNDS:-3}
[ "$(id -u)" = 0 ] || { echo "bench-afxdp-restart: run as root" >&2; exit 1; }
for b in ovsdb-server ovs-vswitchd ovs-vsctl ovs-appctl ovsdb-tool bc; do
  command -v "$b" >/dev/null || { echo "bench-afxdp-restart: $b missing (scripts/install-deps.sh)" >&2; exit 1; }
done
R=$(mktemp -d "${TMPDIR:-/tmp}/zovn-afxdp-restart.XXXXXX")
NSN="zovn-afxr-$$"
cleanup() {
  for d in ovs-vswitchd ovsdb-server; do
    [ -s "$R/$d.pid" ] && kill "$(cat "$R/$d.pid")" 2>/dev/null || true
  done
  ip netns del "$NSN" 2>/dev/null || true
  rm -rf "$R"
}
trap cleanup EXIT
ip netns add "$NSN"
NS=(ip netns exec "$NSN")
"${NS[@]}" ip link set lo up
ovsdb-tool create "$R/conf.db" /usr/share/openvswitch/vswitch.ovsschema
"${NS[@]}" ovsdb-server "$R/conf.db" --remote="punix:$R/db.sock" --pidfile="$R/ovsdb-server.pid" \
  --unixctl="$R/ovsdb-server.ctl" --detach --log-file="$R/ovsdb-server.log" -vconsole:off
vs() { ovs-vsctl --db="unix:$R/db.sock" "$@"; }
vs --no-wait init -- set Open_vSwitch . other_config:pmd-maxsleep=50
vs --no-wait add-br br0 -- set bridge br0 datapath_type=netdev
start_vs() {
  "${NS[@]}" env ${VSWITCHD_ENV:-} ovs-vswitchd "unix:$R/db.sock" --pidfile="$R/ovs-vswitchd.pid" \
    --unixctl="$R/ovs-vswitchd.ctl" --detach --log-file="$R/ovs-vswitchd.log" -vconsole:off 2>/dev/null
}
stop_vs() {
  local p; p=$(cat "$R/ovs-vswitchd.pid")
  ovs-appctl -t "$R/ovs-vswitchd.ctl" exit
  while [ -e "/proc/$p" ]; do sleep 0.01; done
}
start_vs
n=0
base=
echo "ovs-vswitchd $(ovs-vswitchd --version | head -1 | awk '{print $NF}') restart with N AF_XDP ports (veth, $(nproc) CPUs), $ROUNDS rounds each:"
for N in $COUNTS; do
  while [ "$n" -lt "$N" ]; do
    n=$((n + 1))
    "${NS[@]}" ip link add "a$n" type veth peer name "b$n"
    "${NS[@]}" ip link set "a$n" up
    "${NS[@]}" ip link set "b$n" up
    vs add-port br0 "a$n" -- set interface "a$n" type=afxdp
  done
  best=
  for _ in $(seq 1 "$ROUNDS"); do
    stop_vs
    t0=$(date +%s.%N)
    start_vs
    for i in $(seq 1 "$N"); do vs --timeout=30 wait-until interface "a$i" ofport!=-1 >/dev/null; done
    ovs-appctl -t "$R/ovs-vswitchd.ctl" version >/dev/null
    t=$(echo "$(date +%s.%N) - $t0" | bc)
    if [ -z "$best" ] || [ "$(echo "$t < $best" | bc)" = 1 ]; then best=$t; fi
  done
  [ -n "$base" ] || base=$best
  printf '  N=%-2s best %.3f s  (%.1fx N=0)\n' "$N" "$best" "$(echo "$best / $base" | bc -l)"
  if [ "$N" -gt 0 ]; then
    printf '        per AF_XDP port %.3f s\n' "$(echo "($best - $base) / $N" | bc -l)"
  fi
done
# where it goes: ovs-vswitchd's own account of its first, blocking reconfiguration
grep -h 'Unreasonably long\|faults:' "$R/ovs-vswitchd.log" | tail -2 | sed 's/^[^|]*|[^|]*|[^|]*|[^|]*|/  last start: /' || true
