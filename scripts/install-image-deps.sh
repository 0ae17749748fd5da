#!/bin/bash
# install-image-deps.sh - install what `make images` needs on Debian 12 (run as root).
# Idempotent like install-deps.sh: apt is not touched when everything is present.
#   mmdebstrap - builds the Debian bookworm root filesystem (from Debian's archive only)
#   umoci      - writes the OCI image layout (layers, config, index) without a daemon
#   python3    - stamps the image name into index.json (umoci tags cannot hold '/' or ':')
# skopeo is not needed to build; docs/images.md uses it to push the archive to a registry.
set -euo pipefail

PACKAGES=(mmdebstrap umoci python3)

die() { echo "install-image-deps: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (mmdebstrap builds the root filesystem in root mode)"
command -v dpkg-query >/dev/null || die "this script supports Debian 12 (dpkg/apt) only"

missing=()
for p in "${PACKAGES[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-image-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
