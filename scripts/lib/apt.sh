# apt.sh - sourced by the set-up scripts (scripts/install-deps.sh, tests/kube/build-kube.sh):
# one way to install Debian packages, only those missing, without touching apt otherwise.

# apt_install_missing TAG PACKAGE... - installs the PACKAGEs not installed yet (apt-get
# update only then), announcing them as "TAG: installing ...".
apt_install_missing() {
  local tag=$1 p
  shift
  local missing=()
  for p in "$@"; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "$tag: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
