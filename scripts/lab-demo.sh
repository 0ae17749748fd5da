#!/bin/bash
# lab-demo.sh DIR NODES - the README's first command (`make lab`): bring up the local lab of
# real OVN/OVS daemons with the control plane, apply examples/lab/ (Namespaces, Subnets,
# Pods), show what the controller decided (pod addresses, Subnet status, OVN rows), tear
# everything down.
set -euo pipefail
DIR=${1:-/tmp/zovn-lab}; NODES=${2:-2}
ZOVN=target/debug/zovn
trap '$ZOVN lab down --dir "$DIR" >/dev/null 2>&1 || true' EXIT
step() { printf '\n== %s\n' "$*"; }

step "zovn lab up --nodes $NODES --dir $DIR"
$ZOVN lab up --nodes "$NODES" --dir "$DIR"
STATUS=$($ZOVN lab status --dir "$DIR")
NB=$(echo "$STATUS" | sed -n 's/^NB: //p')
SB=$(echo "$STATUS" | sed -n 's/^SB: //p')

step "zovn lab apply -f examples/lab/ --wait"
$ZOVN lab apply -f examples/lab/ --wait --dir "$DIR"

step "zovn lab get subnets   (the controller's status: phase, addresses used/available)"
$ZOVN lab get subnets --dir "$DIR"
step "zovn lab get pods      (addresses from each pod's Subnet; db asked for 10.16.0.100)"
$ZOVN lab get pods --dir "$DIR"

step "ovn-nbctl show         (the OVN topology the controller wrote)"
ovn-nbctl --db="$NB" show
step "ovn-sbctl show         (every node is a chassis with a Geneve endpoint)"
ovn-sbctl --db="$SB" show

step "zovn lab down"
trap - EXIT
$ZOVN lab down --dir "$DIR"
cat <<TXT

Explore on your own:
  $ZOVN lab up --nodes $NODES
  $ZOVN lab apply -f examples/lab/      # edit the files and apply again: objects update
  $ZOVN lab get pods | get sn
  $ZOVN lab down
TXT
