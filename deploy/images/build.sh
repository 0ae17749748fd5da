#!/bin/bash
# build.sh - `make images`: the one zstack-ovn image (controller, OVN central, every node
# pool) as an OCI archive, target/images/zstack-ovn-<version>.oci.tar, built offline
# except for Debian's archive: no registry pull, no daemon.
#
#   1. layer 1, Debian bookworm: mmdebstrap --variant=essential with only PACKAGES below, no
#      Recommends, no docs/man/locales, apt lists and caches removed. The tarball is cached
#      in $ZOVN_IMAGE_CACHE (default /var/cache/zovn/images/) under the sha256 of everything
#      that shapes it (suite, mirrors, variant, packages, dpkg options): a warm build only
#      re-adds it. Delete the file (or set ZOVN_IMAGE_REFRESH=1) to pick up Debian updates;
#   2. release binaries: cargo build --release (zstack-ovnkube-controller,
#      zstack-ovn-dbexporter, zstack-ovnkube-node, zstack-ovn-cni) in $ZOVN_IMAGE_TARGET_DIR (default
#      /var/cache/zovn/target-release, kept across clones, emptied past
#      $ZOVN_IMAGE_TARGET_MAX_GIB, default 12), debug info stripped on the way into the image;
#   3. layer 2, ours: /usr/local/bin/<the four binaries>, always rebuilt (cheap);
#   4. umoci: OCI layout, config (PATH, labels org.opencontainers.image.*, a harmless
#      default command `zstack-ovnkube-node --help`: the chart gives every container its command), then
#      index.json names the image docker.io/zstack-ovn/zstack-ovn:<version> in both
#      org.opencontainers.image.ref.name and io.containerd.image.name, so that
#      `ctr -n k8s.io images import` names it without --base-name; and a second time
#      as :<version>-<short commit>[-dirty] (the build's tag, also written to
#      zstack-ovn-<version>.tag; the version alone at a clean checkout of tag v<version>).
#
# Timestamps come from SOURCE_DATE_EPOCH (default: the commit time of HEAD).
# Runs as root (mmdebstrap root mode). Env: CARGO, OUT (output dir), ZOVN_IMAGE_CACHE,
# ZOVN_IMAGE_REFRESH, ZOVN_IMAGE_TARGET_DIR, ZOVN_IMAGE_TARGET_MAX_GIB, DEBIAN_MIRROR,
# DEBIAN_SECURITY_MIRROR.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
CARGO=${CARGO:-cargo}
OUT=${OUT:-$ROOT/target/images}
CACHE=${ZOVN_IMAGE_CACHE:-/var/cache/zovn/images}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
SUITE=bookworm
VARIANT=essential
REPO=docker.io/zstack-ovn/zstack-ovn

# What the chart runs (docs/images.md explains each):
PACKAGES=(
  openvswitch-switch          # ovsdb-server, ovs-vswitchd (kernel/AF_XDP), ovs-vsctl, ovs-appctl, ovsdb-tool
  openvswitch-switch-dpdk     # ovs-vswitchd-dpdk and the DPDK libraries it links
  # DPDK drivers, loaded at EAL init from /usr/lib/x86_64-linux-gnu/dpdk/pmds-23 (Recommends
  # of `dpdk`, which --no-install-recommends drops): the mempool ring handler no DPDK
  # mempool works without, then the PMDs of common NICs (Intel, Mellanox/NVIDIA ConnectX,
  # AWS ENA, virtio/vmxnet3 VMs) and the virtual devices (tap, virtio_user, vhost,
  # af_packet, af_xdp, bonding)
  librte-mempool-ring23
  librte-net-i40e23 librte-net-iavf23 librte-net-ice23 librte-net-ixgbe23 librte-net-e1000-23
  librte-net-mlx5-23 librte-net-ena23 librte-net-virtio23 librte-net-vmxnet3-23
  librte-net-tap23 librte-net-vhost23 librte-net-af-packet23 librte-net-af-xdp23 librte-net-bond23
  ovn-central                 # ovn-northd, the NB/SB schemas
  ovn-host                    # ovn-controller
  # the runtime libraries of dpdk-testpmd (EXTRACT below) that ovs-vswitchd-dpdk does not
  # already pull in (libpcap0.8 comes with librte-pdump23)
  librte-cmdline23 librte-crypto-scheduler23 librte-reorder23 librte-bitratestats23
  librte-metrics23 librte-bpf23 librte-gro23 librte-latencystats23 librte-pdump23
  librte-pcapng23 librte-eventdev23 librte-net-bnxt23 librte-bus-dpaa23 librte-common-dpaax23
  librte-mempool-dpaa23 librte-net-dpaa23
  iproute2 nftables ethtool   # the node agent's ip/nft/ethtool calls
  procps ca-certificates bash # ps/pgrep for the start scripts, TLS roots, the chart's scripts
)
# Single files taken out of a Debian package that is not installed, as package:path. Bookworm
# ships dpdk-testpmd (a DPDK application: the DPDK end of a vhost-user port in the e2e and
# for operators' checks) only in dpdk-dev, whose dependencies (libdpdk-dev headers and their
# -dev packages, python3) would add far more than the binary; the `dpdk` package holds only
# Python scripts. The .deb is downloaded inside the chroot at the version of the librte
# libraries installed there, and the build fails if the binary misses a library.
EXTRACT=(dpdk-dev:/usr/bin/dpdk-testpmd)
# the operator's zovn CLI is not here: it runs on the operator's machine (make install-cli)
BINS=(zstack-ovnkube-controller zstack-ovn-dbexporter zstack-ovnkube-node zstack-ovn-cni)
DPKG_OPTS=(
  'path-exclude=/usr/share/man/*'
  'path-exclude=/usr/share/info/*'
  'path-exclude=/usr/share/locale/*'
  'path-include=/usr/share/locale/locale.alias'
  'path-exclude=/usr/share/doc/*'
  'path-include=/usr/share/doc/*/copyright'
)

log() { echo "images: $*" >&2; }
die() { log "$*"; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (mmdebstrap builds the root filesystem in root mode)"
scripts/install-deps.sh

VERSION=$(sed -nE 's/^version = "([^"]+)"/\1/p' Cargo.toml | head -1)
[ -n "$VERSION" ] || die "no workspace version in Cargo.toml"
NAME="$REPO:$VERSION"
# the build's own tag: the version alone at a clean checkout of its release tag v<version>,
# else <version>-<short commit>[-dirty], so a node that cached an earlier build of the same
# version gets this one when the chart names it (image.tag)
if [ "$(git describe --tags --exact-match --dirty 2>/dev/null)" = "v$VERSION" ]; then
  BUILD_TAG=$VERSION
else
  BUILD_TAG="$VERSION-$(git describe --always --dirty --abbrev=7 --exclude '*' 2>/dev/null || echo unknown)"
fi
BUILD_NAME="$REPO:$BUILD_TAG"
SOURCE_URL=$(sed -nE 's/^repository = "([^"]+)"/\1/p' Cargo.toml | head -1)
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
# not exported: cargo would see a new value after every commit and rebuild the release
# artifacts (seen); mmdebstrap gets it explicitly
SDE=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
CREATED=$(date -u -d "@$SDE" +%Y-%m-%dT%H:%M:%SZ)
start=$(date +%s)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/zovn-images.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT" "$CACHE"

# 1. the Debian layer, cached by what shapes it
key=$( { echo "format 2 $SUITE $VARIANT $MIRROR $SECURITY"; printf '%s\n' "${PACKAGES[@]}" "${DPKG_OPTS[@]}" "${EXTRACT[@]}"; } |
  sha256sum | cut -c1-16)
base="$CACHE/rootfs-$SUITE-$key.tar"
if [ -s "$base" ] && [ "${ZOVN_IMAGE_REFRESH:-0}" != 1 ]; then
  log "Debian layer from cache: $base"
else
  log "mmdebstrap $SUITE ($VARIANT + ${#PACKAGES[@]} packages) -> $base"
  t0=$(date +%s)
  dpkgopts=()
  for o in "${DPKG_OPTS[@]}"; do dpkgopts+=("--dpkgopt=$o"); done
  # EXTRACT: the chroot has no apt (variant essential); mmdebstrap's own apt config still
  # holds the package lists when the customize hooks run
  cat >"$WORK/extract.sh" <<'SH'
set -eu
root=$1; pkg=$2; path=$3
v=$(chroot "$root" dpkg-query -W -f='${Version}' librte-eal23)
d=$(mktemp -d)
(cd "$d" && APT_CONFIG=$MMDEBSTRAP_APT_CONFIG apt-get download -q "$pkg=$v")
dpkg-deb --fsys-tarfile "$d"/*.deb | tar -x -C "$root" ".$path"
rm -rf "$d"
if chroot "$root" ldd "$path" | grep 'not found'; then echo "$path: missing libraries" >&2; exit 1; fi
SH
  hooks=()
  for e in "${EXTRACT[@]}"; do
    hooks+=("--customize-hook=sh $WORK/extract.sh \"\$1\" ${e%%:*} ${e#*:}")
  done
  SOURCE_DATE_EPOCH=$SDE mmdebstrap --mode=root --variant="$VARIANT" --format=tar \
    --include="$(IFS=,; echo "${PACKAGES[*]}")" \
    --aptopt='APT::Install-Recommends "false"' \
    --aptopt='APT::Install-Suggests "false"' \
    "${dpkgopts[@]}" "${hooks[@]}" \
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*.log "$1"/var/log/apt' \
    "$SUITE" "$WORK/base.tar" \
    "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" \
    "deb $SECURITY $SUITE-security main" >"$WORK/mmdebstrap.log" 2>&1 ||
    { tail -30 "$WORK/mmdebstrap.log" >&2; die "mmdebstrap failed"; }
  mv "$WORK/base.tar" "$base"
  log "Debian layer built in $(( $(date +%s) - t0 )) s"
fi

# 2. release binaries (after the Debian layer: cargo may wait on another build's lock), in
# a target directory kept across clones: a clean clone (CI) then compiles only this
# workspace's crates, not its ~400 dependencies again (a cold build took 873 s of a CI run).
# Cargo's fingerprints decide what is stale, as in target/; every clone path adds its own
# copy of our crates, so the directory is emptied once it passes $RELEASE_TARGET_MAX_GIB.
RELEASE_TARGET=${ZOVN_IMAGE_TARGET_DIR:-/var/cache/zovn/target-release}
RELEASE_TARGET_MAX_GIB=${ZOVN_IMAGE_TARGET_MAX_GIB:-12}
mkdir -p "$RELEASE_TARGET"
used_kib=$(du -sk "$RELEASE_TARGET" | cut -f1)
if [ "$used_kib" -gt $(( RELEASE_TARGET_MAX_GIB * 1024 * 1024 )) ]; then
  log "$RELEASE_TARGET holds $(( used_kib / 1024 / 1024 )) GiB (> $RELEASE_TARGET_MAX_GIB): emptied"
  rm -rf "${RELEASE_TARGET:?}"/release
fi
log "cargo build --release (${BINS[*]}) in $RELEASE_TARGET"
env -u SOURCE_DATE_EPOCH CARGO_TARGET_DIR="$RELEASE_TARGET" "$CARGO" build --release -q \
  -p control -p dataplane -p cni "${BINS[@]/#/--bin=}"

# 3. our layer: /usr/local/bin, always rebuilt
mkdir -p "$WORK/bins/usr/local/bin"
for b in "${BINS[@]}"; do
  objcopy --strip-debug "$RELEASE_TARGET/release/$b" "$WORK/bins/usr/local/bin/$b"
  chmod 0755 "$WORK/bins/usr/local/bin/$b"
done
tar --sort=name --mtime="@$SDE" --owner=0 --group=0 --numeric-owner \
  -C "$WORK/bins" -cf "$WORK/bins.tar" usr/local/bin

# 4. the OCI layout
L="$WORK/oci"
umoci init --layout "$L"
umoci new --image "$L:$VERSION"
umoci raw add-layer --image "$L:$VERSION" --history.created "$CREATED" \
  --history.created_by "mmdebstrap $SUITE: ${PACKAGES[*]}" "$base"
umoci raw add-layer --image "$L:$VERSION" --history.created "$CREATED" \
  --history.created_by "zstack-ovn $VERSION release binaries (${BINS[*]})" "$WORK/bins.tar"
umoci config --image "$L:$VERSION" --created "$CREATED" --history.created "$CREATED" \
  --history.created_by "config" --os linux --architecture amd64 \
  --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.cmd /usr/local/bin/zstack-ovnkube-node --config.cmd --help \
  --config.label "org.opencontainers.image.title=zstack-ovn" \
  --config.label "org.opencontainers.image.version=$VERSION" \
  --config.label "org.opencontainers.image.source=$SOURCE_URL" \
  --config.label "org.opencontainers.image.revision=$REVISION" \
  --config.label "org.opencontainers.image.created=$CREATED"
umoci gc --layout "$L"
# umoci tags cannot hold '/' or ':': name the image in index.json itself (no blob digest
# covers index.json, so this edit keeps the layout valid)
# under both names, <version> (the chart's default tag) and the build's tag: one manifest
# entry per name, the same digest
python3 - "$L/index.json" "$NAME" "$BUILD_NAME" <<'PY'
import copy, json, sys
path, names = sys.argv[1], list(dict.fromkeys(sys.argv[2:]))
with open(path) as f:
    index = json.load(f)
assert len(index["manifests"]) == 1, index
manifest = index["manifests"][0]
index["manifests"] = []
for name in names:
    m = copy.deepcopy(manifest)
    m["annotations"] = {
        "org.opencontainers.image.ref.name": name,
        "io.containerd.image.name": name,
    }
    index["manifests"].append(m)
with open(path, "w") as f:
    json.dump(index, f, sort_keys=True, separators=(",", ":"))
PY
echo "$BUILD_TAG" > "$OUT/zstack-ovn-$VERSION.tag"

archive="$OUT/zstack-ovn-$VERSION.oci.tar"
tar --sort=name --mtime="@$SDE" --owner=0 --group=0 --numeric-owner \
  -C "$L" -cf "$archive.tmp" oci-layout index.json blobs
mv "$archive.tmp" "$archive"
log "$archive: $NAME and $BUILD_NAME, $(du -m "$archive" | cut -f1) MiB (layers gzip: Debian $(du -m "$base" | cut -f1) MiB uncompressed, binaries $(du -m "$WORK/bins.tar" | cut -f1) MiB uncompressed), $(( $(date +%s) - start )) s"
