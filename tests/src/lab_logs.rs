//! What a failed lab test leaves for whoever reads CI. When a lab is taken down during a
//! panic ([`crate::zovn::DownOnDrop`], [`crate::agent::AgentLab`]), [`on_down`] prints
//! the warnings and errors of the lab's own processes (the object store with its pod
//! runtime, each node's agent) and the last lines of each of those logs, and copies all
//! the lab's logs to `$ZOVN_FAILED_LOGS/<scratch dir name>` (default
//! `/tmp/zovn-failed-logs`), since the test's scratch directory is deleted with it.
//! `ZOVN_KEEP_LOGS=1` keeps the logs of passing runs too (of tests whose lab is still
//! there when it is dropped).

use std::path::{Path, PathBuf};

/// Lines shown from the end of each log.
const TAIL: usize = 25;
/// Warning/error lines shown per log (the last ones).
const WARNINGS: usize = 25;

/// The lab's logs worth reading first: the object store (pod runtime, CNI calls) and the
/// node agents.
fn primary_logs(lab_dir: &Path) -> Vec<PathBuf> {
    let mut logs = vec![lab_dir.join("log/lab-apiserver.log")];
    let mut nodes: Vec<PathBuf> = std::fs::read_dir(lab_dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("node"))
        })
        .map(|p| p.join("log/agent.log"))
        .filter(|p| p.is_file())
        .collect();
    nodes.sort();
    logs.extend(nodes);
    logs
}

fn is_warning(line: &str) -> bool {
    [
        "WARN",
        "ERROR",
        "\"level\":\"WARN",
        "\"level\":\"ERROR",
        "|WARN|",
        "|ERR|",
    ]
    .iter()
    .any(|m| line.contains(m))
}

/// The report for one log: its last warnings, then its last lines.
fn report(path: &Path) -> String {
    let Ok(text) = std::fs::read_to_string(path) else {
        return format!("--- {}: unreadable\n", path.display());
    };
    let lines: Vec<&str> = text.lines().collect();
    let warnings: Vec<&str> = lines.iter().copied().filter(|l| is_warning(l)).collect();
    let mut out = format!(
        "--- {} ({} lines, {} warnings/errors; the last {WARNINGS} of those, then the last {TAIL} lines)\n",
        path.display(),
        lines.len(),
        warnings.len()
    );
    for l in warnings
        .iter()
        .skip(warnings.len().saturating_sub(WARNINGS))
    {
        out.push_str(l);
        out.push('\n');
    }
    out.push_str("  ...\n");
    for l in lines.iter().skip(lines.len().saturating_sub(TAIL)) {
        out.push_str(l);
        out.push('\n');
    }
    out
}

fn at(path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Copies every `*.log` under `lab_dir` into `dest`, keeping the relative paths.
fn copy_logs(lab_dir: &Path, dest: &Path) -> std::io::Result<usize> {
    let mut copied = 0;
    let mut stack = vec![lab_dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| at(&dir, e))?;
        for e in entries.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else {
                continue; // gone meanwhile
            };
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() && p.extension().is_some_and(|x| x == "log") {
                let rel = p.strip_prefix(lab_dir).unwrap_or(&p);
                let to = dest.join(rel);
                if let Some(parent) = to.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| at(parent, e))?;
                }
                match std::fs::copy(&p, &to) {
                    Ok(_) => copied += 1,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {} // gone meanwhile
                    Err(e) => return Err(at(&p, e)),
                }
            }
        }
    }
    Ok(copied)
}

/// Called as a lab is taken down: after a panic, prints the lab's primary logs and keeps
/// all its logs (see the module docs); with `ZOVN_KEEP_LOGS=1`, keeps them in any case.
pub fn on_down(lab_dir: &Path) {
    if !lab_dir.is_dir() {
        return; // taken down already (a test that finished its lab)
    }
    if std::thread::panicking() {
        eprintln!("==== the failed lab's logs ({}) ====", lab_dir.display());
        for log in primary_logs(lab_dir) {
            eprint!("{}", report(&log));
        }
    } else if std::env::var("ZOVN_KEEP_LOGS").as_deref() != Ok("1") {
        return;
    }
    let root = std::env::var_os("ZOVN_FAILED_LOGS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/zovn-failed-logs"));
    let name = lab_dir
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "lab".into());
    let dest = root.join(name);
    match copy_logs(lab_dir, &dest) {
        Ok(n) => eprintln!("==== {n} log files kept in {} ====", dest.display()),
        Err(e) => eprintln!(
            "==== keeping the logs in {} failed: {e} ====",
            dest.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_shows_warnings_and_tail_and_copy_keeps_paths() {
        let d = tempfile::tempdir().unwrap();
        let lab = d.path().join("lab");
        std::fs::create_dir_all(lab.join("node1/log")).unwrap();
        std::fs::create_dir_all(lab.join("log")).unwrap();
        let mut text = String::new();
        for i in 0..100 {
            text.push_str(&format!("line {i} INFO\n"));
        }
        text.insert_str(0, "2026 WARN CNI DEL failed\n");
        std::fs::write(lab.join("node1/log/agent.log"), &text).unwrap();
        std::fs::write(lab.join("log/lab-apiserver.log"), "x ERROR y\n").unwrap();
        let logs = primary_logs(&lab);
        assert_eq!(
            logs,
            vec![
                lab.join("log/lab-apiserver.log"),
                lab.join("node1/log/agent.log")
            ]
        );
        let r = report(&lab.join("node1/log/agent.log"));
        assert!(r.contains("101 lines, 1 warnings"), "{r}");
        assert!(r.contains("WARN CNI DEL failed"), "{r}");
        assert!(
            r.contains("line 99 INFO") && !r.contains("line 50 INFO"),
            "{r}"
        );
        let dest = d.path().join("kept");
        assert_eq!(copy_logs(&lab, &dest).unwrap(), 2);
        assert!(dest.join("node1/log/agent.log").is_file());
    }
}
