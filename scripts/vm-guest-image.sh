#!/bin/bash
# vm-guest-image.sh [OUTDIR] - build (once) a tiny QEMU guest image from Debian 12 packages
# for the "real VM on vhost-user" tests (issue #34). Run as root on Debian 12.
#
# Output in OUTDIR: vmlinux (uncompressed ELF kernel, boots through PVH with -bios qboot.rom),
# initramfs.cpio.gz (busybox-static, the virtio-net modules, iperf3 + its libraries, /init)
# and MANIFEST (package versions, sha256s). The kernel package is the one apt's policy picks
# for linux-image-amd64 (Debian 12: linux-image-6.1.*-amd64), downloaded into a temp dir and
# extracted, never installed. Default OUTDIR: /var/cache/zovn/vm/<key>, key = hash of this
# script and the inputs' versions; an OUTDIR whose MANIFEST carries the same key is complete
# and reused at once. Prints OUTDIR on stdout (progress goes to stderr).
# The guest's /init and its kernel command line keys (zovn.ip, zovn.gw, zovn.mtu, zovn.run)
# and console markers (ZOVN-GUEST: ...) are described in docs/vm-guest.md.
set -euo pipefail

SELF=$(readlink -f "$0")
# load order; each one may also be built into the kernel (then it is skipped)
MODULES=(virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover net_failover virtio_net)

die() { echo "vm-guest-image: error: $*" >&2; exit 1; }
log() { echo "vm-guest-image: $*" >&2; }

[ "$(id -u)" = 0 ] || die "run as root (apt-get download, device nodes in the initramfs)"
if ! [ -r /etc/debian_version ] || ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
  die "this script supports Debian 12 (apt-get, dpkg-deb) only"
fi
[ "$(dpkg --print-architecture)" = amd64 ] || die "amd64 only (the guest kernel is linux-image-*-amd64)"
for tool in sha256sum ldd xz gzip tar awk flock readelf od; do
  command -v "$tool" >/dev/null || die "$tool not found (coreutils, libc-bin, xz-utils, gzip, tar, gawk/mawk, util-linux, binutils)"
done
[ "$(dpkg-query -W -f='${Status}' busybox-static 2>/dev/null)" = "install ok installed" ] ||
  die "busybox-static is not installed (scripts/install-deps.sh installs it)"
BUSYBOX=/bin/busybox
"$BUSYBOX" --list 2>/dev/null | grep -qx udhcpc || die "$BUSYBOX is not busybox-static (no udhcpc applet)"
if ! command -v iperf3 >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/apt.sh
  . "$(dirname "$SELF")/lib/apt.sh"
  apt_install_missing vm-guest-image iperf3 >&2
fi
IPERF3=$(command -v iperf3) || die "iperf3 not found and could not be installed"

# --- inputs and the cache key ---------------------------------------------------------------
pkgver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null; }

# the kernel: what linux-image-amd64's candidate (apt policy) depends on, e.g.
# "Depends: linux-image-6.1.0-57-amd64 (= 6.1.192-3)"; one apt-cache call (it is slow)
KPKG=${ZOVN_VM_KERNEL_PKG:-}
if [ -z "$KPKG" ]; then
  read -r KPKG KVER < <(apt-cache show --no-all-versions linux-image-amd64 2>/dev/null |
    sed -nE 's/^Depends:.*(linux-image-6\.1[^ ,]*-amd64) \(= ([^)]+)\).*/\1 \2/p' | head -1) || true
  [ -n "$KPKG" ] || die "apt knows no linux-image-amd64 depending on linux-image-6.1.*-amd64 (run apt-get update; Debian 12 sources needed)"
else
  KVER=$(apt-cache show --no-all-versions "$KPKG" 2>/dev/null | sed -n 's/^Version: //p' | head -1) || true
fi
[ -n "$KVER" ] || die "apt has no candidate version for $KPKG (run apt-get update)"

# iperf3 and the shared libraries it needs (ldd on the host binary), with the dynamic loader
mapfile -t LIBS < <(ldd "$IPERF3" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
[ ${#LIBS[@]} -gt 0 ] || die "ldd $IPERF3 listed no libraries"
for f in "${LIBS[@]}"; do [ -r "$f" ] || die "library $f (needed by $IPERF3) is not readable"; done

INPUTS=$(
  echo "script $(sha256sum <"$SELF" | cut -d' ' -f1)"
  echo "kernel-package $KPKG $KVER"
  echo "busybox-static $(pkgver busybox-static) $(sha256sum <"$BUSYBOX" | cut -d' ' -f1)"
  echo "iperf3 $(pkgver iperf3) $(sha256sum <"$IPERF3" | cut -d' ' -f1)"
  for f in "${LIBS[@]}"; do echo "lib $f $(sha256sum <"$f" | cut -d' ' -f1)"; done
)
KEY=$(printf '%s\n' "$INPUTS" | sha256sum | cut -c1-16)
OUTDIR=${1:-/var/cache/zovn/vm/$KEY}

complete() {
  [ -f "$OUTDIR/MANIFEST" ] && [ -s "$OUTDIR/vmlinux" ] && [ -s "$OUTDIR/initramfs.cpio.gz" ] &&
    grep -qx "key $KEY" "$OUTDIR/MANIFEST"
}
if complete; then echo "$OUTDIR"; exit 0; fi

mkdir -p "$OUTDIR"
exec 9>"$OUTDIR/.lock"
flock 9                                 # another run may be building the same image
if complete; then echo "$OUTDIR"; exit 0; fi

WORK=$(mktemp -d /tmp/zovn-vm-image.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# --- the kernel package: download, extract the kernel and the modules -----------------------
log "downloading $KPKG=$KVER"
chmod 755 "$WORK"
(cd "$WORK" && apt-get download -q -o APT::Sandbox::User=root "$KPKG=$KVER" >&2) ||
  die "apt-get download $KPKG=$KVER failed (no access to the Debian mirror? stale lists: run apt-get update)"
DEB=$(find "$WORK" -maxdepth 1 -name '*.deb' | head -1)
mkdir "$WORK/pkg"
dpkg-deb --fsys-tarfile "$DEB" |
  tar -x -C "$WORK/pkg" --wildcards './boot/vmlinuz-*' '*/modules/*/modules.builtin' \
    '*/virtio*' '*failover*' ||
  die "extracting $DEB failed"
VMLINUZ=$(find "$WORK/pkg/boot" -name 'vmlinuz-*' | head -1)
[ -n "$VMLINUZ" ] || die "$KPKG has no /boot/vmlinuz-*"
KREL=${VMLINUZ##*/vmlinuz-}
MODDIR=$(dirname "$(find "$WORK/pkg" -path "*/modules/$KREL/modules.builtin" | head -1)")
[ -f "$MODDIR/modules.builtin" ] || die "$KPKG has no lib/modules/$KREL/modules.builtin"

# vmlinuz is a bzImage whose payload is the compressed vmlinux (Debian: xz): find the
# compression magic and decompress from there (the approach of the kernel's
# scripts/extract-vmlinux); QEMU boots the ELF through its PVH entry note, about twice
# as fast as the bzImage under TCG (no in-guest decompression).
extract_vmlinux() {
  local magic cmd off
  for spec in '\xfd7zXZ\x00:xz -dc' '\x28\xb5\x2f\xfd:zstd -dcq' '\x1f\x8b\x08:gzip -dc' \
    '\x02\x21\x4c\x18:lz4 -dc' '\x5d\x00\x00\x00:xz -dc --format=lzma'; do
    magic=${spec%%:*} cmd=${spec#*:}
    command -v "${cmd%% *}" >/dev/null || continue
    # shellcheck disable=SC2013 # offsets, one a line
    for off in $(LC_ALL=C grep -obUaP "$magic" "$VMLINUZ" | cut -d: -f1); do
      # trailing data after the stream makes the decompressor complain: check the result
      tail -c +$((off + 1)) "$VMLINUZ" | $cmd >"$WORK/vmlinux" 2>/dev/null || true
      if [ "$(head -c 4 "$WORK/vmlinux" | od -An -c | tr -d ' ')" = 177ELF ]; then
        echo "${cmd%% *}@$off"
        return 0
      fi
    done
  done
  return 1
}
HOW=$(extract_vmlinux) || die "no compressed ELF kernel found in $VMLINUZ (extract-vmlinux approach)"
readelf -n "$WORK/vmlinux" 2>/dev/null | grep -qE '\(0x00000012\)|PHYS32_ENTRY' ||
  die "the extracted vmlinux has no PVH entry (Xen note 18): the kernel lacks CONFIG_PVH"
log "vmlinux extracted ($HOW)"

# --- the initramfs --------------------------------------------------------------------------
R=$WORK/root
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,run,etc,lib/modules,root}
cp "$BUSYBOX" "$R/bin/busybox"
for applet in $("$BUSYBOX" --list-full); do
  [ -e "$R/$applet" ] || ln -s /bin/busybox "$R/$applet"
done
mknod -m 600 "$R/dev/console" c 5 1
mknod -m 666 "$R/dev/null" c 1 3

# modules: found by name in the package (modules.dep is made by depmod at install time, the
# .deb has none), decompressed; built-in ones skipped (modules.builtin); each one's
# dependencies (its .modinfo "depends=") must come earlier in MODULES
MODLIST=""
for m in "${MODULES[@]}"; do
  src=$(find "$MODDIR/kernel" -name "$m.ko*" | head -1)
  if [ -z "$src" ]; then
    grep -qE "(^|/)$m\.ko$" "$MODDIR/modules.builtin" || die "module $m: neither in $KPKG nor built into its kernel"
    MODLIST+="$m:builtin "
    continue
  fi
  ko=$R/lib/modules/$m.ko
  case $src in
    *.ko.xz) xz -dc "$src" >"$ko" ;;
    *.ko.zst) zstd -dcq "$src" >"$ko" ;;
    *.ko.gz) gzip -dc "$src" >"$ko" ;;
    *.ko) cp "$src" "$ko" ;;
    *) die "module $m: unknown file ${src##*/}" ;;
  esac
  for d in $(tr '\0' '\n' <"$ko" | sed -n 's/^depends=//p' | tr ',' ' '); do
    case " $MODLIST " in *" $d:"*) ;; *) die "module $m needs $d, which is not loaded before it";; esac
  done
  MODLIST+="$m:module "
done
echo "${MODLIST% }" | tr ' ' '\n' | sed -n 's/:module$//p' >"$R/lib/modules/load-order"

# iperf3 and its libraries at the host's paths
cp "$IPERF3" "$R/usr/bin/iperf3"
for f in "${LIBS[@]}"; do
  mkdir -p "$R$(dirname "$f")"
  cp -L "$f" "$R$f"
done

cat >"$R/etc/udhcpc.script" <<'EOF'
#!/bin/sh
# udhcpc event script: address, router, mtu, dns
# shellcheck disable=SC2154 # udhcpc sets interface, ip, mask, subnet, router, dns, mtu
case "$1" in
  deconfig)
    ip -4 addr flush dev "$interface"
    ip link set "$interface" up
    ;;
  bound|renew)
    if [ -z "$mask" ] && [ -n "$subnet" ]; then
      mask=0
      for o in $(echo "$subnet" | tr . ' '); do
        while [ "$o" -gt 0 ]; do mask=$((mask + (o & 1))); o=$((o >> 1)); done
      done
    fi
    [ -n "$mtu" ] && ip link set "$interface" mtu "$mtu"
    ip -4 addr flush dev "$interface"
    ip addr add "$ip/${mask:-24}" dev "$interface"
    for r in $router; do ip route replace default via "$r" dev "$interface"; break; done
    : >/etc/resolv.conf
    for d in $dns; do echo "nameserver $d" >>/etc/resolv.conf; done
    ;;
esac
exit 0
EOF

cat >"$R/init" <<'EOF'
#!/bin/sh
# zovn guest /init (busybox sh): see docs/vm-guest.md
PATH=/bin:/sbin:/usr/bin:/usr/sbin
export PATH
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts && mount -t devpts devpts /dev/pts
exec </dev/console >/dev/console 2>&1

say() { echo "ZOVN-GUEST: $*"; }
err() { echo "ZOVN-GUEST: error $*"; }
# arg KEY: the value of KEY=... on the kernel command line ("double quotes" keep spaces)
arg() {
  awk -v k="$1=" '{
    s = $0; n = length(s); i = 1
    while (i <= n) {
      while (i <= n && substr(s, i, 1) ~ /[ \t\n]/) i++
      w = ""; q = 0
      while (i <= n) {
        c = substr(s, i, 1)
        if (c == "\"") { q = !q; i++; continue }
        if (!q && c ~ /[ \t\n]/) break
        w = w c; i++
      }
      if (index(w, k) == 1) { print substr(w, length(k) + 1); exit }
    }
  }' /proc/cmdline
}
say booted

for m in $(cat /lib/modules/load-order); do
  out=$(insmod "/lib/modules/$m.ko" 2>&1) || case $out in
    *exists*) ;;                                  # already present (built in or loaded)
    *) err "insmod $m: $out" ;;
  esac
done
ip link set lo up

IP=$(arg zovn.ip) GW=$(arg zovn.gw) MTU=$(arg zovn.mtu) RUN=$(arg zovn.run)
i=0
while [ ! -e /sys/class/net/eth0 ] && [ -n "$IP" ] && [ $i -lt 50 ]; do usleep 100000; i=$((i + 1)); done
if [ -e /sys/class/net/eth0 ]; then
  say "eth0 $(cat /sys/class/net/eth0/address)"
  [ -z "$MTU" ] || ip link set eth0 mtu "$MTU" || err "mtu $MTU"
  ip link set eth0 up || err "eth0 up"
  case $IP in
    "") ;;
    dhcp)
      if udhcpc -i eth0 -n -q -t 5 -T 2 -O mtu -s /etc/udhcpc.script >/tmp/udhcpc.log 2>&1; then
        [ -z "$MTU" ] || ip link set eth0 mtu "$MTU"
        say "addr $(ip -4 -o addr show dev eth0 | awk '{print $4; exit}')"
      else
        err "dhcp: $(tail -1 /tmp/udhcpc.log)"
      fi
      ;;
    *)
      if ip addr add "$IP" dev eth0; then say "addr $IP"; else err "addr $IP"; fi
      [ -z "$GW" ] || ip route add default via "$GW" dev eth0 || err "gw $GW"
      ;;
  esac
elif [ -n "$IP" ]; then
  err "no eth0 (zovn.ip=$IP)"
fi

if [ -n "$RUN" ]; then
  say "run $RUN"
  sh -c "$RUN" &
fi

# the console shell: a test writes command lines to the serial console and reads markers
export PS1='zovn# ' HOME=/root
cd /root || true
say ready
while :; do
  setsid cttyhack sh
  sleep 1
done
EOF
chmod 755 "$R/init" "$R/etc/udhcpc.script"
echo "zovn-guest" >"$R/etc/hostname"

# the archive: fixed mtimes, sorted names, root-owned (busybox cpio; not byte-reproducible: inode numbers)
find "$R" -exec touch -h -d @1 {} +
(cd "$R" && find . | LC_ALL=C sort | "$BUSYBOX" cpio -o -H newc -R 0:0 2>/dev/null) | gzip -9n >"$WORK/initramfs.cpio.gz"
[ -s "$WORK/initramfs.cpio.gz" ] || die "building the initramfs failed"

# --- install: the files, then MANIFEST last (its key line marks the image complete) ---------
cp "$WORK/vmlinux" "$OUTDIR/vmlinux.new" && mv "$OUTDIR/vmlinux.new" "$OUTDIR/vmlinux"
cp "$WORK/initramfs.cpio.gz" "$OUTDIR/initramfs.cpio.gz.new" && mv "$OUTDIR/initramfs.cpio.gz.new" "$OUTDIR/initramfs.cpio.gz"
{
  echo "key $KEY"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) by scripts/vm-guest-image.sh"
  echo "kernel-release $KREL (vmlinux from vmlinuz by $HOW)"
  echo "modules ${MODLIST% }"
  printf '%s\n' "$INPUTS"
  echo "sha256 $(sha256sum <"$DEB" | cut -d' ' -f1) ${DEB##*/}"
  echo "sha256 $(sha256sum <"$OUTDIR/vmlinux" | cut -d' ' -f1) vmlinux"
  echo "sha256 $(sha256sum <"$OUTDIR/initramfs.cpio.gz" | cut -d' ' -f1) initramfs.cpio.gz"
} >"$OUTDIR/MANIFEST.new"
mv "$OUTDIR/MANIFEST.new" "$OUTDIR/MANIFEST"
log "built $OUTDIR ($(du -h --apparent-size "$OUTDIR/vmlinux" | cut -f1) vmlinux, $(du -h --apparent-size "$OUTDIR/initramfs.cpio.gz" | cut -f1) initramfs)"
echo "$OUTDIR"
