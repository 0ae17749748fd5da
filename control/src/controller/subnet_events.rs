//! Reporting Subnet problems: the reason a Subnet is refused (what its `Ready` condition
//! says: a bad spec, an `externalLogicalSwitch` the platform deleted or made another
//! network) is also sent as a Warning event (`SubnetInvalid`) on the Subnet, once per
//! change, so `kubectl get events` and alerting see it.

use super::Controller;
use crate::source::Writer;

impl<W: Writer> Controller<W> {
    /// A Warning event for each Subnet problem not reported yet (a Subnet is reported
    /// again when its problem changes, and once more if it comes back after a fix).
    pub(super) async fn report_subnet_problems(&mut self) {
        let now = self.addr.problems.clone();
        for (name, problem) in &now {
            if self.reported.subnet_problems.get(name) == Some(problem) {
                continue;
            }
            tracing::warn!(subnet = %name, problem = %problem, "Subnet refused");
            if let Err(e) = self.writer.subnet_event(name, problem).await {
                tracing::warn!(subnet = %name, error = %e, "cannot record the Subnet event");
            }
        }
        self.reported.subnet_problems = now;
    }
}
