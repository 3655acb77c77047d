//! An in-memory Kubernetes API for `capi-lb simulate` and the tests: kube-fake-client (server-side
//! apply, resourceVersion conflicts, label selectors, status subresource, owner-reference cascades)
//! with capi-lb's kinds and the Cluster API kinds registered, behind a thin layer that adds what the
//! fake lacks and a real apiserver does:
//!
//! - two-phase deletion: deleting an object that has finalizers only sets `deletionTimestamp`; the
//!   object goes away when a later write empties its finalizers (the fake would delete at once);
//! - Namespaces among the initial objects, served for `GET` of one (the fake cannot parse
//!   `/api/v1/namespaces/{name}`);
//! - a count and log of write requests, so tests can assert that a reconcile of an unchanged object
//!   makes no writes.
//!
//! There is no watch: callers drive reconcilers directly.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use capi_lb_api::capi::{Cluster, Machine};
use capi_lb_api::{
    DNSLoadBalancer, InMemoryLoadBalancer, KubeDCLoadBalancer, LoadBalancer, OctaviaLoadBalancer,
    ServiceLoadBalancer, ZonedLoadBalancer,
};
use capi_lb_providers::clock::SharedClock;
use futures::future::BoxFuture;
use http::{Method, Request, Response};
use http_body_util::BodyExt;
use kube::client::Body;
use serde_json::Value;

/// One request the in-memory API received (for the RBAC test: which verbs on which resources the
/// controllers use).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    /// HTTP method.
    pub method: String,
    /// Path, without the query.
    pub path: String,
    /// Query string (`watch=true`, label selectors, ...).
    pub query: String,
    /// Kinds the request body names as owners with `blockOwnerDeletion: true` (which needs
    /// `update` on the owner's `finalizers` subresource).
    pub blocking_owner_kinds: Vec<String>,
    /// A server-side apply of an object that did not exist: a real apiserver authorizes it as
    /// `create` as well as `patch`.
    pub creates_by_apply: bool,
}

/// Counts and records the requests the in-memory API receives.
#[derive(Clone, Debug, Default)]
pub struct ApiStats {
    requests: Arc<Mutex<Vec<RecordedRequest>>>,
    /// Record requests in `requests` only while set (around controller code, not test set-up).
    recording: Arc<std::sync::atomic::AtomicBool>,
    reads: Arc<AtomicU64>,
    writes: Arc<AtomicU64>,
    event_writes: Arc<AtomicU64>,
    log: Arc<Mutex<Vec<String>>>,
}

impl ApiStats {
    /// Number of read requests (GET, including lists) so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }

    /// Number of write requests (POST, PUT, PATCH, DELETE) so far.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    /// Write requests so far, not counting Events.
    pub fn writes_excluding_events(&self) -> u64 {
        self.writes() - self.event_writes.load(Ordering::SeqCst)
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Record the requests made from now on (`true`) or stop recording (`false`).
    pub fn set_recording(&self, on: bool) {
        self.recording.store(on, Ordering::SeqCst);
    }

    fn recording(&self) -> bool {
        self.recording.load(Ordering::SeqCst)
    }

    fn record_request(&self, request: RecordedRequest) {
        if !self.recording() {
            return;
        }
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request);
    }

    /// Every write request so far, as `METHOD path`.
    pub fn log(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn record(&self, entry: String) {
        if entry.contains("/events") {
            self.event_writes.fetch_add(1, Ordering::SeqCst);
        }
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(entry);
    }
}

/// Errors building the in-memory API.
#[derive(Debug, thiserror::Error)]
pub enum InMemoryApiError {
    /// The fake client refused the initial objects.
    #[error("in-memory API: {0}")]
    Fake(#[from] kube_fake_client::Error),
}

/// Builder of an [`InMemoryApi`].
pub struct InMemoryApiBuilder {
    builder: kube_fake_client::ClientBuilder,
    clock: SharedClock,
    /// Namespaces among the initial objects.
    namespaces: BTreeMap<String, Value>,
}

impl std::fmt::Debug for InMemoryApiBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryApiBuilder").finish_non_exhaustive()
    }
}

/// An in-memory Kubernetes API.
#[derive(Clone)]
pub struct InMemoryApi {
    /// A kube client talking to it.
    pub client: kube::Client,
    /// Write statistics.
    pub stats: ApiStats,
}

impl std::fmt::Debug for InMemoryApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryApi")
            .field("writes", &self.stats.writes())
            .finish()
    }
}

impl InMemoryApiBuilder {
    /// A builder with capi-lb's and Cluster API's kinds registered. `clock` stamps deletion
    /// timestamps.
    pub fn new(clock: SharedClock) -> Self {
        let builder = kube_fake_client::ClientBuilder::new()
            .with_resource::<LoadBalancer>()
            .with_resource::<InMemoryLoadBalancer>()
            .with_resource::<KubeDCLoadBalancer>()
            .with_resource::<ServiceLoadBalancer>()
            .with_resource::<OctaviaLoadBalancer>()
            .with_resource::<DNSLoadBalancer>()
            .with_resource::<ZonedLoadBalancer>()
            .with_resource::<Machine>()
            .with_resource::<Cluster>();
        Self {
            builder,
            clock,
            namespaces: BTreeMap::new(),
        }
    }

    /// Add initial objects (each a full object with `apiVersion` and `kind`).
    pub fn with_objects(mut self, mut objects: Vec<Value>) -> Self {
        let now = Value::String(self.clock.now().to_string());
        for object in &mut objects {
            if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.entry("creationTimestamp")
                    .or_insert_with(|| now.clone());
            }
        }
        // The fake cannot serve Namespaces (it reads `/api/v1/namespaces/...` as a namespaced
        // path): they are kept here and served by the emulation, for reads.
        let (namespaces, objects): (Vec<Value>, Vec<Value>) = objects
            .into_iter()
            .partition(|o| o.get("kind").and_then(Value::as_str) == Some("Namespace"));
        for namespace in namespaces {
            if let Some(name) = namespace.pointer("/metadata/name").and_then(Value::as_str) {
                self.namespaces.insert(name.to_string(), namespace.clone());
            }
        }
        self.builder = self.builder.with_runtime_objects(objects);
        self
    }

    /// Register another kind (for tests of other target kinds).
    pub fn with_resource<K: kube::Resource<DynamicType = ()>>(mut self) -> Self {
        self.builder = self.builder.with_resource::<K>();
        self
    }

    /// Build the API.
    pub async fn build(self) -> Result<InMemoryApi, InMemoryApiError> {
        let fake = self.builder.build().await?;
        let stats = ApiStats::default();
        let service = Emulator {
            inner: fake,
            terminating: Arc::new(Mutex::new(HashMap::new())),
            stats: stats.clone(),
            clock: self.clock,
            namespaces: Arc::new(self.namespaces),
        };
        Ok(InMemoryApi {
            client: kube::Client::new(service, "default"),
            stats,
        })
    }
}

/// The emulation layer in front of the fake client.
#[derive(Clone)]
struct Emulator {
    inner: kube::Client,
    /// Objects being deleted: UID -> deletionTimestamp.
    terminating: Arc<Mutex<HashMap<String, String>>>,
    stats: ApiStats,
    clock: SharedClock,
    /// The Namespaces, by name (read-only).
    namespaces: Arc<BTreeMap<String, Value>>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<Request<Body>> for Emulator {
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<Body>, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.handle(request).await })
    }
}

fn finalizers_empty(object: &Value) -> bool {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_none_or(|f| f.is_empty())
}

fn uid_of(object: &Value) -> Option<String> {
    object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// A path that names one object (not a collection, not a subresource): after `/api/v1` or
/// `/apis/{group}/{version}` come `{resource}/{name}` (cluster-scoped) or
/// `namespaces/{ns}/{resource}/{name}` (namespaced).
fn names_one_object(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let prefix = if parts.first() == Some(&"api") { 2 } else { 3 };
    matches!(parts.len().saturating_sub(prefix), 2 | 4)
}

/// The name in `/api/v1/namespaces/{name}`, a path the fake cannot parse (it reads `namespaces/`
/// as the start of a namespaced path).
fn namespace_named(path: &str) -> Option<&str> {
    match path
        .split('/')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()[..]
    {
        ["api", "v1", "namespaces", name] => Some(name),
        _ => None,
    }
}

impl Emulator {
    /// GET of one Namespace, which the fake cannot serve.
    fn get_namespace(&self, name: &str) -> Result<Response<Body>, BoxError> {
        let (status, body) = match self.namespaces.get(name) {
            Some(namespace) => {
                let mut namespace = namespace.clone();
                namespace["apiVersion"] = Value::String("v1".into());
                (http::StatusCode::OK, namespace)
            }
            None => (
                http::StatusCode::NOT_FOUND,
                serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "NotFound", "code": 404,
                    "message": format!("namespaces \"{name}\" not found")}),
            ),
        };
        Ok(Response::builder()
            .status(status)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::to_vec(&body)?))?)
    }

    /// Whether the object at `uri` exists (`None` when the answer is neither found nor not found).
    async fn exists(&self, uri: &http::Uri) -> Result<Option<bool>, BoxError> {
        let get = Request::builder()
            .method(Method::GET)
            .uri(uri.path())
            .body(Body::from(Vec::new()))?;
        let status = self.inner.send(get).await?.status();
        Ok(if status.is_success() {
            Some(true)
        } else if status == http::StatusCode::NOT_FOUND {
            Some(false)
        } else {
            None
        })
    }

    /// Serve one request: record it, emulate what the fake lacks around it, forward it.
    async fn handle(&self, request: Request<Body>) -> Result<Response<Body>, BoxError> {
        let (parts, body) = request.into_parts();
        let body = body.collect().await?.to_bytes();
        let is_apply = parts.method == Method::PATCH
            && parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .is_some_and(|v| v.as_bytes().starts_with(b"application/apply-patch"));
        self.count(&parts, &body, is_apply).await?;
        if parts.method == Method::GET
            && let Some(name) = namespace_named(parts.uri.path())
        {
            return self.get_namespace(name);
        }
        if parts.method == Method::DELETE
            && names_one_object(parts.uri.path())
            && let Some(response) = self.start_deletion(&parts.uri).await?
        {
            return Ok(response);
        }
        let body = self.rewrite_body(&parts.method, is_apply, body)?;
        let forwarded = Request::from_parts(parts.clone(), Body::from(body));
        let response = self.inner.send(forwarded).await?;
        self.finish(&parts.method, parts.uri.path(), response).await
    }

    /// Record the request (when recording) and count it as a read or a write.
    async fn count(
        &self,
        parts: &http::request::Parts,
        body: &Bytes,
        is_apply: bool,
    ) -> Result<(), BoxError> {
        let method = &parts.method;
        let path = parts.uri.path();
        let creates_by_apply = self.stats.recording()
            && is_apply
            && names_one_object(path)
            && self.exists(&parts.uri).await? == Some(false);
        self.stats.record_request(RecordedRequest {
            method: method.to_string(),
            path: path.to_string(),
            query: parts.uri.query().unwrap_or_default().to_string(),
            blocking_owner_kinds: blocking_owner_kinds(body),
            creates_by_apply,
        });
        if method == Method::GET {
            self.stats.reads.fetch_add(1, Ordering::SeqCst);
        } else {
            self.stats.record(format!("{method} {path}"));
        }
        Ok(())
    }

    /// Two-phase deletion: when the object at `uri` has finalizers, only mark it terminating and
    /// return the response (the object with its `deletionTimestamp`); `None`: delete as usual.
    async fn start_deletion(&self, uri: &http::Uri) -> Result<Option<Response<Body>>, BoxError> {
        let get = Request::builder()
            .method(Method::GET)
            .uri(uri.clone())
            .body(Body::from(Vec::new()))?;
        let current = self.inner.send(get).await?;
        if !current.status().is_success() {
            return Ok(None);
        }
        let bytes = current.into_body().collect().await?.to_bytes();
        let mut object: Value = serde_json::from_slice(&bytes)?;
        if finalizers_empty(&object) {
            return Ok(None);
        }
        let Some(uid) = uid_of(&object) else {
            return Ok(None);
        };
        let timestamp = self
            .terminating
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(uid)
            .or_insert_with(|| self.clock.now().to_string())
            .clone();
        object["metadata"]["deletionTimestamp"] = Value::String(timestamp);
        json_response(http::StatusCode::OK, &object).map(Some)
    }

    /// The body to forward: stamped with the world's `creationTimestamp` when it creates an object,
    /// without our `deletionTimestamp` when it replaces one.
    fn rewrite_body(
        &self,
        method: &Method,
        is_apply: bool,
        body: Bytes,
    ) -> Result<Bytes, BoxError> {
        // A real apiserver stamps creationTimestamp with its own clock: use the world's clock, so
        // ages computed from it (how long an EIp has been pending) are in simulated time. An
        // existing object keeps its timestamp (the fake copies it over on updates).
        let body = if method == Method::POST || is_apply {
            edit_metadata(body, |meta| {
                if meta.contains_key("creationTimestamp") {
                    return false;
                }
                let now = Value::String(self.clock.now().to_string());
                meta.insert("creationTimestamp".into(), now);
                true
            })?
        } else {
            body
        };
        if method == Method::PUT {
            // The fake treats deletionTimestamp as immutable and has none stored: drop ours.
            return edit_metadata(body, |meta| meta.remove("deletionTimestamp").is_some());
        }
        Ok(body)
    }

    /// The fake's `response` to a `method` on `path`, with terminating objects marked with their
    /// `deletionTimestamp`; a write that removed the last finalizer of one completes its deletion.
    async fn finish(
        &self,
        method: &Method,
        path: &str,
        response: Response<Body>,
    ) -> Result<Response<Body>, BoxError> {
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        let Ok(mut value) = serde_json::from_slice::<Value>(&bytes) else {
            return Ok(Response::builder().status(status).body(Body::from(bytes))?);
        };
        if !status.is_success() {
            return json_response(status, &value);
        }
        let terminating = self
            .terminating
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if terminating.is_empty() {
            return json_response(status, &value);
        }
        if let Some(items) = value.get_mut("items").and_then(Value::as_array_mut) {
            for item in items {
                mark(item, &terminating);
            }
            return json_response(status, &value);
        }
        mark(&mut value, &terminating);
        let is_write = method == Method::PATCH || method == Method::PUT;
        if is_write
            && let Some(uid) = uid_of(&value)
            && terminating.contains_key(&uid)
            && finalizers_empty(&value)
        {
            self.complete_deletion(path, &uid).await?;
        }
        json_response(status, &value)
    }

    /// The last finalizer of the object with `uid` at `path` (or its status) is gone: now the
    /// object really goes away.
    async fn complete_deletion(&self, path: &str, uid: &str) -> Result<(), BoxError> {
        self.terminating
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
        let object_path = path.strip_suffix("/status").unwrap_or(path);
        let delete = Request::builder()
            .method(Method::DELETE)
            .uri(object_path)
            .body(Body::from(Vec::new()))?;
        let _ = self.inner.send(delete).await?;
        Ok(())
    }
}

/// The kinds a request body names as owners with `blockOwnerDeletion: true`.
fn blocking_owner_kinds(body: &[u8]) -> Vec<String> {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.pointer("/metadata/ownerReferences").cloned())
        .and_then(|refs| refs.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter(|r| r.get("blockOwnerDeletion") == Some(&Value::Bool(true)))
        .filter_map(|r| r.get("kind").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// Let `edit` change the metadata of the JSON object in `body`; the body is rewritten only when
/// `edit` says it changed something (and left as it is when it is no such object).
fn edit_metadata(
    body: Bytes,
    edit: impl FnOnce(&mut serde_json::Map<String, Value>) -> bool,
) -> Result<Bytes, BoxError> {
    if let Ok(mut object) = serde_json::from_slice::<Value>(&body)
        && let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
        && edit(meta)
    {
        return Ok(Bytes::from(serde_json::to_vec(&object)?));
    }
    Ok(body)
}

fn mark(object: &mut Value, terminating: &HashMap<String, String>) {
    if let Some(uid) = uid_of(object)
        && let Some(ts) = terminating.get(&uid)
        && let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.insert("deletionTimestamp".into(), Value::String(ts.clone()));
    }
}

fn json_response(status: http::StatusCode, value: &Value) -> Result<Response<Body>, BoxError> {
    Ok(Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(serde_json::to_vec(value)?))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_single_object_paths() {
        assert!(names_one_object(
            "/apis/loadbalancer.cluster.x-k8s.io/v1alpha1/namespaces/default/loadbalancers/cp"
        ));
        assert!(!names_one_object(
            "/apis/loadbalancer.cluster.x-k8s.io/v1alpha1/namespaces/default/loadbalancers"
        ));
        assert!(names_one_object(
            "/api/v1/namespaces/default/services/cp-ext"
        ));
        assert!(!names_one_object("/api/v1/namespaces/default/services"));
        assert!(names_one_object("/api/v1/namespaces/default"));
        assert!(!names_one_object(
            "/api/v1/namespaces/default/services/cp-ext/status"
        ));
    }

    /// Every provider of the catalog has its infrastructure kind served by the in-memory API (the
    /// fake client needs each kind registered by type above).
    #[tokio::test]
    async fn every_catalog_kind_is_served() {
        use capi_lb_providers::clock::ManualClock;
        use kube::api::{Api, PostParams};
        use kube::core::DynamicObject;

        let clock: SharedClock = Arc::new(ManualClock::new(jiff::Timestamp::UNIX_EPOCH));
        let api = InMemoryApiBuilder::new(clock).build().await.unwrap();
        for entry in capi_lb_providers::catalog::CATALOG {
            let ar = (entry.infrastructure)();
            let objects: Api<DynamicObject> =
                Api::namespaced_with(api.client.clone(), "default", &ar);
            let object = DynamicObject::new("x", &ar).data(serde_json::json!({"spec": {}}));
            objects
                .create(&PostParams::default(), &object)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", entry.name));
            assert_eq!(
                objects.list(&Default::default()).await.unwrap().items.len(),
                1
            );
        }
    }
}
