#!/bin/sh
# node-mounts.sh ROOT: run once inside a node's new mount namespace (and its netns) by
# `zovn cluster up`. Gives the node what a kind node gets from its container:
#   - a sysfs of the node's network namespace (/sys/class/net lists eth0, eth1, br-int...),
#     with the host's cgroup hierarchies mounted back under /sys/fs/cgroup;
#   - its own /run (containerd's state and socket, /run/netns of its pods, the OVS and
#     zstack-ovn sockets) and its own copies of the directories kubelet, containerd, CNI and
#     OVS keep state in, bind-mounted from ROOT/<path>;
#   - shared propagation inside the namespace (kubelet's mount propagation, the agent's
#     Bidirectional mounts into /var/lib/kubelet/pods), private towards the host.
set -eu
ROOT=$1
HOLD=$ROOT/.cgroup-hold
mkdir -p "$HOLD"
mount --rbind /sys/fs/cgroup "$HOLD"
umount -l /sys
mount -t sysfs sysfs /sys
mount --rbind "$HOLD" /sys/fs/cgroup
umount -l "$HOLD"
rmdir "$HOLD"
mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/netns /run/lock
for d in var/lib/kubelet var/lib/containerd var/lib/cni etc/cni/net.d opt/cni/bin \
         var/log/pods var/log/containers etc/openvswitch var/lib/openvswitch \
         var/log/openvswitch etc/ovn var/lib/ovn var/log/ovn var/lib/zstack-ovn; do
  mkdir -p "$ROOT/$d" "/$d"
  mount --bind "$ROOT/$d" "/$d"
done
# containerd's CRI always runs the loopback plugin besides the pod network's
cp /usr/lib/cni/loopback /opt/cni/bin/loopback
mount --make-rshared /
