//! Playing the IaaS platform of external mode with `ovn-nbctl`, as ZStack would build its
//! rows: nothing here carries an `external_ids` mark of ours.

/// A switch port `lsp` on `switch` of type `router`, peered with router port `lrp`.
pub fn router_port(nb: &str, switch: &str, lsp: &str, lrp: &str) {
    try_router_port(nb, switch, lsp, lrp).unwrap_or_else(|e| panic!("{e}"));
}

/// [`router_port`], returning the failure.
pub fn try_router_port(nb: &str, switch: &str, lsp: &str, lrp: &str) -> lab::Result<()> {
    lab::ctl::nbctl(
        nb,
        &[
            "lsp-add",
            switch,
            lsp,
            "--",
            "lsp-set-type",
            lsp,
            "router",
            "--",
            "lsp-set-addresses",
            lsp,
            "router",
            "--",
            "lsp-set-options",
            lsp,
            &format!("router-port={lrp}"),
        ],
    )
    .map(drop)
}

/// Switch `switch` attached to router `router` (created if missing) through router port
/// `lrp-<switch>` with `mac` and `network` (the gateway and prefix, `10.99.0.1/24`).
pub fn routed_switch(nb: &str, switch: &str, router: &str, mac: &str, network: &str) {
    try_routed_switch(nb, switch, router, mac, network).unwrap_or_else(|e| panic!("{e}"));
}

/// [`routed_switch`], returning the failure.
pub fn try_routed_switch(
    nb: &str,
    switch: &str,
    router: &str,
    mac: &str,
    network: &str,
) -> lab::Result<()> {
    lab::ctl::nbctl(nb, &["--may-exist", "lr-add", router])?;
    lab::ctl::nbctl(nb, &["ls-add", switch])?;
    let lrp = format!("lrp-{switch}");
    lab::ctl::nbctl(nb, &["lrp-add", router, &lrp, mac, network])?;
    try_router_port(nb, switch, &format!("{switch}-lr"), &lrp)
}

/// A VM's port on `switch`: `mac` and `ip` (no type; bind it with `iface-id=<name>`).
pub fn vm_port(nb: &str, switch: &str, name: &str, mac: &str, ip: &str) {
    try_vm_port(nb, switch, name, mac, ip).unwrap_or_else(|e| panic!("{e}"));
}

/// [`vm_port`], returning the failure.
pub fn try_vm_port(nb: &str, switch: &str, name: &str, mac: &str, ip: &str) -> lab::Result<()> {
    lab::ctl::nbctl(
        nb,
        &[
            "lsp-add",
            switch,
            name,
            "--",
            "lsp-set-addresses",
            name,
            &format!("{mac} {ip}"),
        ],
    )
    .map(drop)
}

/// A platform VM that really sends traffic: a network namespace whose `eth0` is bound, on
/// `node`'s br-int, to the platform's logical port `lsp` (`iface-id`, as the platform's
/// own agent binds a VM's tap), with `mac`, `cidr` (address/prefix) and a default route
/// via `gateway`. Removed (namespace and OVS port) on drop.
pub struct PlatformVm {
    pub netns: String,
    node_netns: String,
    db: String,
    port: String,
}

impl PlatformVm {
    /// Binds VM `name` (its netns `<prefix>-<name>`, its OVS port `<prefix><name>` on br-int
    /// of `node`).
    pub fn bind(
        prefix: &str,
        name: &str,
        node: &lab::state::NodeState,
        lsp: &str,
        mac: &str,
        cidr: &str,
        gateway: &str,
    ) -> PlatformVm {
        let vm = PlatformVm {
            netns: format!("{prefix}-{name}"),
            node_netns: node.netns.clone(),
            db: node.db_remote.clone(),
            port: format!("{prefix}{name}"),
        };
        let step = |what: &str, r: Result<(), String>| {
            r.unwrap_or_else(|e| panic!("VM {name}: {what}: {e}"));
        };
        let lab_step = |r: lab::Result<()>| r.map_err(|e| e.to_string());
        step("netns", lab_step(lab::netns::add(&vm.netns)));
        step(
            "veth",
            lab_step(lab::netns::add_veth(
                &vm.port,
                &vm.node_netns,
                "eth0",
                &vm.netns,
            )),
        );
        step(
            "eth0",
            lab_step(lab::netns::set_mac_mtu_up(&vm.netns, "eth0", mac, 1400)),
        );
        step(
            "address",
            lab_step(lab::netns::addr_add(&vm.netns, "eth0", cidr)),
        );
        step(
            "default route",
            lab_step(lab::netns::route_add(&vm.netns, "default", gateway)),
        );
        step(
            "host end up",
            lab_step(lab::netns::link_up(&vm.node_netns, &vm.port)),
        );
        // OVS's userspace datapath drops partial checksums: the VM computes its own
        step(
            "tx checksum off",
            lab::netns::exec(&vm.netns, &["ethtool", "-K", "eth0", "tx", "off"])
                .map(drop)
                .map_err(|e| e.to_string()),
        );
        let iface_id = format!("external_ids:iface-id={lsp}");
        let out = std::process::Command::new("ovs-vsctl")
            .arg(format!("--db={}", vm.db))
            .args(["add-port", "br-int", &vm.port, "--", "set", "Interface"])
            .arg(&vm.port)
            .arg(&iface_id)
            .output()
            .unwrap_or_else(|e| panic!("VM {name}: ovs-vsctl: {e}"));
        assert!(
            out.status.success(),
            "VM {name}: ovs-vsctl add-port: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        vm
    }

    /// `ping -c 1 -W 2 <ip>` from the VM.
    pub fn ping(&self, ip: &str) -> Result<(), String> {
        lab::netns::exec(&self.netns, &["ping", "-c", "1", "-W", "2", ip])
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

impl Drop for PlatformVm {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ovs-vsctl")
            .arg(format!("--db={}", self.db))
            .args(["--if-exists", "del-port", "br-int", &self.port])
            .output();
        let _ = lab::netns::delete(&self.netns);
    }
}

/// A lab configuration edit for external mode: the controller does not own the NB, and no
/// default Subnet (the platform's switches are what Subnets use). For
/// [`crate::zovn::start_lab_with`].
pub fn external_mode(cfg: &mut lab::LabConfig) {
    cfg.cluster_cidr = Vec::new();
    cfg.mode = lab::ControllerMode::External;
}
