//! Bounded waiting for a condition (no fixed sleeps).

use std::time::{Duration, Instant};

use crate::error::{LabError, Result};

/// Polls `check` every `interval` until it returns `Ok(Some(v))`, for at most `timeout`.
///
/// `check` returns `Ok(None)` for "not yet" (optionally recording a description of the last
/// observation in `last`, reported on timeout) and `Err` to abort the wait immediately.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    mut check: impl FnMut(&mut Option<String>) -> Result<Option<T>>,
) -> Result<T> {
    let start = Instant::now();
    let mut last = None;
    loop {
        if let Some(v) = check(&mut last)? {
            return Ok(v);
        }
        if start.elapsed() >= timeout {
            return Err(LabError::Timeout {
                what: what.to_string(),
                elapsed: start.elapsed(),
                last,
            });
        }
        std::thread::sleep(interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_value_once_ready() {
        let mut n = 0;
        let v = wait_for(
            "n>=3",
            Duration::from_secs(5),
            Duration::from_millis(1),
            |_| {
                n += 1;
                Ok((n >= 3).then_some(n))
            },
        )
        .expect("ready");
        assert_eq!(v, 3);
    }

    #[test]
    fn times_out_with_last_observation() {
        let err = wait_for::<()>(
            "never",
            Duration::from_millis(20),
            Duration::from_millis(5),
            |last| {
                *last = Some("still no".into());
                Ok(None)
            },
        )
        .expect_err("must time out");
        let msg = err.to_string();
        assert!(msg.contains("never") && msg.contains("still no"), "{msg}");
    }
}
