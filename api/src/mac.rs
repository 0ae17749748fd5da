//! The MAC address type, its one parser and its one formatting (`0a:58:0a:01:00:05`).

use serde::{Deserialize, Serialize};

/// A MAC address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Mac(pub [u8; 6]);

/// Lower-case hex bytes joined by `:`, the one spelling of a MAC in this project (also for
/// link-layer addresses of another length, as netlink reports them).
pub fn format_bytes(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

impl Mac {
    /// The six bytes.
    pub fn octets(self) -> [u8; 6] {
        self.0
    }
}

impl From<[u8; 6]> for Mac {
    fn from(b: [u8; 6]) -> Self {
        Mac(b)
    }
}

impl std::fmt::Display for Mac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_bytes(&self.0))
    }
}

/// Why a string is not a usable MAC address.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid MAC address {0:?}: expected six hex bytes like 0a:58:0a:00:00:05, unicast")]
pub struct BadMac(pub String);

impl std::str::FromStr for Mac {
    type Err = BadMac;
    /// Six two-digit hex bytes separated by `:` or `-`; a multicast address is refused (it
    /// cannot be a port's address).
    fn from_str(s: &str) -> Result<Self, BadMac> {
        let parts: Vec<&str> = s.split([':', '-']).collect();
        if parts.len() != 6 {
            return Err(BadMac(s.to_string()));
        }
        let mut b = [0u8; 6];
        for (i, p) in parts.iter().enumerate() {
            if p.len() != 2 {
                return Err(BadMac(s.to_string()));
            }
            b[i] = u8::from_str_radix(p, 16).map_err(|_| BadMac(s.to_string()))?;
        }
        // multicast bit set: not usable as a port address
        if b[0] & 1 == 1 {
            return Err(BadMac(s.to_string()));
        }
        Ok(Mac(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_spelling() {
        let m: Mac = "0A-58-0a-01-00-05".parse().unwrap();
        assert_eq!(m.to_string(), "0a:58:0a:01:00:05");
        assert_eq!(format_bytes(&[0xde, 0xad]), "de:ad");
        assert!("01:00:5e:00:00:01".parse::<Mac>().is_err(), "multicast");
        assert!("0a:58:0a:01:00".parse::<Mac>().is_err());
        assert!("0a:58:0a:01:00:5".parse::<Mac>().is_err());
    }
}
