//! The fast-start queue's bookkeeping, shared by the ADD path and the switcher
//! (`attach::promote::run`): ADDs in flight, when the last one ended,
//! and when each pending port was queued. No I/O, no dependency on the rest of the crate.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long no ADD must have been in flight before a switch starts.
pub const QUIET: Duration = Duration::from_millis(300);
/// The longest a pending port waits for a quiet moment. Long: a switch delays an ADD
/// that arrives meanwhile by up to its own time (ovs-vswitchd's main thread is busy with
/// it), and a pod on the kernel path works, only slower.
pub const MAX_DEFER: Duration = Duration::from_secs(30);

/// The ADDs in flight and the pending ports' queue times (shared by the ADD path and
/// the switcher).
#[derive(Debug, Default)]
pub struct Promotions {
    inner: Mutex<Inner>,
    pub(crate) wake: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Inner {
    in_flight: usize,
    last_add: Option<Instant>,
    /// sandbox key → when it was queued (or last failed).
    queued_at: HashMap<String, Instant>,
}

/// Held by an ADD while it runs (see [`Promotions::add_started`]).
pub struct AddInFlight<'a>(&'a Promotions);

impl Drop for AddInFlight<'_> {
    fn drop(&mut self) {
        if let Ok(mut i) = self.0.inner.lock() {
            i.in_flight = i.in_flight.saturating_sub(1);
            i.last_add = Some(Instant::now());
        }
        self.0.wake.notify_one();
    }
}

impl Promotions {
    /// An ADD starts: switches wait until it and its burst are over.
    pub fn add_started(&self) -> AddInFlight<'_> {
        if let Ok(mut i) = self.inner.lock() {
            i.in_flight += 1;
        }
        AddInFlight(self)
    }

    /// A port of sandbox `key` waits for its switch.
    pub fn queued(&self, key: &str) {
        if let Ok(mut i) = self.inner.lock() {
            i.queued_at
                .entry(key.to_string())
                .or_insert_with(Instant::now);
        }
        self.wake.notify_one();
    }

    /// How long no ADD has been in flight (`None`: one is).
    pub(crate) fn quiet_for(&self) -> Option<Duration> {
        let i = self.inner.lock().ok()?;
        if i.in_flight > 0 {
            return None;
        }
        Some(i.last_add.map_or(Duration::MAX, |t| t.elapsed()))
    }

    /// When `key` was queued (now, for one first seen here: a record read after a start).
    pub(crate) fn queued_at(&self, key: &str) -> Instant {
        self.inner
            .lock()
            .map(|mut i| {
                *i.queued_at
                    .entry(key.to_string())
                    .or_insert_with(Instant::now)
            })
            .unwrap_or_else(|_| Instant::now())
    }

    pub(crate) fn set_queued_at(&self, key: &str, at: Option<Instant>) {
        if let Ok(mut i) = self.inner.lock() {
            match at {
                Some(t) => i.queued_at.insert(key.to_string(), t),
                None => i.queued_at.remove(key),
            };
        }
    }

    /// Whether a switch may start now, given the oldest pending port's queue time.
    pub(crate) fn may_start(&self, oldest: Instant) -> bool {
        self.quiet_for().is_some_and(|q| q >= QUIET) || oldest.elapsed() >= MAX_DEFER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_wait_for_a_quiet_moment_but_not_forever() {
        let p = Promotions::default();
        let now = Instant::now();
        assert!(p.may_start(now), "no ADD ever: quiet");
        let g = p.add_started();
        assert!(!p.may_start(now), "an ADD in flight");
        let long_ago = now.checked_sub(MAX_DEFER).unwrap_or(now);
        assert!(
            p.may_start(long_ago) || long_ago == now,
            "the oldest waited MAX_DEFER"
        );
        drop(g);
        assert!(!p.may_start(Instant::now()), "an ADD just ended");
        p.queued("c/eth0");
        let first = p.queued_at("c/eth0");
        p.queued("c/eth0");
        assert_eq!(p.queued_at("c/eth0"), first, "queued once");
        p.set_queued_at("c/eth0", None);
        assert!(p.queued_at("c/eth0") >= first);
    }
}
