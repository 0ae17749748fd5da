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

# --- QEMU >= 10 for the VM tests (issue #34; scripts/vm-guest-image.sh, docs/vm-guest.md) -------
# Debian 12's QEMU 7.2 segfaults under TCG with a vhost-user NIC and MSI-X once the guest driver
# starts the device; 10.x from bookworm-backports works. The backports source keeps its default
# priority (100: nothing comes from it unasked), a preferences file lets only the qemu-* packages
# follow it, and the install names the release (-t) for the two hard dependencies it also needs
# (seabios 1.16.3, libbrlapi0.8). qemu-system-data ships /usr/share/qemu/qboot.rom (PVH firmware).
QEMU_MIN_MAJOR=10
qemu_major() { qemu-system-x86_64 --version 2>/dev/null | sed -nE '1s/.*version ([0-9]+)\..*/\1/p'; }
install_qemu() {
  local list=/etc/apt/sources.list.d/zovn-backports.list pref=/etc/apt/preferences.d/zovn-backports-qemu
  local codename
  if [ "$(qemu_major)" -ge "$QEMU_MIN_MAJOR" ] 2>/dev/null && [ -r /usr/share/qemu/qboot.rom ]; then
    return 0
  fi
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  if [ "$codename" != bookworm ]; then            # later Debian releases ship QEMU >= 10 themselves
    apt_install_missing install-deps qemu-system-x86 qemu-system-data
  else
    local f have=""
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
      grep -qsE '^[^#]*bookworm-backports' "$f" && have=1
    done
    [ -n "$have" ] || echo "deb http://deb.debian.org/debian bookworm-backports main" >"$list"
    [ -e "$pref" ] || cat >"$pref" <<'EOF'
Explanation: zovn scripts/install-deps.sh: QEMU >= 10 from bookworm-backports, nothing else
Package: qemu-*
Pin: release n=bookworm-backports
Pin-Priority: 500
EOF
    echo "install-deps: installing qemu-system-x86 >= $QEMU_MIN_MAJOR from bookworm-backports"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends -t bookworm-backports qemu-system-x86 qemu-system-data >/dev/null
  fi
  [ "$(qemu_major)" -ge "$QEMU_MIN_MAJOR" ] 2>/dev/null ||
    die "qemu-system-x86_64 is $(qemu_major || true).x after the install, not >= $QEMU_MIN_MAJOR"
  [ -r /usr/share/qemu/qboot.rom ] || die "/usr/share/qemu/qboot.rom missing (package qemu-system-data)"
}
install_qemu

"$(dirname "$0")/install-helm.sh"                # helm 3.17.2 for the chart tests (not a Debian package)

command -v cargo >/dev/null || die "cargo not found: install a Rust toolchain >= 1.95 (rustup) and retry"
rustc_minor=$(rustc --version | sed -E 's/rustc 1\.([0-9]+).*/\1/')
[ "$rustc_minor" -ge 95 ] || die "rustc $(rustc --version) is older than 1.95"
echo "install-deps: all present ($(ovs-vsctl --version | head -1), $(ovn-nbctl --version | head -1))"
