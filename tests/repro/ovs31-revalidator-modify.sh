#!/bin/bash
# Minimal reproduction: OVS 3.1 userspace datapath, a revalidator MODIFY of megaflow S lands on an
# overlapping broader megaflow B (dpif-netdev looks the flow up by key, not by ufid), so S keeps
# its old actions while its ukey records the new ones: stale until S idles out or a purge.
#
# Run as root on a machine with Debian's openvswitch-switch (userspace datapath, no kernel
# module needed): bash tests/repro/ovs31-revalidator-modify.sh
# It uses its own namespaces (zrp-sw, zrp-a, zrp-b), 10.9.0.0/24 and /tmp/ovsrepro, and
# removes them at the end (KEEP=1 keeps them). Expect, with OVS 3.1.0: after v2, S still
# shows `actions:<port>` while the trace says `drop`, and "received 50 of 50".
# SKIP_B=1 leaves B out: S is then modified to `drop` and nothing is received (the control).
# The node agent's guard against this: dataplane/src/datapath/megaflow_guard.rs.
set -u
D=/tmp/ovsrepro; NS=zrp-sw
cleanup() {
  for p in $D/vs.pid $D/db.pid; do [ -f $p ] && kill $(cat $p) 2>/dev/null; done
  ip netns del $NS 2>/dev/null; ip netns del zrp-a 2>/dev/null; ip netns del zrp-b 2>/dev/null
}
cleanup; sleep 0.5; rm -rf $D; mkdir -p $D
export OVS_RUNDIR=$D OVS_DBDIR=$D OVS_LOGDIR=$D OVS_SYSCONFDIR=$D
ip netns add $NS; ip netns add zrp-a; ip netns add zrp-b
ip -n $NS link set lo up
ovsdb-tool create $D/conf.db /usr/share/openvswitch/vswitch.ovsschema
ovsdb-server $D/conf.db --remote=punix:$D/db.sock --pidfile=$D/db.pid --unixctl=$D/db.ctl --log-file=$D/db.log --detach -vconsole:off
V="ovs-vsctl --db=unix:$D/db.sock"
$V --no-wait init
ip netns exec $NS /usr/lib/openvswitch-switch/ovs-vswitchd unix:$D/db.sock --pidfile=$D/vs.pid --unixctl=$D/vs.ctl --log-file=$D/vs.log --detach -vconsole:off
C="ovs-appctl -t $D/vs.ctl"
$V add-br br0 -- set bridge br0 datapath_type=netdev fail_mode=secure
for x in a b; do
  ip link add zrp$x netns $NS type veth peer name eth0 netns zrp-$x
  ip -n $NS link set zrp$x up; ip -n zrp-$x link set eth0 up; ip -n zrp-$x link set lo up
  $V add-port br0 zrp$x -- set interface zrp$x ofport_request=$([ $x = a ] && echo 1 || echo 2)
done
ip netns exec zrp-a ethtool -K eth0 tx off >/dev/null; ip -n zrp-a addr add 10.9.0.1/24 dev eth0; ip -n zrp-b addr add 10.9.0.2/24 dev eth0
ip -n zrp-a neigh add 10.9.0.2 lladdr $(ip -n zrp-b -br link show eth0 | awk '{print $3}') dev eth0
OF="ovs-ofctl"; BR=unix:$D/br0.mgmt
# v1: only udp to port 81 is forwarded (S gets tp_dst in its mask), the rest dropped
cat > $D/v1 <<F
priority=10,udp,in_port=1,tp_dst=81,actions=output:2
priority=1,actions=drop
F
# v2: all udp from port 1 dropped (a translation that needs no tp_dst)
cat > $D/v2 <<F
priority=1,actions=drop
F
$OF replace-flows $BR $D/v1
ip netns exec zrp-b python3 -c "
import socket
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(('0.0.0.0',81)); n=0
while True:
    s.recv(100); n+=1; open('$D/rx81','w').write(str(n))
" &
RX=$!
sleep 1
send() { ip netns exec zrp-a python3 -c "
import socket,sys,time
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
for i in range(int(sys.argv[2])):
    s.sendto(b'x',('10.9.0.2',int(sys.argv[1]))); time.sleep(0.002)
" $1 $2; }
rx() { cat $D/rx81 2>/dev/null || echo 0; }
flows() { $C dpctl/dump-flows -m | grep "proto=17" | sed -E 's/^ufid:(.{8})[^,]*,.*(ipv4\([^)]*\)),(udp\([^)]*\)).*packets:([0-9]*).*actions:([^,]*).*/  \1 \2 \3 packets:\4 actions:\5/'; }
send 81 50; sleep 0.3
echo "--- v1 (udp/81 forwarded), after 50 udp/81: received $(rx)"; flows
$C revalidator/pause
$OF replace-flows $BR $D/v2
[ "${SKIP_B:-0}" = 1 ] || send 80 600       # B: a broad drop flow, hit often so its dpcls subtable ranks first
sleep 1.5         # the dpcls re-sorts its subtables every second
$C revalidator/resume
sleep 2
echo "--- v2 (all dropped) installed and revalidated; trace of udp/81 now:"
$C ofproto/trace br0 udp,in_port=1,udp_dst=81 | grep "Datapath actions" | sed 's/^/  /'
flows
B=$($C dpctl/dump-flows -m | grep "proto=17" | grep "dst=80" | grep -o "^ufid:[^,]*")
echo "--- B ($B) deleted (as an idle timeout would); 50 udp/81 more:"
before=$(rx); $C dpctl/del-flow "$B" >/dev/null; send 81 50; sleep 0.3
echo "  received $(( $(rx) - before )) of 50 (want 0: v2 drops every packet)"; flows
kill $RX 2>/dev/null
[ "${KEEP:-0}" = 1 ] || cleanup
