//! The HTTP side of the Octavia provider: every request to Keystone, Octavia and Neutron goes
//! through the bounded client of [`crate::untrusted::http`] (the cloud is a tenant's choice), with
//! the limits [`crate::untrusted::OPENSTACK`]; an answer as the provider reads it is a [`Reply`].
//!
//! An answer's body stays bytes (within the byte cap and the value budget) until a reader asks
//! for the document it expects: Octavia's and Neutron's objects are parsed straight into the
//! typed documents of [`super::documents`] ([`Body::field`], [`Body::decode`]), the fields capi-lb
//! does not read skipped by the parser (never built into a value tree), and an error answer into
//! the few text fields it quotes ([`Reply::error`]), Keystone's token into its expiry and its
//! catalog's endpoints (`keystone::TokenDocument`), a version document into the one version capi-lb
//! uses (`versions::highest`, which visits its entries one at a time). No answer becomes a JSON
//! value tree.

use std::marker::PhantomData;

use bytes::Bytes;
use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::lenient::Text;
use super::stop::Stop;
use crate::error::ProviderError;
pub use crate::untrusted::Refused as NoAnswer;
pub use crate::untrusted::http::Transport;

/// An answer as the provider reads it: its status and its body.
#[derive(Clone, Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// The body, not parsed yet.
    pub body: Body,
}

/// An answer's body, as received (within the byte cap and the value budget).
#[derive(Clone, Debug, Default)]
pub struct Body(pub Bytes);

impl Body {
    /// The whole body as a `T` (unknown fields skipped while parsing); one that does not fit is a
    /// transient error naming `what`.
    pub fn decode<T: DeserializeOwned>(&self, what: &str) -> Result<T, Stop> {
        serde_json::from_slice(&self.0).map_err(|e| unexpected(what, &e.to_string()))
    }

    /// Field `key` of the body's top-level object as a `T`, every other field skipped while
    /// parsing (`None`: no such field, or a body that is not a JSON object); a field that does
    /// not fit is a transient error naming `what`.
    pub fn field<T: DeserializeOwned>(&self, key: &str, what: &str) -> Result<Option<T>, Stop> {
        if self.0.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Ok(None);
        }
        let mut deserializer = serde_json::Deserializer::from_slice(&self.0);
        deserializer
            .deserialize_map(Field::<T>(key, PhantomData))
            .map_err(|e| unexpected(what, &e.to_string()))
    }

    /// [`Body::field`] that must be there.
    pub fn required<T: DeserializeOwned>(&self, key: &str, what: &str) -> Result<T, Stop> {
        self.field(key, what)?
            .ok_or_else(|| unexpected(what, &format!("no `{key}`")))
    }
}

fn unexpected(what: &str, why: &str) -> Stop {
    Stop::Error(ProviderError::transient(format!(
        "unexpected Octavia answer to {what}: {why}"
    )))
}

/// The visitor of [`Body::field`]: one field kept, the others skipped.
struct Field<'k, T>(&'k str, PhantomData<T>);

impl<'de, T: DeserializeOwned> Visitor<'de> for Field<'_, T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "an object with `{}`", self.0)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<T>, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == self.0 && found.is_none() {
                found = Some(map.next_value::<T>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// What an error answer says, as far as capi-lb quotes it: Octavia's `faultstring`, a
/// `description` or `message`, Neutron's `NeutronError`. A field of another type is skipped.
#[derive(Debug, Default, Deserialize)]
struct Fault {
    #[serde(default)]
    faultstring: Text,
    #[serde(default)]
    description: Text,
    #[serde(default)]
    message: Text,
    #[serde(default, rename = "NeutronError")]
    neutron: Option<NeutronError>,
}

#[derive(Debug, Default, Deserialize)]
struct NeutronError {
    #[serde(default, rename = "type")]
    type_: Text,
    #[serde(default)]
    message: Text,
}

impl Reply {
    /// 2xx.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// What an error answer says, read once: its text (Octavia's `faultstring`, Neutron's
    /// `NeutronError.message`, ...; `HTTP <status>` when it says none) and Neutron's error type
    /// (`IpAddressGenerationFailure`, `ExternalNetworkNotFound`, ...).
    pub fn error(&self) -> ErrorAnswer {
        let fault: Fault = self.body.decode("an error").unwrap_or_default();
        let (neutron_text, neutron_type) = fault
            .neutron
            .map_or((None, None), |n| (n.message.0, n.type_.0));
        let text = [fault.faultstring, fault.description, fault.message]
            .into_iter()
            .find_map(|t| t.0)
            .or(neutron_text)
            .map(|t| quoted(&t))
            .unwrap_or_else(|| format!("HTTP {}", self.status));
        ErrorAnswer { text, neutron_type }
    }
}

/// What an error answer says ([`Reply::error`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorAnswer {
    /// Its text, quoted.
    pub text: String,
    /// Neutron's error type.
    pub neutron_type: Option<String>,
}

/// The fault text of an answer, as capi-lb quotes it (at most [`crate::untrusted::QUOTE_MAX`]).
fn quoted(text: &str) -> String {
    crate::untrusted::quote(text)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn body(text: &str) -> Body {
        Body(Bytes::from(text.to_string()))
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Record {
        id: String,
    }

    #[test]
    fn a_field_is_parsed_and_the_others_skipped() {
        let b = body(
            r#"{"junk": [1, {"a": [2, 3]}], "loadbalancer": {"id": "x", "more": [4]}, "z": "y"}"#,
        );
        let r: Option<Record> = b.field("loadbalancer", "get").unwrap();
        assert_eq!(r, Some(Record { id: "x".into() }));
        assert_eq!(b.field::<Record>("nope", "get").unwrap(), None);
        assert!(b.required::<Record>("nope", "get").is_err());
        // Not an object, or empty: nothing there.
        assert_eq!(
            body("").field::<Record>("loadbalancer", "get").unwrap(),
            None
        );
        assert_eq!(
            body("[1]").field::<Record>("loadbalancer", "get").unwrap(),
            None
        );
        assert_eq!(
            body("<html>")
                .field::<Record>("loadbalancer", "get")
                .unwrap(),
            None
        );
        // The field of the wrong shape is an error.
        assert!(
            body(r#"{"loadbalancer": 7}"#)
                .field::<Record>("loadbalancer", "get")
                .is_err()
        );
    }

    #[test]
    fn faults_are_read_whatever_else_the_answer_holds() {
        let text = |status, body_text: &str| {
            Reply {
                status,
                body: body(body_text),
            }
            .error()
            .text
        };
        assert_eq!(
            text(409, r#"{"faultstring": "busy", "debuginfo": null}"#),
            "busy"
        );
        assert_eq!(
            text(400, r#"{"message": {"nested": 1}, "description": "bad"}"#),
            "bad"
        );
        let neutron = Reply {
            status: 409,
            body: body(
                r#"{"NeutronError": {"type": "IpAddressInUse", "message": "in use", "detail": ""}}"#,
            ),
        }
        .error();
        assert_eq!(neutron.text, "in use");
        assert_eq!(neutron.neutron_type.as_deref(), Some("IpAddressInUse"));
        assert_eq!(text(503, "<html>"), "HTTP 503");
        assert_eq!(text(500, r#"{"faultstring": 5}"#), "HTTP 500");
    }
}
