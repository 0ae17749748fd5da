//! Whether a peer is reachable, from the [pinger](super)'s rounds: per peer and target
//! kind (its tunnel endpoint, its pods), unreachable after [`LOST_ROUNDS`] rounds in a
//! row where nothing of that kind answered, reachable again at the first answer. Only the
//! changes are reported (one event each, not one per round).

use std::collections::{BTreeMap, VecDeque};

/// Rounds in a row with no answer before a peer's target kind is unreachable (one lost
/// round is a blip, not an outage).
pub const LOST_ROUNDS: u32 = 3;

/// Probes kept per series for the loss ratio.
pub const WINDOW: usize = 20;

/// What is probed on a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// Its tunnel endpoint, over the underlay.
    Node,
    /// The sampled pods of its node, over OVN and the tunnel.
    Pod,
}

impl Target {
    pub fn as_str(self) -> &'static str {
        match self {
            Target::Node => "node",
            Target::Pod => "pod",
        }
    }
}

/// A change of a peer's reachability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Unreachable,
    Reachable,
}

#[derive(Debug, Default)]
struct State {
    lost_rounds: u32,
    down: bool,
}

/// The reachability of every (peer, target) seen.
#[derive(Debug, Default)]
pub struct Verdicts {
    states: BTreeMap<(String, Target), State>,
}

impl Verdicts {
    /// Records one round of `target` on `peer` (`answered` of `sent` probes); the change
    /// it makes, if any. A round that sent nothing (no pod to probe) changes nothing.
    pub fn round(
        &mut self,
        peer: &str,
        target: Target,
        answered: usize,
        sent: usize,
    ) -> Option<Change> {
        if sent == 0 {
            return None;
        }
        let s = self.states.entry((peer.to_string(), target)).or_default();
        if answered > 0 {
            s.lost_rounds = 0;
            return std::mem::take(&mut s.down).then_some(Change::Reachable);
        }
        s.lost_rounds = s.lost_rounds.saturating_add(1);
        (s.lost_rounds == LOST_ROUNDS && !s.down).then(|| {
            s.down = true;
            Change::Unreachable
        })
    }

    /// Whether `target` on `peer` is reachable (`None`: never probed).
    pub fn reachable(&self, peer: &str, target: Target) -> Option<bool> {
        self.states
            .get(&(peer.to_string(), target))
            .map(|s| !s.down)
    }

    /// Forgets the peers not in `keep` (gone from the cluster).
    pub fn retain(&mut self, keep: &[&str]) {
        self.states.retain(|(p, _), _| keep.contains(&p.as_str()));
    }
}

/// The last [`WINDOW`] results of one series (true: answered).
#[derive(Debug, Default)]
pub struct Window(VecDeque<bool>);

impl Window {
    pub fn push(&mut self, answered: bool) {
        if self.0.len() == WINDOW {
            self.0.pop_front();
        }
        self.0.push_back(answered);
    }

    /// The share of lost probes (0 with none).
    pub fn loss(&self) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.iter().filter(|a| !**a).count() as f64 / self.0.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreachable_after_three_silent_rounds_and_reachable_at_the_first_answer() {
        let mut v = Verdicts::default();
        assert_eq!(v.round("n2", Target::Pod, 1, 2), None);
        assert_eq!(v.reachable("n2", Target::Pod), Some(true));
        assert_eq!(v.round("n2", Target::Pod, 0, 2), None);
        assert_eq!(v.round("n2", Target::Pod, 0, 2), None);
        // a round with nothing to probe neither counts nor resets
        assert_eq!(v.round("n2", Target::Pod, 0, 0), None);
        assert_eq!(v.round("n2", Target::Pod, 0, 2), Some(Change::Unreachable));
        assert_eq!(v.reachable("n2", Target::Pod), Some(false));
        // reported once, not per round
        assert_eq!(v.round("n2", Target::Pod, 0, 2), None);
        // the other target kind is its own series
        assert_eq!(v.reachable("n2", Target::Node), None);
        assert_eq!(v.round("n2", Target::Node, 2, 2), None);
        assert_eq!(v.round("n2", Target::Pod, 1, 2), Some(Change::Reachable));
        assert_eq!(v.round("n2", Target::Pod, 1, 2), None);
        // a blip of two rounds is no outage
        v.round("n2", Target::Pod, 0, 2);
        v.round("n2", Target::Pod, 0, 2);
        assert_eq!(v.round("n2", Target::Pod, 2, 2), None);
        v.retain(&["n3"]);
        assert_eq!(v.reachable("n2", Target::Node), None);
    }

    #[test]
    fn the_loss_ratio_covers_the_last_window() {
        let mut w = Window::default();
        assert_eq!(w.loss(), 0.0);
        for _ in 0..WINDOW {
            w.push(false);
        }
        assert_eq!(w.loss(), 1.0);
        for _ in 0..WINDOW / 2 {
            w.push(true);
        }
        assert_eq!(w.loss(), 0.5);
    }
}
