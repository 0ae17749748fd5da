//! `extraEalArgs` against an allowlist of DPDK EAL options.
//!
//! The arguments reach a privileged ovs-vswitchd (`other_config:dpdk-extra`), and the
//! configuration they come from includes a Node annotation that every node agent may
//! write. Some EAL options load or write what their value names: `-d` loads a shared
//! object into ovs-vswitchd, `--vdev net_pcap0,rx_pcap=FILE` reads a host file,
//! `--file-prefix`/`--huge-dir`/`--trace-dir` choose host paths, `-l`/`--lcores` and
//! `--socket-mem` override what the agent derives. Only options that tune DPDK within what
//! the agent set up pass; anything else is refused by name, and no extra argument reaches
//! DPDK then (the decision reports it as a configuration error).

/// Options allowed in `extraEalArgs`, with whether they take a value.
const ALLOWED: &[(&str, bool)] = &[
    ("-a", true),
    ("--allow", true),
    ("-b", true),
    ("--block", true),
    ("--iova-mode", true),
    ("--log-level", true),
    ("--base-virtaddr", true),
    ("--vfio-intr", true),
    ("-n", true),
    ("-r", true),
    ("--huge-unlink", false),
    ("--legacy-mem", false),
    ("--single-file-segments", false),
    ("--match-allocations", false),
    ("--in-memory", false),
    ("--no-telemetry", false),
    ("--no-shconf", false),
];

/// Why some options are refused, for the message (others: "not on the allowlist").
const WHY: &[(&str, &str)] = &[
    ("-d", "loads a shared object into ovs-vswitchd"),
    (
        "--vdev",
        "creates devices that read and write host files and sockets",
    ),
    ("--file-prefix", "names host paths"),
    ("--huge-dir", "names host paths"),
    ("--trace-dir", "names host paths"),
    ("--proc-type", "changes how ovs-vswitchd shares DPDK memory"),
    ("-l", "the agent derives the lcores (lcoreMask)"),
    ("-c", "the agent derives the lcores (lcoreMask)"),
    ("--lcores", "the agent derives the lcores (lcoreMask)"),
    ("--socket-mem", "the agent sets it (socketMem)"),
    ("--socket-limit", "the agent sets it (socketLimit)"),
    ("--no-pci", "the agent sets it (noPci)"),
];

/// Why `extraEalArgs` is refused (no extra argument reaches DPDK then).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EalArgsError {
    /// `why`: what the option would do, else "not on the allowlist of EAL options".
    #[error("EAL option {name:?} is refused ({why}); allowed: {}", allowed_list())]
    Refused { name: String, why: &'static str },
    #[error("EAL option {0} needs a value")]
    NeedsValue(String),
    #[error("EAL option {0} takes no value")]
    TakesNoValue(String),
}

/// The allowed options, space-separated (for the message).
fn allowed_list() -> String {
    ALLOWED
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The arguments, normalized (single spaces), when every option is allowed; else why not.
pub fn check(args: &str) -> Result<String, EalArgsError> {
    let mut out = Vec::new();
    let mut tokens = args.split_whitespace();
    while let Some(t) = tokens.next() {
        let (name, inline) = match t.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v)),
            _ => (t, None),
        };
        // short options may carry their value attached (`-a0000:03:00.0`)
        let (name, attached) = match ALLOWED.iter().find(|(n, _)| *n == name) {
            Some(_) => (name, None),
            None if !name.starts_with("--") && name.len() > 2 && name.starts_with('-') => {
                (&name[..2], Some(&name[2..]))
            }
            None => (name, None),
        };
        let Some((_, takes_value)) = ALLOWED.iter().find(|(n, _)| *n == name) else {
            let why = WHY
                .iter()
                .find(|(n, _)| *n == name)
                .map_or("not on the allowlist of EAL options", |(_, w)| w);
            return Err(EalArgsError::Refused {
                name: name.to_string(),
                why,
            });
        };
        match (takes_value, inline, attached) {
            (true, Some(v), _) => out.push(format!("{name}={v}")),
            (true, None, Some(v)) => out.push(format!("{name} {v}")),
            (true, None, None) => {
                let v = tokens
                    .next()
                    .ok_or_else(|| EalArgsError::NeedsValue(name.to_string()))?;
                out.push(format!("{name} {v}"));
            }
            (false, None, None) => out.push(name.to_string()),
            (false, _, _) => return Err(EalArgsError::TakesNoValue(name.to_string())),
        }
    }
    Ok(out.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_options_pass_normalized() {
        assert_eq!(
            check("  -a 0000:03:00.0   --iova-mode=va --huge-unlink ").as_deref(),
            Ok("-a 0000:03:00.0 --iova-mode=va --huge-unlink")
        );
        assert_eq!(check("-a0000:03:00.0").as_deref(), Ok("-a 0000:03:00.0"));
        assert_eq!(check("").as_deref(), Ok(""));
        // a value DPDK itself will judge (and may fail on) is passed as given
        assert_eq!(
            check("--iova-mode=zovn-bogus").as_deref(),
            Ok("--iova-mode=zovn-bogus")
        );
    }

    #[test]
    fn options_that_load_or_name_host_paths_are_refused_by_name() {
        for (args, why) in [
            ("-d /tmp/evil.so", "loads a shared object"),
            ("-d/tmp/evil.so", "loads a shared object"),
            (
                "--vdev net_pcap0,rx_pcap=/etc/shadow",
                "read and write host files",
            ),
            ("--file-prefix=x", "names host paths"),
            ("-l 0-1", "the agent derives the lcores"),
            ("--socket-mem 1024", "the agent sets it"),
            ("--zovn-no-such-eal-option", "not on the allowlist"),
            ("-a 0000:03:00.0 -d x.so", "loads a shared object"),
        ] {
            let e = check(args).expect_err(args).to_string();
            assert!(e.contains(why) && e.contains("refused"), "{args}: {e}");
        }
        assert!(
            check("--iova-mode")
                .expect_err("value")
                .to_string()
                .contains("needs a value")
        );
        assert!(
            check("--huge-unlink=1")
                .expect_err("flag")
                .to_string()
                .contains("takes no value")
        );
    }
}
