//! The HTTP side of the Octavia provider: one client per session, with the deadlines and the answer
//! size every request to a cloud has.
//!
//! The cloud is named by a tenant's `clouds.yaml` (Keystone's URL, and through Keystone's catalog
//! Octavia's and Neutron's), so it is not trusted to behave: connecting gives up after
//! [`CONNECT`], an answer that does not come within [`REQUEST`] is no answer, and at most
//! [`MAX_ANSWER`] bytes of an answer are read (a larger one fails its request instead of being held
//! in memory). A CA bundle from the Secret is used from memory; nothing is written to disk.

use std::time::Duration;

use http::Method;
use reqwest::{Certificate, Url};
use serde_json::Value;

/// How long connecting (TCP and TLS) may take.
pub const CONNECT: Duration = Duration::from_secs(5);
/// How long a request may wait for its whole answer.
pub const REQUEST: Duration = Duration::from_secs(15);
/// The largest answer read, in bytes: a Keystone catalog of a large public cloud is about 100 KB,
/// and Octavia's largest answer capi-lb asks for (the status tree of one load balancer, or the
/// members of one pool) is smaller.
pub const MAX_ANSWER: usize = 4 << 20;

/// An answer, read whole within the limits.
#[derive(Debug)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Keystone's `X-Subject-Token` (the token of a token request).
    pub subject_token: Option<String>,
    /// The body.
    pub body: Vec<u8>,
}

impl Answer {
    /// The body as JSON (`Null` when empty or not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

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
            .map(str::to_string)
            .unwrap_or_else(|| format!("HTTP {}", self.status))
    }

    /// Neutron's error type (`IpAddressGenerationFailure`, `ExternalNetworkNotFound`, ...).
    pub fn neutron_error(&self) -> Option<&str> {
        self.body
            .pointer("/NeutronError/type")
            .and_then(Value::as_str)
    }
}

/// Why a request has no answer.
#[derive(Debug)]
pub enum NoAnswer {
    /// Not sent, not connected, or the connection broke.
    Failed(String),
    /// Not connected within [`CONNECT`], or no whole answer within [`REQUEST`].
    TimedOut(String),
    /// The answer is larger than [`MAX_ANSWER`].
    TooLarge,
}

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoAnswer::Failed(why) => f.write_str(why),
            NoAnswer::TimedOut(why) => write!(
                f,
                "{why} (timed out: {} s to connect, {} s for the answer)",
                CONNECT.as_secs(),
                REQUEST.as_secs()
            ),
            NoAnswer::TooLarge => write!(
                f,
                "the answer is larger than {} MiB, the most capi-lb reads",
                MAX_ANSWER >> 20
            ),
        }
    }
}

/// The HTTP client of one session.
#[derive(Clone)]
pub struct Transport {
    client: reqwest::Client,
}

impl Transport {
    /// A client trusting the system's roots and `ca_bundle` (PEM), or, with `verify` false (the
    /// `clouds.yaml`'s `verify: false`), any certificate.
    pub fn new(ca_bundle: Option<&[u8]>, verify: bool) -> Result<Self, String> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(CONNECT)
            .timeout(REQUEST)
            .pool_max_idle_per_host(4)
            .pool_idle_timeout(Duration::from_secs(90))
            .redirect(reqwest::redirect::Policy::none());
        if let Some(pem) = ca_bundle {
            let certificates = Certificate::from_pem_bundle(pem)
                .map_err(|e| format!("the CA bundle is not PEM certificates: {e}"))?;
            if certificates.is_empty() {
                return Err("the CA bundle holds no certificate".to_string());
            }
            builder = builder.tls_certs_merge(certificates);
        }
        if !verify {
            builder = builder.tls_danger_accept_invalid_certs(true);
        }
        let client = builder
            .build()
            .map_err(|e| format!("no HTTP client: {e}"))?;
        Ok(Self { client })
    }

    /// Send `method url` with `token` (`X-Auth-Token`) and a JSON `body`; read the answer within
    /// the limits.
    pub async fn exchange(
        &self,
        method: Method,
        url: Url,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Answer, NoAnswer> {
        let mut request = self
            .client
            .request(method, url)
            .header(http::header::ACCEPT, "application/json");
        if let Some(token) = token {
            request = request.header("X-Auth-Token", token);
        }
        if let Some(body) = body {
            request = request
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(serde_json::to_vec(body).map_err(|e| NoAnswer::Failed(e.to_string()))?);
        }
        let mut response = request.send().await.map_err(failed)?;
        if response
            .content_length()
            .is_some_and(|n| n > MAX_ANSWER as u64)
        {
            return Err(NoAnswer::TooLarge);
        }
        let status = response.status().as_u16();
        let subject_token = response
            .headers()
            .get("X-Subject-Token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if body.len() + chunk.len() > MAX_ANSWER {
                return Err(NoAnswer::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Answer {
            status,
            subject_token,
            body,
        })
    }
}

/// A reqwest error with its causes (reqwest's own text is only the outermost).
fn failed(error: reqwest::Error) -> NoAnswer {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    if error.is_timeout() {
        NoAnswer::TimedOut(text)
    } else {
        NoAnswer::Failed(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_bundle_without_certificates_is_refused() {
        let Err(why) = Transport::new(Some(b"not a certificate"), true) else {
            panic!("a bundle without certificates was accepted");
        };
        assert!(why.contains("no certificate"), "{why}");
    }
}
