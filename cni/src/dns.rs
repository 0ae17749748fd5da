//! The CNI `dns` object, shared by network configs ([`crate::types`]) and results
//! ([`crate::result`]).

use serde::{Deserialize, Serialize};

/// DNS settings (network config `dns` and result `dns`). All fields are optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Dns {
    pub fn is_empty(&self) -> bool {
        self == &Dns::default()
    }
}
