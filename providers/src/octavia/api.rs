//! The OpenStack side of the Octavia provider: credentials from a Secret, Keystone sessions (a
//! token from Keystone v3, the catalog in it, a new token before the old one expires and after a
//! 401), Octavia API version detection, and one metered request path that turns HTTP answers into
//! what the provider does next (done, wait and look again, back off, or report).
//!
//! Every request goes through the session's bounded [`Transport`]: the cloud is a tenant's choice
//! and is not trusted to answer in time or in size. (The `openstack_sdk` crate reads the
//! `clouds.yaml`; its HTTP client reads answers whole and cannot be given another, so capi-lb sends
//! its few Keystone, Octavia and Neutron requests itself.)

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::Method;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use openstack_sdk::config::CloudConfig;
use reqwest::Url;
use serde_json::Value;

pub use super::credentials::CredentialsRef;
use super::credentials::cloud_config;
pub use super::http::{Body, Reply};
use super::http::{NoAnswer, Transport};
use super::keystone;
use super::reason;
use super::stop::{Stop, wait};
use super::versions::{self, Listed};
use crate::error::ProviderError;
use crate::observe::{ApiCall, ApiObserver};

/// An Octavia API version (`2.N`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ApiVersion(pub u32, pub u32);

impl ApiVersion {
    /// Tags on every object (`tags`, `tags` filters).
    pub const TAGS: ApiVersion = ApiVersion(2, 5);
    /// Listener `allowed_cidrs`.
    pub const ALLOWED_CIDRS: ApiVersion = ApiVersion(2, 12);
    /// Load balancer `availability_zone`.
    pub const AVAILABILITY_ZONES: ApiVersion = ApiVersion(2, 14);

    /// The highest `v2.N` of Octavia's version document (the highest v2 it lists).
    pub fn of(listed: &Listed) -> Option<Self> {
        listed.highest_minor.map(|minor| ApiVersion(2, minor))
    }
}

impl std::fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SessionKey {
    credentials: CredentialsRef,
    /// Changes whenever the Secret changes, so edited credentials take effect at once.
    secret_version: String,
}

/// An authenticated session with a cloud's Octavia.
pub struct Session {
    transport: Transport,
    /// The token request, for a new token (it holds the secret; never logged).
    token_request: keystone::TokenRequest,
    token: Mutex<Token>,
    /// The cloud's interface and region, for finding Neutron in the catalog.
    interface: Option<String>,
    region: Option<String>,
    /// Octavia's v2 base URL.
    octavia: Url,
    /// Neutron's v2.0 base URL, found on first use (only floating IPs need it).
    network: tokio::sync::OnceCell<Url>,
    /// The cloud name, for messages.
    pub cloud: String,
    /// The detected Octavia API version.
    pub version: ApiVersion,
}

/// A Keystone token and what came with it.
#[derive(Clone)]
struct Token {
    value: Arc<str>,
    /// When Keystone says it expires (none: it did not say).
    expires: Option<jiff::Timestamp>,
    /// The token document (`{"token": {"catalog": ...}}`).
    document: Arc<Value>,
}

/// How long before its expiry a token is replaced.
const RENEW_BEFORE: Duration = Duration::from_secs(300);

/// The most sessions kept (each a token and the catalog entries the provider reads, a few KiB):
/// the credentials references, with their free-text region, are the tenants' to write.
pub const MAX_SESSIONS: usize = 256;
/// A session not used for this long is dropped (its token is asked for again when needed).
pub const SESSION_IDLE: Duration = Duration::from_secs(3600);

/// The sessions the provider holds, one per set of credentials, bounded by [`MAX_SESSIONS`] and
/// [`SESSION_IDLE`] ([`crate::bounded::make_room`]).
#[derive(Default)]
pub struct Sessions {
    /// Which Secrets may be read as credentials.
    pub(super) policy: crate::entry::CredentialsPolicy,
    sessions: Mutex<HashMap<SessionKey, (Instant, Arc<Session>)>>,
    /// The session each set of credentials resolved to, and when its Secret was last read: the
    /// calls of one reconcile (`ensure`, then `converge_members`) read the Secret once.
    recent: Mutex<HashMap<CredentialsRef, (Instant, Arc<Session>)>>,
}

/// How long a Secret read serves further calls.
const SECRET_FRESH: Duration = Duration::from_secs(5);

impl Sessions {
    /// A session for `credentials`: reads the Secret (its resourceVersion decides whether a cached
    /// session is still valid; a read serves the calls of the next 5 s), then authenticates with
    /// Keystone and finds Octavia in the catalog.
    pub async fn get(
        &self,
        client: &kube::Client,
        credentials: &CredentialsRef,
        observer: Option<&dyn ApiObserver>,
    ) -> Result<Arc<Session>, Stop> {
        if let Ok(recent) = self.recent.lock()
            && let Some((at, session)) = recent.get(credentials)
            && at.elapsed() < SECRET_FRESH
            && !session.expiring()
        {
            return Ok(session.clone());
        }
        let session = self.read_and_connect(client, credentials, observer).await?;
        if let Ok(mut recent) = self.recent.lock() {
            let now = Instant::now();
            crate::bounded::make_room(&mut recent, MAX_SESSIONS, SECRET_FRESH, now, |(at, _)| *at);
            recent.insert(credentials.clone(), (now, session.clone()));
        }
        Ok(session)
    }

    async fn read_and_connect(
        &self,
        client: &kube::Client,
        credentials: &CredentialsRef,
        observer: Option<&dyn ApiObserver>,
    ) -> Result<Arc<Session>, Stop> {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &credentials.namespace);
        let secret = secrets.get_opt(&credentials.secret).await.map_err(|e| {
            Stop::Error(ProviderError::transient(format!(
                "reading Secret {}/{}: {e}",
                credentials.namespace, credentials.secret
            )))
        })?;
        let Some(secret) = secret else {
            return Err(wait(
                reason::CREDENTIALS_NOT_FOUND,
                format!(
                    "Secret {}/{} with the clouds.yaml does not exist",
                    credentials.namespace, credentials.secret
                ),
            ));
        };
        if let Some(message) = self.policy.refuses(&secret) {
            return Err(wait(
                capi_lb_api::constants::reason::CREDENTIALS_NOT_ALLOWED,
                message,
            ));
        }
        let key = SessionKey {
            credentials: credentials.clone(),
            secret_version: secret.metadata.resource_version.clone().unwrap_or_default(),
        };
        if let Ok(mut sessions) = self.sessions.lock()
            && let Some((used, session)) = sessions.get_mut(&key)
            && !session.expiring()
        {
            *used = Instant::now();
            return Ok(session.clone());
        }
        let (config, ca_bundle) = cloud_config(&secret, credentials)?;
        let session =
            Arc::new(connect(&config, ca_bundle.as_deref(), credentials, observer).await?);
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.retain(|k, _| k.credentials != key.credentials);
            let now = Instant::now();
            crate::bounded::make_room(&mut sessions, MAX_SESSIONS, SESSION_IDLE, now, |(at, _)| {
                *at
            });
            sessions.insert(key, (now, session.clone()));
        }
        Ok(session)
    }
}

/// A Keystone answer that is not a token: refused credentials wait for the user, anything else is
/// the cloud's trouble and backed off.
fn auth_failure(cloud: &str, status: u16, fault: &str) -> Stop {
    let what =
        format!("cloud {cloud}: Keystone answered the token request with HTTP {status}: {fault}");
    match status {
        400 | 401 | 403 | 404 => wait(reason::AUTHENTICATION_FAILED, what),
        _ => Stop::Error(ProviderError::transient(what)),
    }
}

/// A request that got no usable answer: a broken connection and a time-out (with a reason of its
/// own) are backed off, an answer beyond the size limit is reported with its own reason.
fn no_answer(cloud: &str, what: &str, why: NoAnswer) -> Stop {
    match why {
        NoAnswer::TooLarge(_) | NoAnswer::TooComplex(_) => wait(
            reason::ANSWER_TOO_LARGE,
            format!("cloud {cloud}: {what}: {why}"),
        ),
        NoAnswer::TimedOut(_) => Stop::Error(ProviderError::TimedOut {
            message: format!("cloud {cloud}: {what}: no answer: {why}"),
        }),
        NoAnswer::Failed(_) => Stop::Error(ProviderError::transient(format!(
            "cloud {cloud}: {what}: no answer: {why}"
        ))),
    }
}

/// Ask Keystone for a token.
async fn authenticate(
    transport: &Transport,
    request: &keystone::TokenRequest,
    cloud: &str,
    observer: Option<&dyn ApiObserver>,
) -> Result<Token, Stop> {
    let started = Instant::now();
    let answer = transport
        .exchange(Method::POST, request.url.clone(), None, Some(&request.body))
        .await;
    if let Some(observer) = observer {
        observer.observe(&ApiCall {
            service: "identity",
            operation: "token.create",
            status: answer.as_ref().ok().map(|a| a.status),
            duration: started.elapsed(),
        });
    }
    let answer = answer.map_err(|why| no_answer(cloud, "Keystone token request", why))?;
    let Some(value) = answer
        .subject_token
        .filter(|_| (200..300).contains(&answer.status))
    else {
        let fault = Reply {
            status: answer.status,
            body: Body(answer.body.clone()),
        }
        .error()
        .text;
        return Err(auth_failure(cloud, answer.status, &fault));
    };
    // A document of another shape reads as an empty one: the catalog then has no endpoint, which
    // the session reports with its reason.
    let document: keystone::TokenDocument = Body(answer.body.clone())
        .decode("token.create")
        .unwrap_or_default();
    let expires = document.expires_at().and_then(|t| t.parse().ok());
    Ok(Token {
        value: value.into(),
        expires,
        // Only what the provider reads of it is kept for the session's life.
        document: Arc::new(document.kept()),
    })
}

async fn connect(
    config: &CloudConfig,
    ca_bundle: Option<&[u8]>,
    credentials: &CredentialsRef,
    observer: Option<&dyn ApiObserver>,
) -> Result<Session, Stop> {
    let cloud = credentials.cloud.clone();
    let invalid = |why: String| {
        wait(
            reason::CREDENTIALS_INVALID,
            format!(
                "Secret {}/{} cloud {cloud}: {why}",
                credentials.namespace, credentials.secret
            ),
        )
    };
    let token_request = keystone::token_request(config).map_err(invalid)?;
    let transport = Transport::new(
        crate::untrusted::OPENSTACK,
        ca_bundle,
        config.verify != Some(false),
    )
    .map_err(invalid)?;
    let token = authenticate(&transport, &token_request, &cloud, observer).await?;
    let region = config.region_name.clone();
    let interface = config.interface.clone();
    let Some(root) = keystone::endpoint(
        &token.document,
        "load-balancer",
        interface.as_deref(),
        region.as_deref(),
    ) else {
        return Err(wait(
            reason::ENDPOINT_NOT_IN_CATALOG,
            format!(
                "cloud {cloud}: the Keystone catalog has no `load-balancer` endpoint{} (is Octavia installed, and is the region right?)",
                region
                    .map(|r| format!(" in region {r}"))
                    .unwrap_or_default()
            ),
        ));
    };
    let mut session = Session {
        transport,
        token_request,
        token: Mutex::new(token),
        interface,
        region,
        octavia: keystone::service_base(None, &root, "v2"),
        network: tokio::sync::OnceCell::new(),
        cloud,
        version: ApiVersion(2, 0),
    };
    // Octavia's version document is at the root of its service: it gives the v2 base and the
    // highest v2.N.
    let reply = session
        .exchange(
            observer,
            "version.get",
            Method::GET,
            keystone::document_url(&root, "v2"),
            None,
        )
        .await?;
    let listed = versions::highest(&reply.body.0, "v2");
    session.octavia = keystone::service_base(listed.as_ref(), &root, "v2");
    session.version = listed.as_ref().and_then(ApiVersion::of).ok_or_else(|| {
        Stop::Error(ProviderError::transient(format!(
            "cloud {}: the Octavia version document lists no v2 version (HTTP {})",
            session.cloud, reply.status
        )))
    })?;
    Ok(session)
}

/// Which service a request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Service {
    LoadBalancer,
    Network,
}

/// One Octavia (or Neutron) request, relative to the service's versioned base URL.
#[derive(Clone, Debug)]
pub struct Request {
    service: Service,
    method: Method,
    path: String,
    query: BTreeMap<&'static str, String>,
    body: Option<Value>,
}

impl Request {
    /// `GET path`.
    pub fn get(path: impl Into<String>) -> Self {
        Self {
            service: Service::LoadBalancer,
            method: Method::GET,
            path: path.into(),
            query: BTreeMap::new(),
            body: None,
        }
    }

    /// `POST path` with a JSON body.
    pub fn post(path: impl Into<String>, body: Value) -> Self {
        Self {
            method: Method::POST,
            body: Some(body),
            ..Self::get(path)
        }
    }

    /// `PUT path` with a JSON body.
    pub fn put(path: impl Into<String>, body: Value) -> Self {
        Self {
            method: Method::PUT,
            body: Some(body),
            ..Self::get(path)
        }
    }

    /// `DELETE path`.
    pub fn delete(path: impl Into<String>) -> Self {
        Self {
            method: Method::DELETE,
            ..Self::get(path)
        }
    }

    /// Send it to Neutron (`network`) instead of Octavia.
    pub fn network(mut self) -> Self {
        self.service = Service::Network;
        self
    }

    /// Add a query parameter.
    pub fn query(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.query.insert(key, value.into());
        self
    }

    /// The URL under `base`.
    fn url(&self, base: &Url) -> Result<Url, String> {
        let mut url = base
            .join(self.path.trim_start_matches('/'))
            .map_err(|e| format!("{}: not a path: {e}", self.path))?;
        if !self.query.is_empty() {
            url.query_pairs_mut().extend_pairs(&self.query);
        }
        Ok(url)
    }
}

impl Session {
    /// Whether the token expires soon: the session is replaced instead of used.
    fn expiring(&self) -> bool {
        let Ok(token) = self.token.lock() else {
            return true;
        };
        let soon = jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::from_secs(
                RENEW_BEFORE.as_secs() as i64
            ))
            .ok();
        matches!((token.expires, soon), (Some(expires), Some(soon)) if expires <= soon)
    }

    fn token(&self) -> Result<Token, Stop> {
        self.token.lock().map(|t| t.clone()).map_err(|_| {
            Stop::Error(ProviderError::transient(format!(
                "cloud {}: the session's token is unusable",
                self.cloud
            )))
        })
    }

    /// Find Neutron (`network`) in the catalog and its v2.0 base, once; needed only for floating
    /// IPs.
    pub async fn network(&self) -> Result<(), Stop> {
        self.network_base().await.map(|_| ())
    }

    async fn network_base(&self) -> Result<&Url, Stop> {
        self.network
            .get_or_try_init(|| async {
                let token = self.token()?;
                let Some(root) = keystone::endpoint(
                    &token.document,
                    "network",
                    self.interface.as_deref(),
                    self.region.as_deref(),
                ) else {
                    return Err(wait(
                        reason::ENDPOINT_NOT_IN_CATALOG,
                        format!(
                            "cloud {}: the Keystone catalog has no `network` endpoint, needed for the floating IP",
                            self.cloud
                        ),
                    ));
                };
                // A catalog URL that names v2.0 is the base: no version document is needed.
                let listed = if keystone::names_version(&root, "v2.0") {
                    None
                } else {
                    let reply = self
                        .exchange(None, "network.version.get", Method::GET, root.clone(), None)
                        .await?;
                    versions::highest(&reply.body.0, "v2.0")
                };
                Ok(keystone::service_base(listed.as_ref(), &root, "v2.0"))
            })
            .await
    }

    /// Send `request`; record it; an answer of any status is `Ok`. No answer is a transient error
    /// (a too large one is reported with its own reason).
    pub async fn send(
        &self,
        observer: Option<&dyn ApiObserver>,
        operation: &str,
        request: Request,
    ) -> Result<Reply, Stop> {
        let base = match request.service {
            Service::LoadBalancer => &self.octavia,
            Service::Network => self.network_base().await?,
        };
        let url = request.url(base).map_err(|why| {
            Stop::Error(ProviderError::transient(format!(
                "cloud {}: Octavia {operation}: {why}",
                self.cloud
            )))
        })?;
        self.exchange(
            observer,
            operation,
            request.method,
            url,
            request.body.as_ref(),
        )
        .await
    }

    /// One exchange with the session's token, recorded; a 401 gets a new token and is sent once more
    /// (Keystone revokes tokens before their expiry, e.g. when a password changes).
    async fn exchange(
        &self,
        observer: Option<&dyn ApiObserver>,
        operation: &str,
        method: Method,
        url: Url,
        body: Option<&Value>,
    ) -> Result<Reply, Stop> {
        let mut renewed = false;
        loop {
            let token = self.token()?;
            let started = Instant::now();
            let answer = self
                .transport
                .exchange(method.clone(), url.clone(), Some(&token.value), body)
                .await;
            if let Some(observer) = observer {
                observer.observe(&ApiCall {
                    service: if operation.starts_with("floatingip") {
                        "network"
                    } else {
                        "load-balancer"
                    },
                    operation,
                    status: answer.as_ref().ok().map(|a| a.status),
                    duration: started.elapsed(),
                });
            }
            let answer = answer
                .map_err(|why| no_answer(&self.cloud, &format!("Octavia {operation}"), why))?;
            if answer.status == 401 && !renewed {
                renewed = true;
                let fresh =
                    authenticate(&self.transport, &self.token_request, &self.cloud, observer)
                        .await?;
                if let Ok(mut token) = self.token.lock() {
                    *token = fresh;
                }
                continue;
            }
            return Ok(Reply {
                status: answer.status,
                body: Body(answer.body),
            });
        }
    }

    /// Send `request` and require success: 409 (an object is PENDING) waits on the re-look schedule,
    /// 5xx backs off, quota and configuration rejections are reported with their reason.
    pub async fn require(
        &self,
        observer: Option<&dyn ApiObserver>,
        operation: &str,
        request: Request,
    ) -> Result<Body, Stop> {
        let reply = self.send(observer, operation, request).await?;
        if reply.ok() {
            return Ok(reply.body);
        }
        Err(self.failure(operation, &reply))
    }

    /// Send `request` and require success like [`Session::require`], except that 404 is `Ok(None)`:
    /// the object is already gone, which is fine for a delete (or a read of an object that may be
    /// gone). Anything else that is not 2xx is reported as [`Session::failure`] says.
    pub async fn require_or_gone(
        &self,
        observer: Option<&dyn ApiObserver>,
        operation: &str,
        request: Request,
    ) -> Result<Option<Body>, Stop> {
        let reply = self.send(observer, operation, request).await?;
        if reply.status == 404 {
            return Ok(None);
        }
        if reply.ok() {
            return Ok(Some(reply.body));
        }
        Err(self.failure(operation, &reply))
    }

    /// What a non-2xx answer means for the provider.
    pub fn failure(&self, operation: &str, reply: &Reply) -> Stop {
        let error = reply.error();
        let fault = error.text;
        let what = format!(
            "cloud {}: Octavia {operation}: HTTP {}: {fault}",
            self.cloud, reply.status
        );
        let lower = fault.to_lowercase();
        match error.neutron_type.as_deref() {
            Some("ExternalNetworkNotFound" | "NetworkNotFound") => {
                return wait(reason::FLOATING_NETWORK_NOT_FOUND, what);
            }
            Some("IpAddressGenerationFailure" | "OverQuota") => {
                return wait(reason::QUOTA_EXCEEDED, what);
            }
            Some("FloatingIPPortAlreadyAssociated" | "IpAddressInUse") => {
                return wait(reason::FLOATING_IP_IN_USE, what);
            }
            _ => {}
        }
        match reply.status {
            409 => Stop::Busy(format!("{what} (an object is PENDING; retrying)")),
            401 => wait(reason::AUTHENTICATION_FAILED, what),
            403 | 413 if lower.contains("quota") => wait(reason::QUOTA_EXCEEDED, what),
            400 | 404 if lower.contains("provider") || lower.contains("flavor") => {
                wait(reason::PROVIDER_OR_FLAVOR_NOT_FOUND, what)
            }
            400..=499 => wait(reason::REQUEST_REJECTED, what),
            _ => Stop::Error(ProviderError::transient(what)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session (never connected) whose token expires `expires` seconds from now.
    fn session_expiring_in(expires: Option<i64>) -> Session {
        let url = Url::parse("http://keystone.invalid/v3/auth/tokens").expect("url");
        Session {
            transport: Transport::new(crate::untrusted::OPENSTACK, None, true).expect("transport"),
            token_request: keystone::TokenRequest {
                url: url.clone(),
                body: Value::Null,
            },
            token: Mutex::new(Token {
                value: "t".into(),
                expires: expires.map(|s| {
                    jiff::Timestamp::now()
                        .checked_add(jiff::SignedDuration::from_secs(s))
                        .expect("time")
                }),
                document: Arc::new(Value::Null),
            }),
            interface: None,
            region: None,
            octavia: url,
            network: tokio::sync::OnceCell::new(),
            cloud: "c".into(),
            version: ApiVersion(2, 0),
        }
    }

    #[test]
    fn a_session_is_replaced_five_minutes_before_its_token_expires() {
        assert!(session_expiring_in(Some(60)).expiring());
        assert!(session_expiring_in(Some(-1)).expiring());
        assert!(!session_expiring_in(Some(3600)).expiring());
        assert!(
            !session_expiring_in(None).expiring(),
            "no expiry said: kept"
        );
    }

    #[test]
    fn version_document_gives_the_highest_v2() {
        let doc =
            br#"{"versions": [{"id": "v2.0"}, {"id": "v2.30"}, {"id": "v2.4"}, {"id": "v1.9"}]}"#;
        let of = |doc: &[u8]| {
            versions::highest(doc, "v2")
                .as_ref()
                .and_then(ApiVersion::of)
        };
        assert_eq!(of(doc), Some(ApiVersion(2, 30)));
        assert_eq!(of(b"{}"), None);
        assert_eq!(of(br#"{"versions": [{"id": "v2"}]}"#), None, "no v2.N");
        assert!(
            ApiVersion(2, 4) < ApiVersion::TAGS && ApiVersion(2, 30) > ApiVersion::ALLOWED_CIDRS
        );
    }
}
