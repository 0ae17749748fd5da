#!/bin/bash
# lab-demo.sh DIR NODES DATAPATHS - the README's first command (`make lab`): bring up the
# local lab of real OVN/OVS daemons with the control plane and a node agent per node (node 1
# on the DPDK datapath, node 2 on the kernel fallback by default), show what each agent
# decided about its datapath and why, apply
# examples/lab/ (Namespaces, Subnets, Pods: each pod a network namespace wired through the
# real CNI plugin), show what was decided (pod addresses, Subnet status), the reachability
# matrix (same node and across the Geneve tunnel), every pod's egress to the lab's external
# host (the address the outside saw), a KubeVirt VM booting a real QEMU guest on node1's
# vhost-user port (examples/vm/) answering a pod on node2, `zovn trace`, `zovn status` and
# `zovn capture`, the OVN rows, tear everything down.
set -euo pipefail
DIR=${1:-/tmp/zovn-lab}; NODES=${2:-2}
if [ "$NODES" = 2 ]; then DATAPATHS=${3:-dpdk,kernel}; else DATAPATHS=${3:-auto}; fi
ZOVN=target/debug/zovn
trap '$ZOVN lab down --dir "$DIR" >/dev/null 2>&1 || true' EXIT
step() { printf '\n== %s\n' "$*"; }

step "zovn lab up --nodes $NODES --datapath $DATAPATHS --dir $DIR"
$ZOVN lab up --nodes "$NODES" --datapath "$DATAPATHS" --dir "$DIR"
STATUS=$($ZOVN lab status --dir "$DIR")
NB=$(echo "$STATUS" | sed -n 's/^NB: //p')
SB=$(echo "$STATUS" | sed -n 's/^SB: //p')

step "zovn lab apply -f examples/lab/ --wait"
$ZOVN lab apply -f examples/lab/ --wait --dir "$DIR"

step "waiting until every pod is Ready (its network namespace wired by the real CNI plugin)"
for _ in $(seq 120); do
  $ZOVN lab get pods --dir "$DIR" | awk 'NR>1 && $7 != "true" {bad=1} END {exit bad}' && break
  sleep 0.25
done

step "zovn lab get nodes     (each agent's datapath: what it decided and why)"
$ZOVN lab get nodes --dir "$DIR"
step "zovn lab get events    (datapath decisions, fallbacks, configuration errors)"
$ZOVN lab get events --dir "$DIR"
step "zovn lab get subnets   (the controller's status: phase, addresses used/available)"
$ZOVN lab get subnets --dir "$DIR"
step "zovn lab get pods      (addresses from each pod's Subnet; db asked for 10.16.0.100)"
$ZOVN lab get pods --dir "$DIR"

step "reachability matrix    (zovn lab probe: every pod to every declared port; hosts to pods)"
python3 scripts/lab-matrix.py "$ZOVN" "$DIR"

step "egress                 (every pod to the external host 198.51.100.10:8080, outside every node: the address it saw)"
for pod in $($ZOVN lab get pods --dir "$DIR" | awk 'NR>1 {print $1}'); do
  printf '  %-22s -> %s\n' "$pod" "$($ZOVN lab probe "$pod" 198.51.100.10:8080 --dir "$DIR" 2>&1 | tail -n1)"
done

QMAJOR=$(qemu-system-x86_64 --version 2>/dev/null | sed -nE '1s/.*version ([0-9]+)\..*/\1/p')
if [[ $DATAPATHS == dpdk,* ]] && [ "${QMAJOR:-0}" -ge 10 ]; then
  step "a KubeVirt VM on vhost-user   (examples/vm/: a real QEMU guest behind node1's OVS-DPDK)"
  $ZOVN lab apply -f examples/vm/ --dir "$DIR"
  VM=""
  for _ in $(seq 600); do
    VM=$($ZOVN lab get pods --dir "$DIR" | awk '$1 ~ /^demo\/virt-launcher-guest1-/ && $7 == "true" {print $1, $3}')
    [ -n "$VM" ] && break
    sleep 0.5
  done
  if [ -n "$VM" ]; then
    VMIP=${VM##* }; VMIP=${VMIP%%,*}; VMIP=${VMIP%%/*}
    echo "  $VM ready; boot timeline (ms after QEMU's start):"
    cat "$DIR"/pods/run/*.vm-boot.json | tr -d '\n ' | sed 's/^/  /'; echo
    echo "  demo/db (node2) -> guest1 $VMIP:"
    $ZOVN lab exec demo/db --dir "$DIR" -- ping -c 3 -W 5 "$VMIP" | sed 's/^/    /'
  else
    echo "  guest1 not ready: $($ZOVN lab get pods --dir "$DIR" | grep virt-launcher-guest1)"
  fi
else
  step "a KubeVirt VM on vhost-user: skipped (needs node1 on dpdk and QEMU >= 10: scripts/install-deps.sh)"
fi

step "zovn trace blue/client demo/db:5432   (why a packet is delivered or dropped, and by what)"
$ZOVN trace blue/client demo/db:5432 --dir "$DIR" || true
step "zovn status            (OVN central, each node's datapath decision, pods with problems)"
$ZOVN status --dir "$DIR"
step "zovn capture demo/web --count 4   (the pod's packets from OVS itself, any datapath)"
# the pod's own pings to the external host, captured on its OVS port (a Mirror that is gone after)
$ZOVN lab exec demo/web --dir "$DIR" -- ping -c 6 -i 0.3 198.51.100.10 >/dev/null 2>&1 &
PING=$!
$ZOVN capture demo/web --count 4 --duration 10 --dir "$DIR" || true
wait "$PING" || true

step "zovn lab stats         (PMD threads, rx queue usage, per-pod port counters)"
$ZOVN lab stats --dir "$DIR" || true

step "ovn-nbctl show         (the OVN topology the controller wrote)"
ovn-nbctl --db="$NB" show
step "ovn-sbctl show         (every node is a chassis with a Geneve endpoint)"
ovn-sbctl --db="$SB" show

step "zovn lab down"
trap - EXIT
$ZOVN lab down --dir "$DIR"
cat <<TXT

Explore on your own:
  $ZOVN lab up --nodes $NODES --datapath $DATAPATHS   # auto|dpdk|afxdp|kernel, per node
  $ZOVN lab apply -f examples/lab/      # edit the files and apply again: objects update
  $ZOVN lab get pods | get sn
  $ZOVN lab exec demo/web -- ip addr             # a shell command inside a pod
  $ZOVN lab probe blue/client 10.16.0.100:5432   # exit 0 when reachable
  $ZOVN trace blue/client demo/db:5432           # delivered or dropped, and why
  $ZOVN capture demo/web -w web.pcap             # the pod's packets as pcap (Ctrl-C ends)
  $ZOVN lab down
TXT
