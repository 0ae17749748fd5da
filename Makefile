# The two entry points of the README:
#   make lab   - bring up the local 2-node lab, show OVN/OVS running, tear it down
#   make test  - the whole test suite on real components (what CI runs)
# Both install what they need first (scripts/install-deps.sh, idempotent).

CARGO ?= cargo
LAB_DIR ?= /tmp/zovn-lab
NODES ?= 2

.PHONY: lab test test-netpol cluster-e2e deps build lint codegen bench-ovsdb bench-churn bench-afxdp-restart clean-lab images test-images install-cli

deps:
	@scripts/install-deps.sh

build: deps
	$(CARGO) build --workspace --bins

lab: build
	@scripts/lab-demo.sh "$(LAB_DIR)" "$(NODES)"

test:
	@scripts/run-tests.sh

# the NetworkPolicy corpus on real traffic alone, with its progress (also part of `test`)
test-netpol: build
	cargo test -p tests --test lab_suite -- netpol_lab:: --nocapture

# the chart on a real 2-node Kubernetes cluster (zovn cluster: kubelet + containerd per node),
# issue 16's checks as named steps printing `N passed, M failed` (also part of `test`).
# Builds the image archives first when absent (make images, make test-images). Root.
cluster-e2e: build
	ZOVN_REQUIRE_REAL=1 $(CARGO) test -p tests --test cluster_e2e -- --nocapture

# the one image (controller, OVN central, every node pool) as an OCI archive:
# target/images/zstack-ovn-<version>.oci.tar named docker.io/zstack-ovn/zstack-ovn:<version>.
# Debian bookworm (mmdebstrap, cached in /var/cache/zovn/images/) + the release binaries
# (umoci); no registry, no daemon. Root. See docs/images.md.
images:
	@CARGO="$(CARGO)" deploy/images/build.sh

# target/images/zovn-test-images.oci.tar: localhost/zovn/busybox:1 and localhost/zovn/pause:1
# (Debian's busybox-static, umoci), the workloads and sandbox image of `zovn cluster`. Root,
# seconds, rebuilt only when its inputs change. See docs/images.md.
test-images:
	@deploy/images/build-test-images.sh

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

codegen:
	$(CARGO) run -q -p ovsdb --bin ovsdb-codegen -- --from-system

bench-ovsdb: build
	$(CARGO) run --release -p perf --bin zovn-perf -- ovsdb-insert --ports 10000

# issue 17's pod churn per datapath (root; see docs/performance.md "Pod churn per datapath"):
# cni-add on one lab with a node per datapath, then pod-burst (a fresh 2-node lab per
# datapath and round, 60 pods at once, traffic of running pods during a 30-pod burst),
# both also with fast start off for comparison
bench-churn: deps
	$(CARGO) build --release -p dataplane -p cni -p zovn -p perf --bins
	target/release/zovn-perf cni-add --pods 50 --concurrent 20 --no-fast-start
	target/release/zovn-perf pod-burst --rounds 2 --no-fast-start

# ovs-vswitchd restarted with 0-8 AF_XDP ports on a bare OVS (root): the floor under an
# in-place restart on an AF_XDP node (docs/performance.md); VSWITCHD_ENV=... for a variant
bench-afxdp-restart: deps
	@scripts/bench-afxdp-restart.sh

# the zovn CLI on an operator's machine, also as the kubectl plugin `kubectl-zovn`
# (`kubectl zovn trace|status|capture|backup|upgrade-ovs` on the current cluster;
# docs/diagnostics.md): built without the lab (`--no-default-features`), so it links
# neither the lab nor the controller nor the node agent, in its own target dir
PREFIX ?= /usr/local
install-cli:
	$(CARGO) build --release -p zovn --no-default-features --target-dir target/cli
	install -D -m 0755 target/cli/release/zovn "$(DESTDIR)$(PREFIX)/bin/zovn"
	ln -sf zovn "$(DESTDIR)$(PREFIX)/bin/kubectl-zovn"

clean-lab:
	-target/debug/zovn lab down --dir "$(LAB_DIR)"
