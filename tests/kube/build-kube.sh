#!/bin/bash
# build-kube.sh [COMPONENT...] - build Kubernetes 1.20.2 server components from Debian
# bookworm's source package `kubernetes` and cache the binaries outside the repository
# (run as root, Debian 12). COMPONENT is any of kube-apiserver, kubelet, kube-proxy,
# kube-controller-manager, kube-scheduler; none means all five.
#
# No Debian package ships them, but the source package carries the full vendor tree, so they
# build offline with Debian's Go 1.19 (kube-apiserver alone ~6 min on 2 idle cores, all five
# ~15 min sharing one Go build cache). Steps:
#   1. apt: dpkg-dev (apt-get source), golang-1.19-go + golang-1.19-src,
#      golang-github-modern-go-reflect2-dev (reflect2 1.0.2), etcd-server (tests run it).
#   2. a PRIVATE apt config (deb-src for bookworm, own lists dir) - the system's apt
#      sources are not changed; `apt-get source --download-only kubernetes`; dpkg-source -x.
#   3. replace vendor/github.com/modern-go/reflect2 with 1.0.2 (1.0.1 crashes on Go >= 1.18).
#   4. GOPATH mode (GO111MODULE=off CGO_ENABLED=0, tree linked at
#      $GOPATH/src/k8s.io/kubernetes); build openapi-gen and generate
#      pkg/generated/openapi/zz_generated.openapi.go over the packages tagged
#      `+k8s:openapi-gen=`.
#   5. go build ./cmd/<component> for each missing one; copy it to the cache; remove the build
#      tree once every requested binary is there.
#
# Result: ${ZOVN_CACHE:-/var/cache/zovn}/<component>-1.20.2/<component>
# Idempotent: exits at once when the binaries are present. A failed run leaves its build tree
# (under $CACHE/build) so a rerun resumes from the last completed step.
set -euo pipefail

VERSION=1.20.2
CACHE=${ZOVN_CACHE:-/var/cache/zovn}
BUILD=$CACHE/build/kubernetes-$VERSION
ALL=(kube-apiserver kubelet kube-controller-manager kube-scheduler kube-proxy)
[ $# -gt 0 ] || set -- "${ALL[@]}"
for c in "$@"; do
  case " ${ALL[*]} " in *" $c "*) ;; *) echo "build-kube: unknown component '$c' (one of: ${ALL[*]})" >&2; exit 2;; esac
done
out() { echo "$CACHE/$1-$VERSION/$1"; }
missing_components() { for c in "$@"; do [ -x "$(out "$c")" ] || echo "$c"; done; }
GO=/usr/lib/go-1.19/bin/go
PACKAGES=(dpkg-dev golang-1.19-go golang-1.19-src golang-github-modern-go-reflect2-dev etcd-server)

T0=$(date +%s)
log() { echo "build-kube: [$(($(date +%s) - T0))s] $*"; }
die() { echo "build-kube: ERROR: $*" >&2; exit 1; }

if [ -z "$(missing_components "$@")" ]; then
  echo "build-kube: $* already built under $CACHE"
  exit 0
fi
[ "$(id -u)" = 0 ] || die "run as root (installs apt packages, writes $CACHE)"
command -v dpkg-query >/dev/null || die "Debian 12 (dpkg/apt) only"

# One build at a time (cargo may start several test binaries that all want the binary).
mkdir -p "$CACHE"
exec 9>"$CACHE/.kube-build.lock"
if ! flock -n 9; then
  log "another build is running; waiting for it"
  flock 9
fi
if [ -z "$(missing_components "$@")" ]; then
  log "$* built by the concurrent run"
  exit 0
fi

# --- 1. packages -------------------------------------------------------------------------
# shellcheck source=../../scripts/lib/apt.sh
. "$(dirname "$0")/../../scripts/lib/apt.sh"
apt_install_missing "build-kube: [$(($(date +%s) - T0))s]" "${PACKAGES[@]}"
[ -x "$GO" ] || die "$GO missing after installing golang-1.19-go"
REFLECT2=/usr/share/gocode/src/github.com/modern-go/reflect2
[ -f "$REFLECT2/reflect2.go" ] || die "$REFLECT2 missing (golang-github-modern-go-reflect2-dev)"

mkdir -p "$BUILD"
cd "$BUILD"

# --- 2. source package via a private apt config -----------------------------------------
APTDIR=$BUILD/apt
if [ ! -f "$BUILD/.source-unpacked" ]; then
  mkdir -p "$APTDIR/lists/partial" "$APTDIR/archives/partial" "$APTDIR/src"
  # Reuse the mirror and keyring the system's bookworm sources point at.
  uri=$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
          | grep -E 'debian/?( |$)' | grep -v security | head -1 \
          | sed -E 's/^URIs:[[:space:]]*//; s/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?//; s/[[:space:]].*$//' || true)
  uri=${uri:-http://deb.debian.org/debian}
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  cat >"$APTDIR/sources.list" <<EOF
deb-src [signed-by=$keyring] $uri bookworm main
EOF
  APT_OPTS=(-o "Dir::Etc::SourceList=$APTDIR/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
            -o "Dir::State::Lists=$APTDIR/lists" -o "Dir::Cache=$APTDIR/cache"
            -o "Dir::Cache::archives=$APTDIR/archives" -o "APT::Sandbox::User=root")
  mkdir -p "$APTDIR/cache"
  log "apt-get update (private deb-src list for bookworm at $uri)"
  apt-get "${APT_OPTS[@]}" update -qq
  log "apt-get source --download-only kubernetes"
  (cd "$APTDIR/src" && apt-get "${APT_OPTS[@]}" source --download-only -qq kubernetes >/dev/null)
  dsc=$(ls "$APTDIR"/src/kubernetes_*.dsc | head -1)
  [ -n "$dsc" ] || die "no kubernetes .dsc downloaded"
  log "dpkg-source -x $(basename "$dsc")"
  rm -rf "$BUILD/src"
  # apt already checked the files against the signed Sources index (the .dsc signature
  # itself needs debian-keyring, which is not worth installing for this).
  dpkg-source --no-check -x "$dsc" "$BUILD/src" >/dev/null
  rm -rf "$APTDIR"   # the tarballs are unpacked; save the disk
  touch "$BUILD/.source-unpacked"
fi
SRC=$BUILD/src
[ -d "$SRC/cmd/kube-apiserver" ] || die "$SRC does not look like a kubernetes tree"

# --- 3. reflect2 1.0.2 -------------------------------------------------------------------
if [ ! -f "$BUILD/.reflect2" ]; then
  log "vendor/github.com/modern-go/reflect2 <- Debian reflect2 1.0.2"
  rm -f "$SRC"/vendor/github.com/modern-go/reflect2/*.go
  cp "$REFLECT2"/*.go "$SRC/vendor/github.com/modern-go/reflect2/"
  rm -f "$SRC"/vendor/github.com/modern-go/reflect2/*_test.go
  touch "$BUILD/.reflect2"
fi

# --- 4. GOPATH + openapi-gen -------------------------------------------------------------
export GOPATH=$BUILD/gopath GOCACHE=$BUILD/gocache GO111MODULE=off CGO_ENABLED=0 GOFLAGS=
export PATH=/usr/lib/go-1.19/bin:$GOPATH/bin:$PATH
mkdir -p "$GOPATH/src/k8s.io" "$GOPATH/bin"
ln -sfn "$SRC" "$GOPATH/src/k8s.io/kubernetes"
KROOT=$GOPATH/src/k8s.io/kubernetes
OPENAPI=$SRC/pkg/generated/openapi/zz_generated.openapi.go
if [ ! -f "$BUILD/.openapi" ]; then
  log "go build openapi-gen ($($GO version))"
  (cd "$KROOT" && go build -o "$GOPATH/bin/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen)
  # The packages tagged `+k8s:openapi-gen=`, found the way build/root/Makefile.generated_files
  # does: every top-level dir but vendor/ and _*/ (staging/src/X is named vendor/X), minus
  # code-generator and sample-apiserver; as import paths under k8s.io/kubernetes.
  dirs=$(cd "$SRC" && grep -rl --include='*.go' -e '+k8s:openapi-gen=' \
           $(ls -d */ | sed 's|/$||' | grep -v -e '^vendor$' -e '^_' -e '^debian$') \
         | sed 's|^staging/src/|vendor/|' | xargs -n1 dirname | sort -u \
         | grep -v -e '^vendor/k8s.io/code-generator/' -e '^vendor/k8s.io/sample-apiserver/' \
         | sed 's|^|k8s.io/kubernetes/|' | paste -sd, - || true)
  n=$(echo "$dirs" | tr , '\n' | grep -c . || true)
  [ "$n" -ge 50 ] || die "only $n +k8s:openapi-gen= packages found (expected ~80)"
  log "openapi-gen over $n packages"
  rm -f "$OPENAPI"
  (cd "$KROOT" && openapi-gen --logtostderr \
      --input-dirs "$dirs" \
      --output-base "$GOPATH/src" \
      --output-package k8s.io/kubernetes/pkg/generated/openapi \
      --output-file-base zz_generated.openapi \
      --go-header-file hack/boilerplate/boilerplate.generatego.txt \
      --report-filename "$BUILD/openapi-violations.txt" >"$BUILD/openapi-gen.log" 2>&1) \
    || { tail -20 "$BUILD/openapi-gen.log" >&2; die "openapi-gen failed (log: $BUILD/openapi-gen.log)"; }
  [ -s "$OPENAPI" ] || die "openapi-gen wrote no $OPENAPI"
  touch "$BUILD/.openapi"
fi

# --- 5. the components ---------------------------------------------------------------------
# In GOPATH mode the staging packages live under k8s.io/kubernetes/vendor/: stamp the version
# there, or /version reports v0.0.0-master.
V=k8s.io/kubernetes/vendor/k8s.io
ldflags="-s -w"
for pkg in $V/component-base/version $V/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=v$VERSION -X $pkg.gitMajor=${VERSION%%.*}"
  ldflags+=" -X $pkg.gitMinor=$(echo "$VERSION" | cut -d. -f2) -X $pkg.gitTreeState=clean"
done
for c in $(missing_components "$@"); do
  log "go build ./cmd/$c"
  (cd "$KROOT" && go build -trimpath -ldflags "$ldflags" -o "$BUILD/$c" "./cmd/$c")
  got=$("$BUILD/$c" --version)
  [ "$got" = "Kubernetes v$VERSION" ] || die "built $c reports '$got', expected 'Kubernetes v$VERSION'"
  o=$(out "$c")
  mkdir -p "$(dirname "$o")"
  install -m 0755 "$BUILD/$c" "$o.tmp"
  mv -f "$o.tmp" "$o"
  rm -f "$BUILD/$c"
  log "installed $o"
done
if [ -z "$(missing_components "${ALL[@]}")" ]; then
  log "every component is built; removing the build tree"
  rm -rf "$BUILD" 2>/dev/null || { chmod -R u+w "$BUILD"; rm -rf "$BUILD"; }
  rmdir "$CACHE/build" 2>/dev/null || true
else
  log "keeping the build tree $BUILD for the components not built yet"
fi
log "done"
