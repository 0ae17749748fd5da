#!/bin/bash
# install-deps.sh - install what the lab and the tests need on Debian 12 (run as root).
# Idempotent: only missing packages are installed, and apt is not touched when none are.
# Nothing is started: the lab starts its own daemons in private directories.
set -euo pipefail

PACKAGES=(
  openvswitch-switch openvswitch-switch-dpdk   # ovsdb-server, ovs-vswitchd (+ DPDK build), ovs-vsctl
  ovn-central ovn-host                         # ovn-northd, ovn-nbctl/sbctl, ovn-controller
  dpdk                                         # DPDK runtime (PMDs) used by ovs-vswitchd-dpdk
  dpdk-dev                                     # dpdk-testpmd: the vhost-user "VM" of the lab and the vhost benchmark
  iproute2 iputils-ping ethtool iperf3 qperf   # namespaces, veths, ping, offload settings, traffic
  etcd-server                                  # etcd 3.4 for the tests' private kube-apiserver
  containerd runc busybox-static               # a real container runtime for the CNI tests (ctr run --cni)
  containernetworking-plugins                  # zovn cluster: the loopback CNI plugin containerd's CRI runs
  python3                                      # dependency policy check, lab reachability matrix
  nftables                                     # nft: the node agent's host Service NAT table (inet zstack-ovn)
  mmdebstrap umoci                             # make images: the Debian root filesystem, the OCI layout (no daemon)
)

die() { echo "install-deps: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (the lab creates namespaces and starts OVS/OVN daemons)"
command -v dpkg-query >/dev/null || die "this script supports Debian 12 (dpkg/apt) only"

# kubectl for `zovn cluster`: Debian's kubernetes-client (1.20) unless one is installed
# already (another package, e.g. a cloud SDK's `kubectl`, would conflict with it)
command -v kubectl >/dev/null || PACKAGES+=(kubernetes-client)

# shellcheck source=lib/apt.sh
. "$(dirname "$0")/lib/apt.sh"
apt_install_missing install-deps "${PACKAGES[@]}"

"$(dirname "$0")/install-helm.sh"                # helm 3.17.2 for the chart tests (not a Debian package)

command -v cargo >/dev/null || die "cargo not found: install a Rust toolchain >= 1.95 (rustup) and retry"
rustc_minor=$(rustc --version | sed -E 's/rustc 1\.([0-9]+).*/\1/')
[ "$rustc_minor" -ge 95 ] || die "rustc $(rustc --version) is older than 1.95"
echo "install-deps: all present ($(ovs-vsctl --version | head -1), $(ovn-nbctl --version | head -1))"
