//! The OpenStack side of the Octavia provider: credentials from a Secret, Keystone sessions (through
//! the `openstack_sdk` crate: token auth, catalog discovery, renewal before expiry, re-auth on 401),
//! Octavia API version detection, and one metered request path that turns HTTP answers into what
//! the provider does next (done, wait and look again, back off, or report).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use openstack_sdk::AsyncOpenStack;
use openstack_sdk::api::rest_endpoint_prelude::{BodyError, QueryParams, RestEndpoint};
use openstack_sdk::api::{QueryAsync, raw};
use openstack_sdk::config::CloudConfig;
use openstack_sdk::types::ServiceType;
use serde_json::Value;

pub use super::credentials::CredentialsRef;
use super::credentials::{CaFile, cloud_config};
use super::reason;
use super::stop::{Stop, wait};
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

    /// The highest `v2.N` of an Octavia version document.
    pub fn from_document(document: &Value) -> Option<Self> {
        document
            .get("versions")?
            .as_array()?
            .iter()
            .filter_map(|v| v.get("id")?.as_str())
            .filter_map(|id| {
                let (major, minor) = id.strip_prefix('v')?.split_once('.')?;
                Some(ApiVersion(major.parse().ok()?, minor.parse().ok()?))
            })
            .filter(|v| v.0 == 2)
            .max()
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
    os: AsyncOpenStack,
    network: tokio::sync::OnceCell<()>,
    _renew: openstack_sdk::RenewHandle,
    /// The cloud name, for messages.
    pub cloud: String,
    /// The detected Octavia API version.
    pub version: ApiVersion,
}

/// An HTTP answer.
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

/// The sessions the provider holds, one per set of credentials.
#[derive(Default)]
pub struct Sessions {
    /// Which Secrets may be read as credentials.
    pub(super) policy: crate::entry::CredentialsPolicy,
    sessions: Mutex<HashMap<SessionKey, Arc<Session>>>,
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
        {
            return Ok(session.clone());
        }
        let session = self.read_and_connect(client, credentials, observer).await?;
        if let Ok(mut recent) = self.recent.lock() {
            recent.insert(credentials.clone(), (Instant::now(), session.clone()));
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
        if let Ok(sessions) = self.sessions.lock()
            && let Some(session) = sessions.get(&key)
        {
            return Ok(session.clone());
        }
        let (mut config, ca_bundle) = cloud_config(&secret, credentials)?;
        // The SDK reads a CA bundle from a file, once, while it builds its HTTP client: the file
        // is written for the connection and removed right after, so that tenants' bundles never
        // pile up on the controller's small temporary filesystem.
        let ca_file = match &ca_bundle {
            Some(pem) => Some(CaFile::write(pem)?),
            None => None,
        };
        config.cacert = ca_file.as_ref().map(CaFile::path);
        let session = connect(&config, credentials, observer).await;
        drop(ca_file);
        let session = session?;
        let session = Arc::new(session);
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.retain(|k, _| k.credentials != key.credentials);
            sessions.insert(key, session.clone());
        }
        Ok(session)
    }
}

/// Classify a failure to authenticate or reach Keystone. The SDK's messages name no secret.
fn auth_failure(cloud: &str, error: &openstack_sdk::OpenStackError) -> Stop {
    let text = error.to_string();
    let lower = text.to_lowercase();
    let unreachable = ["communication", "connect", "timed out", "timeout", "dns"]
        .iter()
        .any(|w| lower.contains(w))
        && !lower.contains("401");
    if unreachable || lower.contains("500") || lower.contains("503") || lower.contains("502") {
        Stop::Error(ProviderError::transient(format!(
            "cloud {cloud}: Keystone is not reachable: {text}"
        )))
    } else {
        wait(
            reason::AUTHENTICATION_FAILED,
            format!("cloud {cloud}: Keystone refused the credentials: {text}"),
        )
    }
}

/// Link the auth plugins capi-lb supports (`openstack_sdk` finds plugins through `inventory`, which
/// only sees crates that are linked; its own anchoring is empty in 0.22.8).
fn anchor_auth_plugins() {
    std::hint::black_box((
        &openstack_sdk_auth_applicationcredential::ANCHOR,
        &openstack_sdk_auth_password::ANCHOR,
        &openstack_sdk_auth_token::ANCHOR,
    ));
}

async fn connect(
    config: &CloudConfig,
    credentials: &CredentialsRef,
    observer: Option<&dyn ApiObserver>,
) -> Result<Session, Stop> {
    anchor_auth_plugins();
    let cloud = credentials.cloud.clone();
    let started = Instant::now();
    let connected = AsyncOpenStack::builder(config)
        .disable_auth_cache(true)
        .http_timeout(Duration::from_secs(15))
        .http_connect_timeout(Duration::from_secs(5))
        .connect()
        .await;
    if let Some(observer) = observer {
        observer.observe(&ApiCall {
            service: "identity",
            operation: "token.create",
            status: match &connected {
                Ok(_) => Some(201),
                Err(_) => None,
            },
            duration: started.elapsed(),
        });
    }
    let os = connected.map_err(|e| auth_failure(&cloud, &e))?;
    let region = config.region_name.clone();
    let in_catalog = os.get_token_catalog().is_some_and(|catalog| {
        catalog.iter().any(|service| {
            service.service_type == "load-balancer"
                && service
                    .endpoints
                    .iter()
                    .any(|ep| region.is_none() || ep.region.as_deref() == region.as_deref())
        })
    });
    if !in_catalog {
        return Err(wait(
            reason::ENDPOINT_NOT_IN_CATALOG,
            format!(
                "cloud {cloud}: the Keystone catalog has no `load-balancer` endpoint{} (is Octavia installed, and is the region right?)",
                region
                    .map(|r| format!(" in region {r}"))
                    .unwrap_or_default()
            ),
        ));
    }
    os.discover_service_endpoint(&ServiceType::LoadBalancer)
        .await
        .map_err(|e| {
            Stop::Error(ProviderError::transient(format!(
                "cloud {cloud}: discovering the Octavia endpoint: {e}"
            )))
        })?;
    let renew = os.enable_auto_renew(chrono::TimeDelta::minutes(5));
    let mut session = Session {
        os,
        network: tokio::sync::OnceCell::new(),
        _renew: renew,
        cloud,
        version: ApiVersion(2, 0),
    };
    let reply = session
        .send(observer, "version.get", Request::get("../"))
        .await?;
    session.version = ApiVersion::from_document(&reply.body).ok_or_else(|| {
        Stop::Error(ProviderError::transient(format!(
            "cloud {}: the Octavia version document lists no v2 version (HTTP {})",
            session.cloud, reply.status
        )))
    })?;
    Ok(session)
}

/// One Octavia request: the SDK's extension point for requests (`RestEndpoint`), sent with
/// `raw(..)` so that every status code reaches the provider.
#[derive(Clone, Debug)]
pub struct Request {
    service: ServiceType,
    method: Method,
    path: String,
    query: BTreeMap<&'static str, String>,
    body: Option<Value>,
}

impl Request {
    /// `GET path`.
    pub fn get(path: impl Into<String>) -> Self {
        Self {
            service: ServiceType::LoadBalancer,
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
        self.service = ServiceType::Network;
        self
    }

    /// Add a query parameter.
    pub fn query(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.query.insert(key, value.into());
        self
    }
}

impl RestEndpoint for Request {
    fn method(&self) -> Method {
        self.method.clone()
    }

    fn endpoint(&self) -> std::borrow::Cow<'static, str> {
        self.path.clone().into()
    }

    fn service_type(&self) -> ServiceType {
        self.service.clone()
    }

    fn parameters(&self) -> QueryParams<'_> {
        let mut params = QueryParams::default();
        for (k, v) in &self.query {
            params.push(*k, v.as_str());
        }
        params
    }

    fn body(&self) -> Result<Option<(&'static str, Vec<u8>)>, BodyError> {
        match &self.body {
            None => Ok(None),
            Some(body) => Ok(Some((
                "application/json",
                serde_json::to_vec(body).map_err(BodyError::from)?,
            ))),
        }
    }

    fn api_version(&self) -> Option<openstack_sdk::types::ApiVersion> {
        None
    }
}

impl Session {
    /// Find Neutron (`network`) in the catalog, once; needed only for floating IPs.
    pub async fn network(&self) -> Result<(), Stop> {
        self.network
            .get_or_try_init(|| async {
                let in_catalog = self.os.get_token_catalog().is_some_and(|catalog| {
                    catalog
                        .iter()
                        .any(|s| s.service_type == "network" && !s.endpoints.is_empty())
                });
                if !in_catalog {
                    return Err(wait(
                        reason::ENDPOINT_NOT_IN_CATALOG,
                        format!(
                            "cloud {}: the Keystone catalog has no `network` endpoint, needed for the floating IP",
                            self.cloud
                        ),
                    ));
                }
                self.os
                    .discover_service_endpoint(&ServiceType::Network)
                    .await
                    .map_err(|e| {
                        Stop::Error(ProviderError::transient(format!(
                            "cloud {}: discovering the Neutron endpoint: {e}",
                            self.cloud
                        )))
                    })
            })
            .await
            .map(|_| ())
    }

    /// Send `request`; record it; an answer of any status is `Ok`. No answer is a transient error.
    pub async fn send(
        &self,
        observer: Option<&dyn ApiObserver>,
        operation: &str,
        request: Request,
    ) -> Result<Reply, Stop> {
        let started = Instant::now();
        let answer = raw(request)
            .skip_error_check(true)
            .query_async(&self.os)
            .await;
        let status = answer.as_ref().ok().map(|r| r.status().as_u16());
        if let Some(observer) = observer {
            observer.observe(&ApiCall {
                service: if operation.starts_with("floatingip") {
                    "network"
                } else {
                    "load-balancer"
                },
                operation,
                status,
                duration: started.elapsed(),
            });
        }
        let response: http::Response<Bytes> = answer.map_err(|e| {
            Stop::Error(ProviderError::Transient {
                message: format!("cloud {}: Octavia {operation}: no answer: {e}", self.cloud),
                retry_after: None,
            })
        })?;
        let status = response.status().as_u16();
        let body = serde_json::from_slice(response.body()).unwrap_or(Value::Null);
        Ok(Reply { status, body })
    }

    /// Send `request` and require success: 409 (an object is PENDING) waits on the re-look schedule,
    /// 5xx backs off, quota and configuration rejections are reported with their reason.
    pub async fn require(
        &self,
        observer: Option<&dyn ApiObserver>,
        operation: &str,
        request: Request,
    ) -> Result<Value, Stop> {
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
    ) -> Result<Option<Value>, Stop> {
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
        let fault = reply.fault();
        let what = format!(
            "cloud {}: Octavia {operation}: HTTP {}: {fault}",
            self.cloud, reply.status
        );
        let lower = fault.to_lowercase();
        match reply.neutron_error() {
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
    use serde_json::json;

    #[test]
    fn version_document_gives_the_highest_v2() {
        let doc =
            json!({"versions": [{"id": "v2.0"}, {"id": "v2.30"}, {"id": "v2.4"}, {"id": "v1.9"}]});
        assert_eq!(ApiVersion::from_document(&doc), Some(ApiVersion(2, 30)));
        assert_eq!(ApiVersion::from_document(&json!({})), None);
        assert!(
            ApiVersion(2, 4) < ApiVersion::TAGS && ApiVersion(2, 30) > ApiVersion::ALLOWED_CIDRS
        );
    }
}
