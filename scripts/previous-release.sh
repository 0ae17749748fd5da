#!/bin/bash
# previous-release.sh - the chart and image of the release named in deploy/previous-release,
# what `cluster_e2e` installs first and upgrades from (step `upgrade-release`). Built once
# per machine and cached in $ZOVN_PREVIOUS_CACHE (default /var/cache/zovn/previous/):
#
#   <cache>/<version>-<commit>/chart/                 the chart of that commit
#   <cache>/<version>-<commit>/zstack-ovn-<version>.oci.tar   its `make images` archive
#   <cache>/<version>-<commit>/tag                    the archive's build tag
#
# A miss clones this repository at that commit into a scratch dir, runs that commit's own
# `deploy/images/build.sh` (a cold release build: 15-30 min on 2 cores) and keeps only
# the three above. Prints the directory. Root (the image build is). Needs the commit in
# this repository's history (a shallow clone has none: the error says so).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${ZOVN_PREVIOUS_CACHE:-/var/cache/zovn/previous}
log() { echo "previous-release: $*" >&2; }
die() { log "$*"; exit 1; }

read -r VERSION COMMIT < <(grep -v '^#' "$ROOT/deploy/previous-release" | grep -v '^[[:space:]]*$' | head -1)
[[ "$VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "deploy/previous-release: bad version '$VERSION'"
[[ "$COMMIT" =~ ^[0-9a-f]{40}$ ]] || die "deploy/previous-release: bad commit '$COMMIT' (40 hex digits)"
DIR="$CACHE/$VERSION-${COMMIT:0:7}"
ARCHIVE="$DIR/zstack-ovn-$VERSION.oci.tar"
if [ -s "$ARCHIVE" ] && [ -s "$DIR/tag" ] && [ -f "$DIR/chart/Chart.yaml" ]; then
  echo "$DIR"
  exit 0
fi
[ "$(id -u)" = 0 ] || die "run as root (the image build is)"
git -C "$ROOT" cat-file -e "$COMMIT^{commit}" 2>/dev/null ||
  die "commit $COMMIT (release $VERSION) is not in $ROOT's history: a shallow clone? (git fetch --unshallow)"
mkdir -p "$CACHE"
WORK=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
log "building release $VERSION from ${COMMIT:0:7} in $WORK (a cold release build)"
git clone -q --no-checkout "$ROOT" "$WORK/src"
git -C "$WORK/src" checkout -q --detach "$COMMIT"
start=$(date +%s)
(cd "$WORK/src" && OUT="$WORK/out" deploy/images/build.sh) >&2
[ -s "$WORK/out/zstack-ovn-$VERSION.oci.tar" ] || die "the build of $VERSION wrote no zstack-ovn-$VERSION.oci.tar"
rm -rf "$DIR.tmp" && mkdir -p "$DIR.tmp"
mv "$WORK/out/zstack-ovn-$VERSION.oci.tar" "$DIR.tmp/"
mv "$WORK/out/zstack-ovn-$VERSION.tag" "$DIR.tmp/tag"
cp -r "$WORK/src/deploy/helm/zstack-ovn" "$DIR.tmp/chart"
rm -rf "$DIR" && mv "$DIR.tmp" "$DIR"
log "release $VERSION ($(cat "$DIR/tag")) built in $(( $(date +%s) - start )) s: $DIR"
echo "$DIR"
