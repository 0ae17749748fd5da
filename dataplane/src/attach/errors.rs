//! [`ErrorList`]: every error of a teardown or GC that kept going past a failure (as
//! netavark's teardown does), answered as one CNI error.

use cni::CniError;

/// The errors collected so far.
#[derive(Debug, Default)]
pub struct ErrorList(Vec<CniError>);

impl ErrorList {
    pub fn push(&mut self, e: CniError) {
        self.0.push(e);
    }

    /// Keeps `r`'s error, if any.
    pub fn record(&mut self, r: Result<(), CniError>) {
        if let Err(e) = r {
            self.push(e);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Ok without errors; one error as it is; several as one error with the first one's
    /// code and every message, `; `-separated, counted.
    pub fn into_result(mut self) -> Result<(), CniError> {
        match self.0.len() {
            0 => Ok(()),
            1 => Err(self.0.remove(0)),
            n => {
                let msg = self
                    .0
                    .iter()
                    .map(|e| e.msg.as_str())
                    .collect::<Vec<_>>()
                    .join("; ");
                Err(CniError::new(self.0[0].code, format!("{n} errors: {msg}")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_is_reported() {
        assert!(ErrorList::default().into_result().is_ok());
        let mut l = ErrorList::default();
        l.record(Ok(()));
        l.record(Err(CniError::new(11, "port a")));
        l.push(CniError::new(5, "veth b"));
        assert_eq!(l.len(), 2);
        let e = l.into_result().expect_err("two");
        assert_eq!(e.code, 11);
        assert_eq!(e.msg, "2 errors: port a; veth b");
    }
}
