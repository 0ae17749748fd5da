//! Reporting Service problems: each new one (a part of a Service the controller skips) is
//! sent as a Warning event (`ServiceProblem`) on its Service, once, until it goes away
//! and comes back; so is what OVN cannot give a valid Service
//! ([`crate::services::ServiceInfo::limitations`]). The problems are logged when the
//! Service arrives ([`super::state`]).

use std::collections::BTreeSet;

use super::Controller;
use crate::source::Writer;

impl<W: Writer> Controller<W> {
    pub(super) async fn report_service_problems(&mut self) {
        let now: BTreeSet<(String, String, String)> = self
            .state
            .services
            .values()
            .flat_map(|s| {
                s.problems
                    .iter()
                    .cloned()
                    .chain(s.limitations())
                    .map(|p| (s.namespace.clone(), s.name.clone(), p))
            })
            .collect();
        let keys: BTreeSet<String> = now
            .iter()
            .map(|(ns, name, p)| format!("{ns}/{name}: {p}"))
            .collect();
        for (ns, name, p) in &now {
            if self
                .reported
                .service_problems
                .contains(&format!("{ns}/{name}: {p}"))
            {
                continue;
            }
            if let Err(e) = self.writer.service_event(ns, name, p).await {
                tracing::warn!(service = %format!("{ns}/{name}"), error = %e, "cannot record the Service event");
            }
        }
        self.reported.service_problems = keys;
    }
}
