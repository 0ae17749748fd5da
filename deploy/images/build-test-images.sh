#!/bin/bash
# build-test-images.sh - `make test-images`: the test workload images of `zovn cluster` and
# the cluster e2e, as one OCI archive target/images/zovn-test-images.oci.tar holding
#   localhost/zovn/busybox:1  Debian bookworm's busybox-static: /bin/busybox and a symlink
#                             per applet in /bin (sh, httpd, nc, wget, ping, sleep, ip...),
#                             /www/index.html for `busybox httpd -f -p 8080 -h /www`;
#                             Cmd ["sh"]
#   localhost/zovn/pause:1    the same layer, Entrypoint busybox sleep 2147483647: the pod
#                             sandbox's process (containerd `sandbox_image`; it is stopped
#                             with SIGKILL, so it needs no signal handling)
# No registry, no daemon: the .deb comes through apt (`apt-get download`, cached in
# $ZOVN_IMAGE_CACHE, default /var/cache/zovn/images/), the layout is made by umoci, and
# index.json names both images in io.containerd.image.name, so
# `ctr -n k8s.io images import <archive>` lists them by those names.
#
# Cached: the archive is rebuilt only when its inputs (this script, the .deb) changed; the
# .deb is downloaded once (ZOVN_IMAGE_REFRESH=1: download the candidate version again).
# Timestamps come from SOURCE_DATE_EPOCH (default: the last commit of this script).
# Runs as root. Env: OUT (output dir), ZOVN_IMAGE_CACHE, ZOVN_IMAGE_REFRESH.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/target/images}
CACHE=${ZOVN_IMAGE_CACHE:-/var/cache/zovn/images}
ARCHIVE="$OUT/zovn-test-images.oci.tar"
BUSYBOX=localhost/zovn/busybox:1
PAUSE=localhost/zovn/pause:1

log() { echo "test-images: $*" >&2; }
die() { log "$*"; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (the layer's files are owned by root)"
for t in umoci apt-get dpkg-deb python3 sha256sum; do
  command -v "$t" >/dev/null || die "$t missing (scripts/install-deps.sh installs umoci)"
done
start=$(date +%s)
mkdir -p "$OUT" "$CACHE/busybox-static"

# 1. the .deb, cached
debs=("$CACHE"/busybox-static/busybox-static_*_amd64.deb)
if [ ! -s "${debs[0]}" ] || [ "${ZOVN_IMAGE_REFRESH:-0}" = 1 ]; then
  log "apt-get download busybox-static -> $CACHE/busybox-static/"
  # apt's sandbox user cannot write the cache dir: download as root, quietly
  (cd "$CACHE/busybox-static" && apt-get download -q -o APT::Sandbox::User=root busybox-static) ||
    die "apt-get download busybox-static failed (apt-get update?)"
  debs=("$CACHE"/busybox-static/busybox-static_*_amd64.deb)
fi
deb=$(ls -t "${debs[@]}" | head -1)

# 2. up to date?
SDE=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct -- "$0" 2>/dev/null || true)}
SDE=${SDE:-0}
inputs=$( { echo "format 1 $SDE"; sha256sum "$0" "$deb" | cut -d' ' -f1; } | sha256sum | cut -c1-16)
if [ -s "$ARCHIVE" ] && [ "$(cat "$ARCHIVE.inputs" 2>/dev/null)" = "$inputs" ]; then
  log "$ARCHIVE is up to date ($BUSYBOX, $PAUSE)"
  exit 0
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/zovn-test-images.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
CREATED=$(date -u -d "@$SDE" +%Y-%m-%dT%H:%M:%SZ)

# 3. the layer: /bin/busybox, one symlink per applet, a few directories
R="$WORK/rootfs"
mkdir -p "$WORK/deb"
dpkg-deb -x "$deb" "$WORK/deb"
bb="$WORK/deb/bin/busybox"
[ -x "$bb" ] || die "$deb has no /bin/busybox"
mkdir -p "$R/bin" "$R/etc" "$R/www" "$R/root" "$R/proc" "$R/sys" "$R/dev" "$R/tmp" "$R/var/run"
chmod 1777 "$R/tmp"
cp "$bb" "$R/bin/busybox"
chmod 0755 "$R/bin/busybox"
mkdir -p "$R/usr/share/doc/busybox-static"
cp "$WORK/deb/usr/share/doc/busybox-static/copyright" "$R/usr/share/doc/busybox-static/" 2>/dev/null || true
# busybox --install -s puts applets in /bin, /sbin, /usr/bin...; one directory is enough here
for a in $("$bb" --list); do
  [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"
done
for a in sh httpd nc wget ping sleep ip; do
  [ -L "$R/bin/$a" ] || die "busybox-static has no $a applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$R/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$R/etc/group"
echo "zovn busybox" >"$R/www/index.html"
tar --sort=name --mtime="@$SDE" --owner=0 --group=0 --numeric-owner -C "$R" -cf "$WORK/layer.tar" .

# 4. two images over the same layer
L="$WORK/oci"
umoci init --layout "$L"
version=$(dpkg-deb -f "$deb" Version)
for tag in busybox pause; do
  umoci new --image "$L:$tag"
  umoci raw add-layer --image "$L:$tag" --history.created "$CREATED" \
    --history.created_by "Debian bookworm busybox-static $version" "$WORK/layer.tar"
  if [ "$tag" = busybox ]; then
    cfg=(--config.cmd sh)
  else
    cfg=(--config.entrypoint /bin/busybox --config.entrypoint sleep --config.entrypoint 2147483647)
  fi
  umoci config --image "$L:$tag" --created "$CREATED" --history.created "$CREATED" \
    --history.created_by "config" --os linux --architecture amd64 \
    --config.env PATH=/bin "${cfg[@]}" \
    --config.label "org.opencontainers.image.title=zovn-$tag" \
    --config.label "org.opencontainers.image.version=$version"
done
umoci gc --layout "$L"
# umoci tags cannot hold '/' or ':': name the images in index.json itself
python3 - "$L/index.json" "$BUSYBOX" "$PAUSE" <<'PY'
import json, sys
path, busybox, pause = sys.argv[1:]
names = {"busybox": busybox, "pause": pause}
with open(path) as f:
    index = json.load(f)
tags = sorted(m["annotations"]["org.opencontainers.image.ref.name"] for m in index["manifests"])
assert tags == sorted(names), index
for m in index["manifests"]:
    name = names[m["annotations"]["org.opencontainers.image.ref.name"]]
    m["annotations"] = {"org.opencontainers.image.ref.name": name, "io.containerd.image.name": name}
index["manifests"].sort(key=lambda m: m["annotations"]["io.containerd.image.name"])
with open(path, "w") as f:
    json.dump(index, f, sort_keys=True, separators=(",", ":"))
PY

tar --sort=name --mtime="@$SDE" --owner=0 --group=0 --numeric-owner \
  -C "$L" -cf "$ARCHIVE.tmp" oci-layout index.json blobs
mv "$ARCHIVE.tmp" "$ARCHIVE"
echo "$inputs" >"$ARCHIVE.inputs"
log "$ARCHIVE: $BUSYBOX, $PAUSE (busybox-static $version), $(du -k "$ARCHIVE" | cut -f1) KiB, $(( $(date +%s) - start )) s"
