#!/bin/bash
# run-tests.sh - the whole test suite on real components (`make test`, and CI through .ci/run).
#  1. installs missing packages (scripts/install-deps.sh), checks the free disk space
#  2. fmt + clippy (-D warnings)
#  3. cargo test --workspace with ZOVN_REQUIRE_REAL=1: a real-component test whose
#     prerequisites are missing fails instead of skipping
#  4. fails unless the real-component tests actually ran (they record themselves)
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh || exit 1

# A cold build, the image archives and the labs' state take ~20 GB: a full disk midway
# fails in confusing places (no output, truncated logs), so say it up front.
need_gb=${ZOVN_MIN_FREE_GB:-20}
avail_kb=$(df -Pk . | awk 'NR == 2 {print $4}')
if [ -n "$avail_kb" ] && [ "$avail_kb" -lt $((need_gb * 1024 * 1024)) ]; then
  echo "run-tests: $((avail_kb / 1024 / 1024)) GB free on $(df -P . | awk 'NR == 2 {print $6}'), the suite needs about ${need_gb} GB (a cold build, images, labs): free some (an old target/debug can pass 60 GB) and run again" >&2
  exit 1
fi

mkdir -p target
LOG=target/test.log
export ZOVN_REAL_LOG=$PWD/target/real-tests.log
rm -f "$ZOVN_REAL_LOG"
status=0
echo "== lint (fmt, clippy, dependency policy)"
cargo fmt --all --check || status=1
# --locked: the builds use Cargo.lock as committed (the policy below checks what it holds)
cargo clippy --locked --workspace --all-targets -q -- -D warnings || status=1
python3 scripts/check-deps.py || status=1

echo "== build (every binary: tests run the real zovn, zstack-ovnkube-controller, ...)"
cargo build --locked --workspace --bins || status=1
# the operator's CLI as `make install-cli` ships it (no lab, controller or agent linked):
# clippy sees its cfg, the cluster e2e runs it as kubectl-zovn
cargo clippy --locked -p zovn --no-default-features --target-dir target/cli -q -- -D warnings || status=1
cargo build --locked -p zovn --no-default-features --target-dir target/cli || status=1

echo "== tests"
# the machine's 2 MiB hugepage reservation: the tests must leave it as they found it
NR_HP=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
hp_before=$(cat "$NR_HP" 2>/dev/null || echo 0)
export ZOVN_HUGEPAGES_LOG=$PWD/target/hugepages-leaks.log
rm -f "$ZOVN_HUGEPAGES_LOG"
ZOVN_REQUIRE_REAL=1 cargo test --locked --workspace --no-fail-fast 2>&1 | tee "$LOG"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
if [ -s "$ZOVN_HUGEPAGES_LOG" ]; then
  echo "run-tests: heavy tests that left more 2 MiB hugepages reserved than they found:" >&2
  cat "$ZOVN_HUGEPAGES_LOG" >&2
fi
hp_after=$(cat "$NR_HP" 2>/dev/null || echo 0)
if [ "$hp_after" != "$hp_before" ]; then
  echo "run-tests: nr_hugepages was $hp_before before the tests and is $hp_after: put back" >&2
  echo "$hp_before" > "$NR_HP" || true
fi

# Every real-component test records itself in $ZOVN_REAL_LOG when its gate lets it run
# (under ZOVN_REQUIRE_REAL=1 a missing prerequisite fails the test instead of skipping).
real=$(sort -u "$ZOVN_REAL_LOG" 2>/dev/null | wc -l)
if [ "$real" -lt "${ZOVN_MIN_REAL_TESTS:-8}" ]; then
  echo "run-tests: only $real real-component tests ran (expected >= ${ZOVN_MIN_REAL_TESTS:-8})" >&2
  status=1
fi
passed=$(grep -oE '[0-9]+ passed' "$LOG" | awk '{s+=$1} END {print s+0}')
failed=$(grep -oE '[0-9]+ failed' "$LOG" | awk '{s+=$1} END {print s+0}')
echo "run-tests: real-component tests that ran: $real; overall status $status"
echo "summary: $passed passed, $failed failed"
exit $status
