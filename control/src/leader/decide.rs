//! The acquire decision, pure: what the Lease says, when we saw it change, our clock.
//!
//! Expiry is judged like client-go: by the LOCAL monotonic time at which the record we
//! observed last changed (holder or renewTime), plus the lease duration. Remote timestamps
//! are never compared with our clock, so skew between nodes does not matter.

use std::time::{Duration, Instant};

/// The part of a Lease that tells who holds it and whether it moved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// `spec.holderIdentity`; `None` or empty: released.
    pub holder: Option<String>,
    /// `spec.renewTime` as the server returned it (compared for change only, never as time).
    pub renew_time: Option<String>,
    /// `spec.leaseDurationSeconds` as written by the holder.
    pub lease_duration: Option<Duration>,
    /// `spec.leaseTransitions`.
    pub transitions: i32,
}

impl Record {
    /// The holder, if any (an empty identity means released).
    pub fn holder(&self) -> Option<&str> {
        self.holder.as_deref().filter(|h| !h.is_empty())
    }
}

/// The record last observed and the local time at which it last changed.
#[derive(Clone, Debug)]
pub struct Observed {
    pub record: Record,
    pub at: Instant,
}

impl Observed {
    /// Updates the observation with `record` seen at `now`: the time moves only when the
    /// record changed (client-go's observedTime).
    pub fn update(prev: Option<Observed>, record: Record, now: Instant) -> Observed {
        match prev {
            Some(p)
                if p.record.holder == record.holder && p.record.renew_time == record.renew_time =>
            {
                Observed { record, at: p.at }
            }
            _ => Observed { record, at: now },
        }
    }
}

/// What to do with a Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Write ourselves as holder: the lease is free, expired or already ours.
    /// `transitions` is the value to write (incremented on a takeover).
    Acquire { renew: bool, transitions: i32 },
    /// Someone else holds a live lease.
    Standby { holder: String },
}

/// Decides over the observed Lease (`None`: absent), at local time `now`.
///
/// `default_duration` is ours, used when the holder wrote none.
pub fn decide(
    observed: Option<&Observed>,
    me: &str,
    now: Instant,
    default_duration: Duration,
) -> Decision {
    let Some(o) = observed else {
        return Decision::Acquire {
            renew: false,
            transitions: 0,
        };
    };
    match o.record.holder() {
        Some(h) if h == me => Decision::Acquire {
            renew: true,
            transitions: o.record.transitions,
        },
        Some(h) => {
            let duration = o.record.lease_duration.unwrap_or(default_duration);
            if now < o.at + duration {
                Decision::Standby {
                    holder: h.to_string(),
                }
            } else {
                Decision::Acquire {
                    renew: false,
                    transitions: o.record.transitions.saturating_add(1),
                }
            }
        }
        // released: a successor need not wait
        None => Decision::Acquire {
            renew: false,
            transitions: o.record.transitions.saturating_add(1),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_secs(15);

    fn rec(holder: &str, renew: &str) -> Record {
        Record {
            holder: Some(holder.into()),
            renew_time: Some(renew.into()),
            lease_duration: Some(Duration::from_secs(4)),
            transitions: 3,
        }
    }

    #[test]
    fn absent_lease_is_acquired() {
        assert_eq!(
            decide(None, "a", Instant::now(), D),
            Decision::Acquire {
                renew: false,
                transitions: 0
            }
        );
    }

    #[test]
    fn own_lease_is_renewed_without_a_transition() {
        let t0 = Instant::now();
        let o = Observed::update(None, rec("a", "r1"), t0);
        assert_eq!(
            decide(Some(&o), "a", t0 + Duration::from_secs(100), D),
            Decision::Acquire {
                renew: true,
                transitions: 3
            }
        );
    }

    #[test]
    fn live_foreign_lease_means_standby_until_it_stops_moving() {
        let t0 = Instant::now();
        let o = Observed::update(None, rec("b", "r1"), t0);
        let standby = Decision::Standby { holder: "b".into() };
        assert_eq!(
            decide(Some(&o), "a", t0 + Duration::from_secs(3), D),
            standby
        );
        // renewed at t0+3: the clock restarts from our observation
        let o = Observed::update(Some(o), rec("b", "r2"), t0 + Duration::from_secs(3));
        assert_eq!(
            decide(Some(&o), "a", t0 + Duration::from_secs(6), D),
            standby
        );
        // unchanged record: the observation time stays, and after 4 s it is expired
        let o = Observed::update(Some(o), rec("b", "r2"), t0 + Duration::from_secs(6));
        assert_eq!(o.at, t0 + Duration::from_secs(3));
        assert_eq!(
            decide(Some(&o), "a", t0 + Duration::from_secs(7), D),
            Decision::Acquire {
                renew: false,
                transitions: 4
            }
        );
    }

    #[test]
    fn remote_timestamps_are_not_compared_with_our_clock() {
        // a renewTime far in the past (skewed holder clock) still counts as live when it
        // just changed
        let t0 = Instant::now();
        let o = Observed::update(None, rec("b", "1970-01-01T00:00:00.000000Z"), t0);
        assert_eq!(
            decide(Some(&o), "a", t0 + Duration::from_millis(10), D),
            Decision::Standby { holder: "b".into() }
        );
    }

    #[test]
    fn released_lease_is_taken_at_once() {
        let t0 = Instant::now();
        let mut r = rec("", "r1");
        r.holder = Some(String::new());
        let o = Observed::update(None, r, t0);
        assert_eq!(
            decide(Some(&o), "a", t0, D),
            Decision::Acquire {
                renew: false,
                transitions: 4
            }
        );
    }

    #[test]
    fn default_duration_when_the_holder_wrote_none() {
        let t0 = Instant::now();
        let mut r = rec("b", "r1");
        r.lease_duration = None;
        let o = Observed::update(None, r, t0);
        assert!(matches!(
            decide(Some(&o), "a", t0 + Duration::from_secs(14), D),
            Decision::Standby { .. }
        ));
        assert!(matches!(
            decide(Some(&o), "a", t0 + D, D),
            Decision::Acquire { .. }
        ));
    }
}
