#!/bin/bash
# vm-guest-check.sh - manual proof (not a test) that the guest image of scripts/vm-guest-image.sh
# boots under QEMU (TCG) and brings up a virtio-net NIC on a vhost-user socket (issue #34).
# Run as root on Debian 12 with QEMU >= 10 (scripts/install-deps.sh) and dpdk-testpmd (dpdk-dev).
#   (a) plain boot (-nic none): "ZOVN-GUEST: booted" within 15 s, seconds printed;
#   (b) two guests, each the vhost-user server of one socket, dpdk-testpmd the client of both
#       forwarding port 0 <-> 1 (io mode): guest 1 (10.99.0.1/24, zovn.gw, zovn.mtu=1400) pings
#       guest 2 (10.99.0.2/24), then runs iperf3 for 3 s against it (zovn.run="iperf3 -s -D");
#   (c) DHCP (zovn.ip=dhcp) on QEMU's user-mode network (slirp).
# Consoles: -chardev file writes each guest's serial output to a log the script polls, and reads
# its input from a FIFO the script writes command lines to. Everything started here is killed
# on exit; files live in a mktemp dir (kept, and printed, when a step fails).
set -euo pipefail

HERE=$(dirname "$(readlink -f "$0")")
die() { echo "vm-guest-check: FAIL: $*" >&2; exit 1; }
log() { echo "vm-guest-check: $*"; }

[ "$(id -u)" = 0 ] || die "run as root"
QEMU=$(command -v qemu-system-x86_64) || die "qemu-system-x86_64 not found (scripts/install-deps.sh installs QEMU >= 10)"
QVER=$("$QEMU" --version | sed -nE '1s/.*version ([0-9]+\.[0-9.]+).*/\1/p')
[ "${QVER%%.*}" -ge 10 ] 2>/dev/null || die "QEMU $QVER is older than 10: 7.2 segfaults with TCG + vhost-user + MSI-X (scripts/install-deps.sh)"
QBOOT=/usr/share/qemu/qboot.rom
[ -r "$QBOOT" ] || die "$QBOOT not found (package qemu-system-data)"
TESTPMD=$(command -v dpdk-testpmd) || die "dpdk-testpmd not found (package dpdk-dev)"

IMG=$("$HERE/vm-guest-image.sh") || die "scripts/vm-guest-image.sh failed"
log "image $IMG, $("$QEMU" --version | head -1)"

T=$(mktemp -d /tmp/zovn-vm-check.XXXXXX)
PIDS=()
declare -A QPID
ok=0
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf /var/run/dpdk/zovnvmcheck                 # testpmd's runtime dir (--file-prefix)
  if [ $ok = 1 ]; then rm -rf "$T"; else echo "vm-guest-check: logs kept in $T" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# start_guest NAME APPEND QEMU-ARGS...: boots a guest, console log $T/NAME.log, input $T/NAME.in
start_guest() {
  local name=$1 append=$2
  shift 2
  mkfifo "$T/$name.in"
  # shellcheck disable=SC2034 # the fd only keeps the FIFO open (QEMU never sees EOF)
  exec {fd}<>"$T/$name.in"
  : >"$T/$name.log"
  "$QEMU" -name "zovn-$name" -accel tcg -M pc -m 256M -nodefaults -no-user-config \
    -object memory-backend-memfd,id=mem,size=256M,share=on -numa node,memdev=mem \
    -bios "$QBOOT" -kernel "$IMG/vmlinux" -initrd "$IMG/initramfs.cpio.gz" \
    -append "console=ttyS0 quiet panic=-1 cryptomgr.notests $append" \
    -display none -no-reboot \
    -chardev "file,id=con,path=$T/$name.log,input-path=$T/$name.in" -serial chardev:con \
    "$@" >"$T/$name.qemu.log" 2>&1 &
  QPID[$name]=$!
  PIDS+=($!)
}

# wait_for NAME REGEX TIMEOUT [OFFSET]: prints the first console line (after byte OFFSET)
# matching REGEX; fails after TIMEOUT seconds or when the guest's QEMU has exited
wait_for() {
  local name=$1 re=$2 end=$(($(date +%s) + $3)) from=$((${4:-0} + 1)) line
  while [ "$(date +%s)" -lt "$end" ]; do
    line=$(tail -c +"$from" "$T/$name.log" | tr -d '\r' | grep -aE -m1 "$re" || true)
    if [ -n "$line" ]; then echo "$line"; return 0; fi
    if ! kill -0 "${QPID[$name]}" 2>/dev/null; then
      echo "vm-guest-check: QEMU of $name exited: $(tail -3 "$T/$name.qemu.log")" >&2
      return 1
    fi
    sleep 0.2
  done
  return 1
}

# run_cmd NAME TIMEOUT CMD: types CMD on the console; sets RC from the marker
# "ZOVN-GUEST: done <exit code>" and RUN_OUT to the console output since
run_cmd() {
  local name=$1 timeout=$2 cmd=$3 off line
  off=$(stat -c %s "$T/$name.log")
  printf '%s; echo ZOVN-GUEST: done $?\n' "$cmd" >"$T/$name.in"
  line=$(wait_for "$name" 'ZOVN-GUEST: done [0-9]+' "$timeout" "$off") || die "$name: no result of '$cmd' in ${timeout}s (log $T/$name.log)"
  RUN_OUT=$(tail -c +"$((off + 1))" "$T/$name.log" | tr -d '\r')
  RC=${line##* }
}

# --- (a) plain boot --------------------------------------------------------------------------
t0=$(now)
start_guest plain "" -nic none
wait_for plain 'ZOVN-GUEST: booted' 15 >/dev/null || die "(a) no 'ZOVN-GUEST: booted' within 15 s (log $T/plain.log)"
BOOT=$(since "$t0")
wait_for plain 'ZOVN-GUEST: ready' 15 >/dev/null || die "(a) no 'ZOVN-GUEST: ready' (log $T/plain.log)"
READY=$(since "$t0")
grep -a 'ZOVN-GUEST: error' "$T/plain.log" && die "(a) the guest reported errors"
log "(a) plain boot: 'booted' after ${BOOT}s, 'ready' (console shell) after ${READY}s"
kill "${QPID[plain]}"

# --- (b) two guests on vhost-user, dpdk-testpmd forwarding between them ----------------------
for i in 1 2; do
  extra='zovn.gw=10.99.0.254 zovn.mtu=1400'
  [ $i = 2 ] && extra='zovn.run="iperf3 -s -D"'
  start_guest "vm$i" "zovn.ip=10.99.0.$i/24 $extra" \
    -chardev "socket,id=vhu,path=$T/vhu$i.sock,server=on,wait=off" \
    -netdev vhost-user,id=net0,chardev=vhu \
    -device "virtio-net-pci,netdev=net0,mac=52:54:00:99:00:0$i"
done
mkfifo "$T/testpmd.in"
exec {pmdfd}<>"$T/testpmd.in"
"$TESTPMD" --lcores 0@0,1@0 --no-pci --no-huge -m 512 --file-prefix zovnvmcheck \
  --vdev "net_vhost0,iface=$T/vhu1.sock,client=1" --vdev "net_vhost1,iface=$T/vhu2.sock,client=1" \
  -- --forward-mode=io --auto-start --total-num-mbufs=16384 <"$T/testpmd.in" >"$T/testpmd.log" 2>&1 &
PMD=$!
PIDS+=("$PMD")
t0=$(now)
for i in 1 2; do
  sleep 1
  kill -0 "$PMD" 2>/dev/null || die "(b) dpdk-testpmd exited: $(tail -5 "$T/testpmd.log")"
  wait_for "vm$i" 'ZOVN-GUEST: (addr|error)' 60 | grep -q addr || die "(b) vm$i: no address (log $T/vm$i.log)"
  log "(b) vm$i: $(wait_for "vm$i" "ZOVN-GUEST: eth0" 1) $(wait_for "vm$i" "ZOVN-GUEST: addr" 1) $(since "$t0")s after testpmd started (QEMU waits for its vhost-user peer)"
  wait_for "vm$i" 'zovn# ' 30 >/dev/null || die "(b) vm$i: no shell prompt"
done
run_cmd vm1 30 'ip -o route show default; cat /sys/class/net/eth0/mtu'; rc=$RC
log "(b) vm1 static config: $(echo "$RUN_OUT" | grep -aE '^default|^[0-9]+$' | tr '\n' ' ')"
if [ "$rc" != 0 ] || ! echo "$RUN_OUT" | grep -q '^default via 10.99.0.254' || ! echo "$RUN_OUT" | grep -qx 1400; then
  die "(b) vm1: zovn.gw/zovn.mtu not applied"
fi
run_cmd vm1 60 'ping -c 3 -W 5 10.99.0.2'; rc=$RC
echo "$RUN_OUT" | grep -aE 'bytes from|packets transmitted|round-trip' | sed 's/^/    /'
[ "$rc" = 0 ] || die "(b) ping 10.99.0.1 -> 10.99.0.2 failed (exit $rc)"
log "(b) ping through vhost-user + testpmd: ZOVN-GUEST: done $rc"
run_cmd vm1 60 'iperf3 -c 10.99.0.2 -t 3 -f m'; rc=$RC
echo "$RUN_OUT" | grep -aE 'sender|receiver' | sed 's/^/    /'
[ "$rc" = 0 ] || die "(b) iperf3 10.99.0.1 -> 10.99.0.2 failed (exit $rc)"
log "(b) iperf3 through vhost-user + testpmd: ZOVN-GUEST: done $rc"
echo >&"$pmdfd"                             # testpmd: "Press enter to exit", prints its totals
for _ in $(seq 50); do kill -0 "$PMD" 2>/dev/null || break; sleep 0.2; done
grep -aE 'RX-packets|TX-packets' "$T/testpmd.log" | tail -2 | sed 's/^ */    testpmd total: /'

# --- (c) DHCP on QEMU's user network ---------------------------------------------------------
start_guest dhcp "zovn.ip=dhcp zovn.mtu=1400" -nic user,model=virtio-net-pci,mac=52:54:00:99:00:10
addr=$(wait_for dhcp 'ZOVN-GUEST: (addr|error)' 60) || die "(c) no DHCP result (log $T/dhcp.log)"
case $addr in *addr*) ;; *) die "(c) $addr" ;; esac
wait_for dhcp 'zovn# ' 30 >/dev/null || die "(c) no shell prompt"
run_cmd dhcp 30 'ip -o route show default; cat /sys/class/net/eth0/mtu'; rc=$RC
log "(c) DHCP: $addr; $(echo "$RUN_OUT" | grep -aE '^default|^[0-9]+$' | tr '\n' ' ')"
[ "$rc" = 0 ] || die "(c) reading route/mtu failed"

ok=1
log "all checks passed"
