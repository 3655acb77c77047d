//! The HTTP side of the Octavia provider: every request to Keystone, Octavia and Neutron goes
//! through the bounded client of [`crate::untrusted::http`] (the cloud is a tenant's choice), with
//! the limits [`crate::untrusted::OPENSTACK`]; an answer as the provider reads it is a [`Reply`].

use serde_json::Value;

pub use crate::untrusted::Refused as NoAnswer;
pub use crate::untrusted::http::Transport;

/// An answer as the provider reads it: its status and its JSON body.
#[derive(Clone, Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Parsed JSON body (`Null` when empty or not JSON).
    pub body: Value,
}

impl Reply {
    /// 2xx.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The error text (Octavia's `faultstring`, Neutron's `NeutronError.message`, ...).
    pub fn fault(&self) -> String {
        ["faultstring", "description", "message"]
            .iter()
            .find_map(|k| self.body.get(k).and_then(Value::as_str))
            .or_else(|| {
                self.body
                    .pointer("/NeutronError/message")
                    .and_then(Value::as_str)
            })
            .map(quoted)
            .unwrap_or_else(|| format!("HTTP {}", self.status))
    }

    /// Neutron's error type (`IpAddressGenerationFailure`, `ExternalNetworkNotFound`, ...).
    pub fn neutron_error(&self) -> Option<&str> {
        self.body
            .pointer("/NeutronError/type")
            .and_then(Value::as_str)
    }
}

/// The fault text of an answer, as capi-lb quotes it (at most [`crate::untrusted::QUOTE_MAX`]).
fn quoted(text: &str) -> String {
    crate::untrusted::quote(text)
}
