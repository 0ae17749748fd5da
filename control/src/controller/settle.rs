//! Passes until the controller is quiet: what tests and benchmarks call "settled". The
//! controller's own writes (annotations, statuses) come back as events, so one pass is
//! rarely the end; a pass that writes nothing to the NB, to pods or to Subnets is.

use tokio::sync::mpsc::UnboundedReceiver;

use super::{Controller, ControllerError, SyncReport};
use crate::source::{Event, Writer};

impl SyncReport {
    /// Whether this pass wrote nothing: no NB transaction, no annotation, no status.
    pub fn wrote_nothing(&self) -> bool {
        self.nb.transactions == 0 && self.annotations_written == 0 && self.statuses_written == 0
    }
}

/// What it took to settle.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    /// Passes run, the quiet one included.
    pub passes: usize,
    /// NB transactions of all passes.
    pub transactions: usize,
    pub inserts: usize,
    pub updates: usize,
    pub deletes: usize,
}

impl Settled {
    /// NB rows written (inserted, updated, deleted) by all passes.
    pub fn rows_written(&self) -> usize {
        self.inserts + self.updates + self.deletes
    }
}

impl<W: Writer> Controller<W> {
    /// Applies the queued `events` and runs a pass, until a pass writes nothing; at most
    /// `max_passes` (then [`ControllerError::NotSettled`]).
    pub async fn settle(
        &mut self,
        events: &mut UnboundedReceiver<Event>,
        max_passes: usize,
    ) -> Result<Settled, ControllerError> {
        let mut done = Settled::default();
        for pass in 1..=max_passes {
            while let Ok(ev) = events.try_recv() {
                self.apply(ev);
            }
            let r = self.sync().await?;
            done.passes = pass;
            if r.wrote_nothing() {
                return Ok(done);
            }
            done.transactions += r.nb.transactions;
            done.inserts += r.nb.inserts;
            done.updates += r.nb.updates;
            done.deletes += r.nb.deletes;
        }
        Err(ControllerError::NotSettled(max_passes))
    }
}
