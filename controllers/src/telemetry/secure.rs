//! Secure metrics (`--metrics-secure=true`): `/metrics` over HTTPS, answered only to a bearer token
//! the Kubernetes API authenticates (TokenReview) and authorizes for `get` on the non-resource URL
//! `/metrics` (SubjectAccessReview), as controller-runtime's secure metrics and kube-rbac-proxy do.
//! The certificate is the one in `--metrics-cert-dir` (`tls.crt`, `tls.key`), or one generated at
//! start (self-signed, for `localhost`: scrapers of in-cluster controllers skip its verification, as
//! with controller-runtime's). `/livez` and `/readyz` on the same listener stay open (the kubelet's
//! probes carry no token).
//!
//! A token the authorizer does not remember costs the API a TokenReview, so such reviews are
//! rationed (`REVIEWS_PER_SECOND` on average, bursts of `REVIEW_BURST`): beyond that a request is
//! answered 429 without asking the API, so a flood of made-up tokens cannot turn into a flood of
//! TokenReviews. A scraper whose token was allowed before is re-reviewed outside the ration, so a
//! flood does not lock it out.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// The path and verb a scraper must be allowed (`nonResourceURLs: ["/metrics"]`, `get`).
pub const METRICS_PATH: &str = "/metrics";

/// How long an answer of the API about a token is reused: a scraper every 15 s costs two reviews a
/// minute, and a revoked permission takes effect within this.
const ALLOWED_FOR: Duration = Duration::from_secs(60);
const DENIED_FOR: Duration = Duration::from_secs(10);
/// Tokens remembered at most (a flood of made-up tokens costs reviews, never memory).
const REMEMBERED: usize = 1024;
/// A TLS handshake not done within this is dropped.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// Reviews of tokens not remembered as allowed, per second on average, and at most at once.
const REVIEWS_PER_SECOND: f64 = 5.0;
const REVIEW_BURST: f64 = 20.0;

/// A token bucket: `REVIEW_BURST` reviews at once, refilled at `REVIEWS_PER_SECOND`.
#[derive(Debug)]
struct Ration {
    left: f64,
    at: Instant,
}

impl Ration {
    fn full(now: Instant) -> Self {
        Self {
            left: REVIEW_BURST,
            at: now,
        }
    }

    /// Take one review at `now`, if one is left.
    fn take(&mut self, now: Instant) -> bool {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * REVIEWS_PER_SECOND;
        self.left = (self.left + refill).min(REVIEW_BURST);
        self.at = now;
        if self.left >= 1.0 {
            self.left -= 1.0;
            true
        } else {
            false
        }
    }
}

/// What the API says about a bearer token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Authenticated and allowed to get `/metrics`.
    Allowed,
    /// Not a token the API authenticates.
    Unauthenticated,
    /// Authenticated as this user, who may not get `/metrics`.
    Forbidden(String),
    /// The API could not be asked (the answer is not cached).
    Unavailable(String),
    /// Not asked: too many unknown tokens were reviewed lately.
    Throttled,
}

/// Asks the Kubernetes API who a token is and whether they may read `/metrics`, remembering the
/// answers for a while.
#[derive(Clone)]
pub struct Authorizer {
    client: kube::Client,
    remembered: Arc<Mutex<HashMap<String, (Instant, Verdict)>>>,
    ration: Arc<Mutex<Ration>>,
}

impl Authorizer {
    /// An authorizer asking through `client` (capi-lb's own: it needs `create` on tokenreviews and
    /// subjectaccessreviews).
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            remembered: Arc::default(),
            ration: Arc::new(Mutex::new(Ration::full(Instant::now()))),
        }
    }

    /// Who `token` is (TokenReview), if the API authenticates it.
    pub async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, String> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..Default::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("TokenReview: {e}"))?;
        Ok(answer
            .status
            .filter(|s| s.authenticated == Some(true))
            .and_then(|s| s.user))
    }

    /// Whether `user` may get `/metrics` (SubjectAccessReview).
    pub async fn authorize(&self, user: &UserInfo) -> Result<bool, String> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                uid: user.uid.clone(),
                groups: user.groups.clone(),
                extra: user.extra.clone(),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(METRICS_PATH.to_string()),
                    verb: Some("get".to_string()),
                }),
                resource_attributes: None,
            },
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("SubjectAccessReview: {e}"))?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }

    /// The verdict on `token`: remembered, or asked of the API.
    pub async fn verdict(&self, token: &str) -> Verdict {
        let mut was_allowed = false;
        if let Ok(remembered) = self.remembered.lock()
            && let Some((at, verdict)) = remembered.get(token)
        {
            let fresh = match verdict {
                Verdict::Allowed => ALLOWED_FOR,
                _ => DENIED_FOR,
            };
            if at.elapsed() < fresh {
                return verdict.clone();
            }
            was_allowed = *verdict == Verdict::Allowed;
        }
        // A scraper's token is re-reviewed whatever the ration says; any other costs a review of it.
        let rationed = !was_allowed
            && self
                .ration
                .lock()
                .map_or(true, |mut ration| !ration.take(Instant::now()));
        if rationed {
            return Verdict::Throttled;
        }
        let verdict = match self.authenticate(token).await {
            Err(e) => return Verdict::Unavailable(e),
            Ok(None) => Verdict::Unauthenticated,
            Ok(Some(user)) => match self.authorize(&user).await {
                Err(e) => return Verdict::Unavailable(e),
                Ok(true) => Verdict::Allowed,
                Ok(false) => Verdict::Forbidden(user.username.unwrap_or_default()),
            },
        };
        if let Ok(mut remembered) = self.remembered.lock() {
            if remembered.len() >= REMEMBERED {
                // Forget the stale answers, then the refusals, and only then the scrapers.
                remembered.retain(|_, (at, verdict)| match verdict {
                    Verdict::Allowed => at.elapsed() < ALLOWED_FOR,
                    _ => at.elapsed() < DENIED_FOR,
                });
                if remembered.len() >= REMEMBERED {
                    remembered.retain(|_, (_, verdict)| *verdict == Verdict::Allowed);
                }
                if remembered.len() >= REMEMBERED {
                    remembered.clear();
                }
            }
            remembered.insert(token.to_string(), (Instant::now(), verdict.clone()));
        }
        verdict
    }
}

/// The middleware in front of `/metrics`: a bearer token the API authenticates and authorizes,
/// else 401 (no or unknown token), 403 (not allowed) or 503 (the API could not be asked).
pub async fn require_reader(
    State(authorizer): State<Authorizer>,
    request: Request,
    next: Next,
) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty());
    let Some(token) = token else {
        return unauthorized();
    };
    match authorizer.verdict(token).await {
        Verdict::Allowed => next.run(request).await,
        Verdict::Unauthenticated => unauthorized(),
        Verdict::Forbidden(user) => (
            StatusCode::FORBIDDEN,
            format!("{user} may not get {METRICS_PATH}\n"),
        )
            .into_response(),
        Verdict::Throttled => {
            tracing::debug!("metrics request refused: too many unknown tokens reviewed lately");
            (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, "1")],
                "too many unknown tokens lately; retry later\n",
            )
                .into_response()
        }
        Verdict::Unavailable(e) => {
            tracing::warn!(error = %e, "metrics request not authorized: the API could not be asked");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the Kubernetes API could not review the token\n",
            )
                .into_response()
        }
    }
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "a bearer token allowed to get /metrics is required\n",
    )
        .into_response()
}

/// The TLS settings: the certificate and key in `cert_dir` (`tls.crt`, `tls.key`, as a
/// `kubernetes.io/tls` Secret mounts them), or a self-signed certificate for `localhost`.
pub fn server_config(cert_dir: Option<&Path>) -> Result<Arc<ServerConfig>, String> {
    let (chain, key) = match cert_dir {
        Some(dir) => {
            let cert = dir.join("tls.crt");
            let key = dir.join("tls.key");
            let chain = CertificateDer::pem_file_iter(&cert)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("{}: {e}", cert.display()))?;
            let key = PrivateKeyDer::from_pem_file(&key)
                .map_err(|e| format!("{}: {e}", key.display()))?;
            (chain, key)
        }
        None => {
            let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
                .map_err(|e| format!("generating a self-signed certificate: {e}"))?;
            let key = PrivateKeyDer::try_from(generated.signing_key.serialize_der())
                .map_err(|e| format!("the generated key: {e}"))?;
            (vec![generated.cert.der().clone()], key)
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map(Arc::new)
        .map_err(|e| format!("the metrics certificate: {e}"))
}

/// TLS handshakes of the metrics listener in progress at a time.
pub const MAX_HANDSHAKES: usize = 64;

/// A TCP listener whose connections are served over TLS. Handshakes run concurrently, at most
/// [`MAX_HANDSHAKES`] (a client that never finishes one holds nothing but its own connection, for
/// at most 10 s; the next one waits for a place).
pub struct TlsListener {
    address: SocketAddr,
    accepted: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    task: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Serve `tcp`'s connections with `config`.
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> std::io::Result<Self> {
        let address = tcp.local_addr()?;
        let (sender, accepted) = mpsc::channel(16);
        let acceptor = TlsAcceptor::from(config);
        // Handshakes in progress at a time (each ends by HANDSHAKE).
        let handshakes = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
        let task = tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::debug!(error = %e, "metrics listener: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if sender.is_closed() {
                    return;
                }
                // At most MAX_HANDSHAKES at a time: the next connection waits to be handshaken
                // (and the ones after it in the kernel's backlog).
                let Ok(handshaking) = handshakes.clone().acquire_owned().await else {
                    return;
                };
                let (acceptor, sender) = (acceptor.clone(), sender.clone());
                tokio::spawn(async move {
                    let _handshaking = handshaking;
                    match tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = sender.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self {
            address,
            accepted,
            task,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(accepted) => accepted,
            // The accepting task is gone: no connection will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reviews_are_rationed_to_a_burst_then_the_rate() {
        let start = Instant::now();
        let mut ration = Ration::full(start);
        let burst = (0..100).filter(|_| ration.take(start)).count();
        assert_eq!(burst as f64, REVIEW_BURST, "a burst at once");
        assert!(!ration.take(start), "nothing left at once");
        // One second later, the rate's worth: no more.
        let later = start + Duration::from_secs(1);
        let refilled = (0..100).filter(|_| ration.take(later)).count();
        assert_eq!(refilled as f64, REVIEWS_PER_SECOND);
        // Idle for long: never more than a burst.
        let much_later = later + Duration::from_secs(3600);
        let capped = (0..100).filter(|_| ration.take(much_later)).count();
        assert_eq!(capped as f64, REVIEW_BURST);
    }

    #[test]
    fn a_self_signed_certificate_is_made_without_a_directory() {
        crate::install_crypto_provider();
        assert!(server_config(None).is_ok());
        let missing = server_config(Some(Path::new("/nonexistent-capi-lb-certs")));
        assert!(
            missing.is_err_and(|e| e.contains("/nonexistent-capi-lb-certs/tls.crt")),
            "a missing certificate is named"
        );
    }
}
