#!/bin/bash
# lab-demo.sh DIR NODES - the README's first command (`make lab`): bring up the local lab of
# real OVN/OVS daemons, show that OVN and OVS are running, tear everything down.
set -euo pipefail
DIR=${1:-/tmp/zovn-lab}; NODES=${2:-2}
ZOVN=target/debug/zovn
trap '$ZOVN lab down --dir "$DIR" >/dev/null 2>&1 || true' EXIT

echo "== zovn lab up --nodes $NODES --dir $DIR"
$ZOVN lab up --nodes "$NODES" --dir "$DIR"
echo; echo "== zovn lab status"
STATUS=$($ZOVN lab status --dir "$DIR")
echo "$STATUS"
SB=$(echo "$STATUS" | sed -n 's/^SB: //p')
if [ -n "$SB" ]; then
  echo; echo "== ovn-sbctl show (every node is a chassis with a tunnel endpoint)"
  ovn-sbctl --db="$SB" show
fi
echo; echo "== ovs-vsctl show on node1 (userspace netdev bridges, tunnel ports to the other nodes)"
ovs-vsctl --db="unix:$DIR/node1/run/db.sock" show
echo; echo "== zovn lab down"
trap - EXIT
$ZOVN lab down --dir "$DIR"
echo
echo "Explore on your own: $ZOVN lab up --nodes $NODES   (then: $ZOVN lab status, $ZOVN lab down)"
