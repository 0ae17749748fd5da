//! `zstack-ovnkube-node debug capture`'s flags and its run: pcap on standard output,
//! diagnostics on standard error; exit 0 when the capture ended cleanly,
//! [`super::EXIT_INPUT`] on the operator's mistake (a port not on this node, a CLI of
//! another capture protocol), [`super::EXIT_FAILURE`] on a system failure.

use std::os::fd::AsFd;
use std::time::Duration;

use clap::Parser;

use super::{EXIT_INPUT, NodeCapture};

/// The node's side of `zovn capture` (run by the CLI through `kubectl exec`, or in a lab
/// node's netns): mirror one pod port, write pcap to standard output.
#[derive(Debug, Parser)]
#[command(
    name = "capture",
    bin_name = "zstack-ovnkube-node debug capture",
    version
)]
pub struct DebugCaptureArgs {
    /// The capture stream's version the CLI reads (`api::pcap::CAPTURE_PROTOCOL`); a
    /// node of another version refuses, naming both.
    #[arg(long, value_name = "N")]
    pub protocol: u32,
    /// The node's Open_vSwitch database.
    #[arg(
        long,
        value_name = "REMOTE",
        default_value = "unix:/var/run/openvswitch/db.sock"
    )]
    pub db: String,
    /// The pod's logical switch port (the Interface's external_ids:iface-id).
    #[arg(long, value_name = "LSP")]
    pub iface_id: String,
    /// The integration bridge.
    #[arg(long, default_value = "br-int")]
    pub bridge: String,
    /// Stop after N packets.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Stop after SECS seconds in any case.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub duration: u64,
    /// Stop when standard input ends (the operator's `kubectl exec -i` went away).
    #[arg(long)]
    pub until_stdin_closes: bool,
    /// The node's ovs-vswitchd control socket; the bridges' OpenFlow management sockets
    /// (`<bridge>.mgmt`) beside it are used to have ovs-vswitchd bring the tap up.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/var/run/openvswitch/ovs-vswitchd.ctl"
    )]
    pub vswitchd_ctl: String,
}

/// Whether `argv` (without the program name) is `debug capture ...`.
pub fn is_debug_capture(args: &[std::ffi::OsString]) -> bool {
    args.first().is_some_and(|a| a == "debug") && args.get(1).is_some_and(|a| a == "capture")
}

/// Runs the capture the flags describe; the process's exit code.
pub async fn run(a: DebugCaptureArgs) -> i32 {
    const ME: &str = "zstack-ovnkube-node debug capture";
    if a.protocol != api::pcap::CAPTURE_PROTOCOL {
        eprintln!(
            "{ME}: the CLI reads capture protocol {}, this node agent ({}) writes {}: use the \
             zovn CLI of the installed release",
            a.protocol,
            env!("CARGO_PKG_VERSION"),
            api::pcap::CAPTURE_PROTOCOL
        );
        return EXIT_INPUT;
    }
    // unbuffered: one write per packet record
    let out = match std::io::stdout().as_fd().try_clone_to_owned() {
        Ok(fd) => std::fs::File::from(fd),
        Err(e) => {
            eprintln!("{ME}: standard output: {e}");
            return super::EXIT_FAILURE;
        }
    };
    let opts = NodeCapture {
        db: a.db,
        iface_id: a.iface_id,
        bridge: a.bridge,
        count: a.count,
        duration: Duration::from_secs(a.duration),
        until_stdin_closes: a.until_stdin_closes,
        vswitchd_ctl: a.vswitchd_ctl,
    };
    match super::run(&opts, out).await {
        Ok(_) => 0,
        Err(f) => {
            eprintln!("{ME}: {}", f.message);
            f.code
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_debug_capture_is_recognised() {
        let v = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        assert!(is_debug_capture(&v(&[
            "debug",
            "capture",
            "--iface-id",
            "x"
        ])));
        assert!(!is_debug_capture(&v(&["debug"])));
        assert!(!is_debug_capture(&v(&["--node-name", "debug"])));
        assert!(!is_debug_capture(&v(&["uninstall-hook"])));
    }

    #[test]
    fn protocol_is_required() {
        let e = DebugCaptureArgs::try_parse_from(["capture", "--iface-id", "ns_p"]).unwrap_err();
        assert!(e.to_string().contains("--protocol"), "{e}");
    }
}
