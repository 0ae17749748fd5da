//! `zovn trace`'s text output: the verdict and what decided it first, readable at 80
//! columns; the logical stages and the physical traces with `-v`.

use super::{TraceReport, Verdict};

/// Wraps `text` at `width` columns (its leading spaces kept), continuation lines
/// indented by `indent`.
fn wrap(text: &str, width: usize, indent: &str) -> String {
    let mut out = String::new();
    let lead = &text[..text.len() - text.trim_start().len()];
    let mut line = lead.to_string();
    for word in text.split_whitespace() {
        if !line.trim().is_empty() && line.len() + 1 + word.len() > width {
            out.push_str(&line);
            out.push('\n');
            line = indent.to_string();
        } else if !line.trim().is_empty() && !line.ends_with(' ') {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&line);
    out
}

/// The report as text; `verbose` adds every logical stage and the `ofproto/trace` output.
pub fn text(r: &TraceReport, verbose: bool) -> String {
    let mut s = String::new();
    let node = |n: &Option<String>| {
        n.as_ref()
            .map(|n| format!(", node {n}"))
            .unwrap_or_default()
    };
    s += &wrap(
        &format!(
            "{} ({}{}) -> {} ({}{}) {}",
            r.source.name,
            r.source.ip,
            node(&r.source.node),
            r.destination.name,
            r.destination.ip,
            node(&r.destination.node),
            r.packet
        ),
        80,
        "    ",
    );
    s.push('\n');
    let verdict = match r.verdict {
        Verdict::Delivered => "DELIVERED",
        Verdict::Dropped => "DROPPED",
    };
    let mut reasons = r.decided_by.iter();
    s += &wrap(
        &format!(
            "{verdict}: {}",
            reasons.next().map(String::as_str).unwrap_or("-")
        ),
        80,
        "    ",
    );
    s.push('\n');
    for f in reasons {
        s += &wrap(&format!("  - {f}"), 80, "    ");
        s.push('\n');
    }
    for p in &r.physical {
        let to = p
            .tunnel_to
            .as_ref()
            .map(|t| format!(", tunnel to node {t}"))
            .unwrap_or_default();
        s += &wrap(
            &format!(
                "  node {} (OpenFlow): {}{to}",
                p.node,
                if p.dropped() {
                    "drop".to_string()
                } else {
                    "forwarded".to_string()
                }
            ),
            80,
            "    ",
        );
        s.push('\n');
    }
    if verbose {
        s += "\nlogical trace (ovn-trace):\n";
        for st in &r.logical.stages {
            s += &format!(
                "  {} {} {:>2} {} prio {}: {}\n",
                st.datapath, st.pipeline, st.table, st.name, st.priority, st.match_
            );
            for a in &st.actions {
                s += &format!("      {a}\n");
            }
        }
        for p in &r.physical {
            s += &format!(
                "\nphysical trace on node {} (ofproto/trace br-int):\n",
                p.node
            );
            s += &p.text;
            s += &format!("Datapath actions: {}\n", p.datapath_actions);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_wrap_at_80_columns() {
        let w = wrap(&"word ".repeat(40), 80, "    ");
        assert!(w.lines().count() > 2);
        assert!(w.lines().all(|l| l.len() <= 80), "{w}");
        assert!(w.lines().skip(1).all(|l| l.starts_with("    ")));
    }
}
