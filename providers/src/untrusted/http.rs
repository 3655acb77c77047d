//! The HTTP client of a tenant's cloud (Keystone, Octavia, Neutron): reqwest with no retries and no
//! redirects, connecting within [`Limits::connect`], the whole answer within [`Limits::answer`]
//! (reqwest's total timeout runs from connecting to the body's last byte), at most
//! [`Limits::bytes`] read (checked while reading) and within the value budget before it is parsed.
//! A CA bundle from the tenant's Secret is used from memory; nothing is written to disk.

use bytes::Bytes;
use http::Method;
use reqwest::{Certificate, Url};
use serde_json::Value;

use super::{Limits, Refused, budget};

/// An answer, read whole within the limits.
#[derive(Debug)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Keystone's `X-Subject-Token` (the token of a token request).
    pub subject_token: Option<String>,
    /// The body, within the byte cap and the value budget.
    pub body: Bytes,
}

impl Answer {
    /// The body as JSON (`Null` when empty or not JSON); bounded by the value budget it passed.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The body parsed into `T` (unknown fields dropped while parsing).
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }
}

/// A bounded HTTP client of one tenant's cloud.
#[derive(Clone)]
pub struct Transport {
    client: reqwest::Client,
    limits: Limits,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Transport {
    /// A client within `limits`, trusting the system's roots and `ca_bundle` (PEM), or, with
    /// `verify` false (a `clouds.yaml`'s `verify: false`), any certificate.
    pub fn new(limits: Limits, ca_bundle: Option<&[u8]>, verify: bool) -> Result<Self, String> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(limits.connect)
            .timeout(limits.answer)
            .pool_max_idle_per_host(4)
            .pool_idle_timeout(std::time::Duration::from_secs(90))
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never());
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
        Ok(Self { client, limits })
    }

    /// The limits of its requests.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Send `method url` with `token` (`X-Auth-Token`) and a JSON `body`; read the answer within
    /// the limits.
    pub async fn exchange(
        &self,
        method: Method,
        url: Url,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Answer, Refused> {
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
                .body(serde_json::to_vec(body).map_err(|e| Refused::Failed(e.to_string()))?);
        }
        let mut response = request.send().await.map_err(|e| failed(e, &self.limits))?;
        if response
            .content_length()
            .is_some_and(|n| n > self.limits.bytes as u64)
        {
            return Err(Refused::TooLarge(self.limits.bytes));
        }
        let status = response.status().as_u16();
        let subject_token = response
            .headers()
            .get("X-Subject-Token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| failed(e, &self.limits))?
        {
            if body.len() + chunk.len() > self.limits.bytes {
                return Err(Refused::TooLarge(self.limits.bytes));
            }
            body.extend_from_slice(&chunk);
        }
        budget::check(&body, &self.limits)?;
        Ok(Answer {
            status,
            subject_token,
            body: Bytes::from(body),
        })
    }
}

/// A reqwest error with its causes (reqwest's own text is only the outermost).
fn failed(error: reqwest::Error, limits: &Limits) -> Refused {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    if error.is_timeout() {
        Refused::TimedOut(format!(
            "{text} (timed out: {} s to connect, {} s for the whole answer)",
            limits.connect.as_secs(),
            limits.answer.as_secs()
        ))
    } else {
        Refused::Failed(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_bundle_without_certificates_is_refused() {
        let Err(why) = Transport::new(super::super::OPENSTACK, Some(b"not a certificate"), true)
        else {
            panic!("a bundle without certificates was accepted");
        };
        assert!(why.contains("no certificate"), "{why}");
    }
}
