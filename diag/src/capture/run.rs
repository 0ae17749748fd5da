//! [`run_capture`]: runs a backend's `zstack-ovnkube-node debug capture` command and consumes its pcap
//! stream — into a file, to stdout (`-w -`, for `| tshark -r -`), or as one summary line
//! per packet — and on SIGINT/SIGTERM/SIGHUP forwards SIGINT to it and waits for its
//! clean exit (its Mirror removed) rather than dying first.

use std::fs::File;
use std::io::{self, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, kill, sigaction};
use nix::unistd::Pid;

use super::summary::summarize;
use api::pcap::{EXIT_FAILURE, EXIT_INPUT, PcapError, PcapReader, PcapWriter};

/// Where the packets go.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// `Some(path)`: pcap into that file (`-`: stdout); `None`: summary lines on stdout.
    pub write: Option<PathBuf>,
    /// Ask the capture to stop by closing its standard input instead of SIGINT (a
    /// `kubectl exec -i` to a capture run with `--until-stdin-closes`: a signal would end
    /// kubectl, not the capture).
    pub close_stdin: bool,
}

/// How many of SIGINT, SIGTERM, SIGHUP this process got.
static SIGNALS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_signal(_: nix::libc::c_int) {
    SIGNALS.fetch_add(1, Ordering::SeqCst);
}

/// Catches SIGINT, SIGTERM and SIGHUP (restarting reads) for the rest of the process.
fn catch_signals() -> nix::Result<()> {
    let act = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only touches an atomic.
        unsafe { sigaction(s, &act) }?;
    }
    Ok(())
}

enum Sink {
    Pcap(PcapWriter<Box<dyn Write>>),
    Lines(io::Stdout),
    /// The output was closed: the rest is drained.
    Closed,
}

/// Runs `cmd` (a `zstack-ovnkube-node debug capture`, pcap on its stdout, its stderr inherited) and
/// consumes its capture as `opts` says; returns the exit code: the capture's own (0, 1
/// for a system failure, 2 for bad input), 1 when it was killed or its stream broke.
/// Prints `N packets captured` on stderr once the capture started. Catches SIGINT,
/// SIGTERM and SIGHUP for the rest of the process: the first is forwarded to the capture
/// as SIGINT (or, with [`RunOptions::close_stdin`], closes its standard input), a second
/// as SIGTERM, a third as SIGKILL. The capture's standard input is a pipe held open until
/// then (and closed if this process dies).
pub fn run_capture(mut cmd: Command, opts: &RunOptions) -> i32 {
    let fail = |msg: String| {
        eprintln!("zovn capture: {msg}");
        EXIT_FAILURE
    };
    let mut sink = match &opts.write {
        None => Sink::Lines(io::stdout()),
        Some(p) if p.as_os_str() == "-" => Sink::Pcap(
            match PcapWriter::new(Box::new(io::stdout()) as Box<dyn Write>) {
                Ok(w) => w,
                Err(e) => return fail(format!("write to stdout: {e}")),
            },
        ),
        Some(p) => {
            match File::create(p).and_then(|f| PcapWriter::new(Box::new(f) as Box<dyn Write>)) {
                Ok(w) => Sink::Pcap(w),
                Err(e) => {
                    eprintln!("zovn capture: cannot write {}: {e}", p.display());
                    return EXIT_INPUT;
                }
            }
        }
    };
    if let Err(e) = catch_signals() {
        return fail(format!("signal handlers: {e}"));
    }
    let mut child = match cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn() {
        Ok(c) => c,
        Err(e) => return fail(format!("cannot start {:?}: {e}", cmd.get_program())),
    };
    let Some(stdout) = child.stdout.take() else {
        return fail("the capture has no output".into());
    };
    let pid = Pid::from_raw(child.id() as i32);
    // held open while the capture runs: its end is the stop request with `close_stdin`
    let mut stdin = child.stdin.take();
    let close_stdin = opts.close_stdin;
    // the forwarder: our signals to the child, until its stream ended (it is not reaped
    // before the forwarder stops, so its pid cannot be another process's)
    let done = Arc::new(AtomicBool::new(false));
    let stop_child = Arc::new(AtomicBool::new(false));
    let forwarder = {
        let (done, stop_child) = (done.clone(), stop_child.clone());
        std::thread::spawn(move || {
            let mut sent = 0;
            while !done.load(Ordering::SeqCst) {
                let want = SIGNALS
                    .load(Ordering::SeqCst)
                    .max(usize::from(stop_child.load(Ordering::SeqCst)));
                while sent < want {
                    let s = match sent {
                        0 if close_stdin => {
                            stdin = None;
                            sent += 1;
                            continue;
                        }
                        0 => Signal::SIGINT,
                        1 => Signal::SIGTERM,
                        _ => Signal::SIGKILL,
                    };
                    let _ = kill(pid, s);
                    sent += 1;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            drop(stdin);
        })
    };
    let mut n = 0u64;
    let mut started = false;
    let mut broken: Option<PcapError> = None;
    match PcapReader::new(BufReader::new(stdout)) {
        Ok(mut r) => {
            started = true;
            loop {
                match r.next_packet() {
                    Ok(Some(p)) => {
                        n += 1;
                        if let Err(e) = deliver(&mut sink, &p) {
                            if e.kind() != io::ErrorKind::BrokenPipe {
                                eprintln!("zovn capture: {e}");
                            }
                            sink = Sink::Closed;
                            stop_child.store(true, Ordering::SeqCst);
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        broken = Some(e);
                        break;
                    }
                }
            }
        }
        // the capture ended before it started: its own message says why
        Err(PcapError::Truncated(_)) => {}
        Err(e) => broken = Some(e),
    }
    done.store(true, Ordering::SeqCst);
    let _ = forwarder.join();
    let status = match child.wait() {
        Ok(s) => s,
        Err(e) => return fail(format!("wait for the capture: {e}")),
    };
    if started {
        eprintln!("{n} packets captured");
    }
    if let Some(sig) = std::os::unix::process::ExitStatusExt::signal(&status) {
        return fail(format!(
            "the capture process was killed by signal {sig}; the node agent removes its mirror"
        ));
    }
    if let Some(e) = broken {
        return fail(e.to_string());
    }
    status.code().unwrap_or(EXIT_FAILURE)
}

fn deliver(sink: &mut Sink, p: &api::pcap::Packet) -> io::Result<()> {
    match sink {
        Sink::Pcap(w) => w.write(p.ts, p.orig_len, &p.data),
        Sink::Lines(out) => {
            let line = format!(
                "{} {} {}\n",
                time_of_day(p.ts),
                p.orig_len,
                summarize(&p.data)
            );
            let mut o = out.lock();
            o.write_all(line.as_bytes())?;
            o.flush()
        }
        Sink::Closed => Ok(()),
    }
}

/// `HH:MM:SS.micros` (UTC) of a time since the epoch.
pub fn time_of_day(ts: Duration) -> String {
    let s = ts.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        ts.subsec_micros()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_of_day_is_utc_with_microseconds() {
        assert_eq!(
            time_of_day(Duration::new(1_700_000_000, 1_500)),
            "22:13:20.000001"
        );
    }
}
