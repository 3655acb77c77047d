//! An in-memory Kubernetes API server for `capi-lb simulate` and the tests: a
//! `tower::Service` that a `kube::Client` talks to, over a store of JSON objects, generic over
//! resources (it reads the resource, namespace and name from the request's path). Kinds registered
//! with the builder name the plurals of the initial objects and stand for installed CRDs: a custom
//! resource is served when its kind is registered or among the initial objects (404 otherwise, as
//! without its CRD); Kubernetes' own resources always. It imitates what a real kube-apiserver does
//! where capi-lb depends on it:
//!
//! - one resourceVersion counter, bumped by every write that changes an object and by no write that
//!   leaves it as it was (an identical apply, merge patch, JSON patch or PUT); a PUT or patch naming
//!   another resourceVersion is refused with 409, a DELETE's preconditions are checked;
//!   `metadata.generation` counts changes outside metadata and status; uid, creationTimestamp (from
//!   the world's clock) and namespace are filled in ([`store`]);
//! - the `status` subresource: writes to it change only `.status`, writes to the object keep the
//!   stored status, for the resources that have one ([`kinds`]);
//! - merge patches, JSON patches, strategic merge patches of core kinds ([`write`]), and
//!   server-side apply with field managers, conflicts (409 naming the manager) and `force`, fields
//!   no longer applied removed, `metadata.managedFields` kept for every write ([`apply`],
//!   [`fields`]);
//! - two-phase deletion: a DELETE of an object with finalizers sets `deletionTimestamp`; it goes
//!   when a write empties its finalizers; no finalizer can be added meanwhile (422). The garbage
//!   collector's cascade: dependents whose owners are all gone are deleted (at once, not in the
//!   background);
//! - GET, LIST with label and field selectors and `limit`/`continue` paging, across namespaces;
//!   404 and 409 as `Status` objects shaped like the apiserver's ([`status`]);
//! - `watch=true` from a resourceVersion, over a bounded history (410 `Expired` beyond it), so
//!   kube-runtime's `watcher` works ([`watch`]);
//! - a count of the requests (reads, writes, Events) and, while recording, a log of them for the
//!   RBAC test.
//!
//! Not imitated: admission, validation and defaulting (CRD schemas, CEL), conversion between
//! versions (an object is served in any version of its group, relabelled), authorization, the
//! existence of a namespace and what deleting one deletes, strategic merge patch directives,
//! DELETE of a collection, `dryRun`, propagation policies other than background (`Orphan` keeps
//! the dependents; `Foreground` is background). A create keeps the status it is given (the
//! apiserver drops it for a resource with a status subresource; the tests create Machines with
//! their status in one request). List pages are read from the current objects, not from a snapshot
//! at the first page's resourceVersion, and a continue token does not expire. Core Events and
//! events.k8s.io Events are two separate stores (the apiserver keeps them in one).

mod apply;
mod fields;
mod kinds;
mod request;
mod selectors;
mod status;
mod store;
mod watch;
mod write;

use std::any::TypeId;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use capi_lb_api::capi::{Cluster, Machine};
use capi_lb_providers::clock::SharedClock;
use futures::StreamExt;
use futures::future::BoxFuture;
use http::{Method, Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use kube::client::Body;
use serde_json::{Value, json};

use kinds::Kinds;
use request::{Query, Target, View};
use selectors::{FieldSelector, LabelSelector};
use status::ApiError;
use store::{Key, Store};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of the in-memory API's responses: one JSON document, or a watch's stream of events.
type ResponseBody = UnsyncBoxBody<Bytes, BoxError>;

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
    /// Number of read requests (GET, including lists and watches) so far.
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

    /// Every request received while recording.
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

    /// Every write request so far, as `METHOD path`.
    pub fn log(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Count `method` on `path`, and record `request` while recording.
    fn count(&self, method: &Method, path: &str, request: impl FnOnce() -> RecordedRequest) {
        if self.recording() {
            let request = request();
            self.requests
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(request);
        }
        if method == Method::GET {
            self.reads.fetch_add(1, Ordering::SeqCst);
            return;
        }
        if path.contains("/events") {
            self.event_writes.fetch_add(1, Ordering::SeqCst);
        }
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(format!("{method} {path}"));
    }
}

/// Errors building the in-memory API.
#[derive(Debug, thiserror::Error)]
pub enum InMemoryApiError {
    /// An initial object cannot be kept.
    #[error("in-memory API: initial object {index} ({what}): {why}")]
    InitialObject {
        /// Its position among the initial objects.
        index: usize,
        /// Its kind and name, as far as known.
        what: String,
        /// What is wrong with it.
        why: String,
    },
}

/// Builder of an [`InMemoryApi`].
pub struct InMemoryApiBuilder {
    clock: SharedClock,
    kinds: Kinds,
    objects: Vec<Value>,
}

impl std::fmt::Debug for InMemoryApiBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryApiBuilder")
            .field("objects", &self.objects.len())
            .finish_non_exhaustive()
    }
}

/// An in-memory Kubernetes API.
#[derive(Clone)]
pub struct InMemoryApi {
    /// A kube client talking to it.
    pub client: kube::Client,
    /// Request statistics.
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
    /// A builder with capi-lb's and Cluster API's kinds known. `clock` stamps creation and deletion
    /// timestamps.
    pub fn new(clock: SharedClock) -> Self {
        let mut builder = Self {
            clock,
            kinds: Kinds::builtin(),
            objects: Vec::new(),
        };
        for kind in capi_lb_api::kinds::all() {
            let r = (kind.resource)();
            // Every kind of capi-lb's is namespaced.
            builder.kinds.register(&r.group, &r.kind, &r.plural, true);
        }
        builder
            .with_resource::<Machine>()
            .with_resource::<Cluster>()
    }

    /// Add initial objects (each a full object with `apiVersion` and `kind`).
    pub fn with_objects(mut self, objects: Vec<Value>) -> Self {
        self.objects.extend(objects);
        self
    }

    /// Serve another kind (its CRD installed), its plural and scope known for initial objects of
    /// that kind.
    pub fn with_resource<K>(mut self) -> Self
    where
        K: kube::Resource<DynamicType = ()>,
        K::Scope: 'static,
    {
        let cluster_scoped =
            TypeId::of::<K::Scope>() == TypeId::of::<k8s_openapi::ClusterResourceScope>();
        self.kinds.register(
            &K::group(&()),
            &K::kind(&()),
            &K::plural(&()),
            !cluster_scoped,
        );
        self
    }

    /// Where the API keeps `object`, read from its `apiVersion`, `kind`, name and namespace.
    fn key_of(&self, object: &Value) -> Result<Key, String> {
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .ok_or("no apiVersion")?;
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .ok_or("no kind")?;
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or("no metadata.name")?;
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let namespace = match object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
        {
            Some(ns) if !ns.is_empty() => ns.to_string(),
            _ if self.kinds.namespaced(group, kind) == Some(false) => String::new(),
            _ => "default".to_string(),
        };
        Ok(Key {
            group: group.to_string(),
            resource: self.kinds.plural(group, kind),
            namespace,
            name: name.to_string(),
        })
    }

    /// Build the API.
    pub async fn build(self) -> Result<InMemoryApi, InMemoryApiError> {
        let mut keyed = Vec::with_capacity(self.objects.len());
        for (index, object) in self.objects.iter().enumerate() {
            let key = self
                .key_of(object)
                .map_err(|why| InMemoryApiError::InitialObject {
                    index,
                    what: format!(
                        "{} {}",
                        object.get("kind").and_then(Value::as_str).unwrap_or("?"),
                        object
                            .pointer("/metadata/name")
                            .and_then(Value::as_str)
                            .unwrap_or("?")
                    ),
                    why: why.to_string(),
                })?;
            keyed.push(key);
        }
        let mut store = Store::new(self.clock, self.kinds);
        for (key, object) in keyed.into_iter().zip(self.objects) {
            store.insert_initial(key, object);
        }
        let (revisions, _) = tokio::sync::watch::channel(store.revision());
        let stats = ApiStats::default();
        let server = Server {
            store: Arc::new(Mutex::new(store)),
            revisions: Arc::new(revisions),
            stats: stats.clone(),
        };
        Ok(InMemoryApi {
            client: kube::Client::new(server, "default"),
            stats,
        })
    }
}

/// The server: the store, the announcement of its writes to watches, the statistics.
#[derive(Clone)]
struct Server {
    store: Arc<Mutex<Store>>,
    revisions: Arc<tokio::sync::watch::Sender<u64>>,
    stats: ApiStats,
}

impl tower::Service<Request<Body>> for Server {
    type Response = Response<ResponseBody>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<ResponseBody>, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.handle(request).await })
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

fn json_response(code: u16, value: &Value) -> Result<Response<ResponseBody>, BoxError> {
    let body = Full::new(Bytes::from(serde_json::to_vec(value)?))
        .map_err(|never| match never {})
        .boxed_unsync();
    Ok(Response::builder()
        .status(code)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)?)
}

fn header(parts: &http::request::Parts, name: http::header::HeaderName) -> &str {
    parts
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

impl Server {
    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Serve one request: count it, answer it.
    async fn handle(&self, request: Request<Body>) -> Result<Response<ResponseBody>, BoxError> {
        let (parts, body) = request.into_parts();
        let body = body.collect().await?.to_bytes();
        let target = Target::parse(parts.uri.path());
        let content_type = header(&parts, http::header::CONTENT_TYPE);
        let is_apply =
            parts.method == Method::PATCH && content_type.starts_with("application/apply-patch");
        self.stats
            .count(&parts.method, parts.uri.path(), || RecordedRequest {
                method: parts.method.to_string(),
                path: parts.uri.path().to_string(),
                query: parts.uri.query().unwrap_or_default().to_string(),
                blocking_owner_kinds: blocking_owner_kinds(&body),
                creates_by_apply: is_apply
                    && target.as_ref().is_some_and(|t| {
                        t.names_one_object() && self.store().get(&write_key(t)).is_none()
                    }),
            });
        let Some(target) = target else {
            return json_response(404, &ApiError::no_such_path().to_status());
        };
        if !self.store().kinds.serves(&target.group, &target.resource) {
            return json_response(404, &ApiError::no_such_path().to_status());
        }
        let query = Query::parse(parts.uri.query());
        let view = View::of(&target, header(&parts, http::header::ACCEPT));
        if query.get("dryRun").is_some() {
            let refusal = ApiError::bad_request("the in-memory API does not take dryRun".into());
            return json_response(400, &refusal.to_status());
        }
        let answer = match parts.method {
            Method::GET if target.name.is_some() => self.get(&target, &view),
            Method::GET if query.flag("watch") => return self.watch(&target, &query, view),
            Method::GET => self.list(&target, &query, &view),
            Method::POST | Method::PUT | Method::PATCH | Method::DELETE => {
                let write = write::Write {
                    target: &target,
                    query: &query,
                    body: &body,
                    content_type,
                    user_agent: header(&parts, http::header::USER_AGENT),
                };
                self.write(&parts.method, &write, &view)
            }
            _ => Err(ApiError::method_not_allowed()),
        };
        match answer {
            Ok((code, value)) => json_response(code, &value),
            Err(refusal) => json_response(refusal.code, &refusal.to_status()),
        }
    }

    fn get(&self, target: &Target, view: &View) -> Result<(u16, Value), ApiError> {
        let key = write_key(target);
        match self.store().get(&key) {
            Some(object) if target.subresource.is_none() || target.is_status() => {
                Ok((200, view.show(&object)))
            }
            Some(_) => Err(ApiError::no_such_path()),
            None => Err(ApiError::not_found(&key.group, &key.resource, &key.name)),
        }
    }

    fn list(&self, target: &Target, query: &Query, view: &View) -> Result<(u16, Value), ApiError> {
        let labels = LabelSelector::parse(query.get("labelSelector").unwrap_or_default())
            .map_err(ApiError::bad_request)?;
        let fields = FieldSelector::parse(query.get("fieldSelector").unwrap_or_default())
            .map_err(ApiError::bad_request)?;
        let limit = query
            .get("limit")
            .and_then(|l| l.parse::<usize>().ok())
            .filter(|l| *l > 0);
        let store = self.store();
        let (revision, after) = match query.get("continue").filter(|c| !c.is_empty()) {
            Some(token) => {
                let mut parts = token.splitn(3, ':');
                let parsed = (
                    parts.next().and_then(|r| r.parse::<u64>().ok()),
                    parts.next(),
                    parts.next(),
                );
                let (Some(revision), Some(namespace), Some(name)) = parsed else {
                    return Err(ApiError::bad_request(format!(
                        "continue key is not valid: {token}"
                    )));
                };
                let after = Key {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    ..write_key(target)
                };
                (revision, Some(after))
            }
            None => (store.revision(), None),
        };
        let mut matching = store
            .objects(
                &target.group,
                &target.resource,
                target.namespace.as_deref(),
                after.as_ref(),
            )
            .filter(|(_, o)| labels.matches(o) && fields.matches(o));
        let mut items = Vec::new();
        let mut last = None;
        for (key, object) in matching.by_ref().take(limit.unwrap_or(usize::MAX)) {
            items.push(view.show(object));
            last = Some(key);
        }
        let mut metadata = json!({"resourceVersion": revision.to_string()});
        if let (Some(last), true) = (last, matching.next().is_some()) {
            metadata["continue"] =
                Value::String(format!("{revision}:{}:{}", last.namespace, last.name));
        }
        let kind = store
            .kinds
            .kind(&target.group, &target.resource)
            .map(str::to_string)
            .or_else(|| {
                items
                    .first()
                    .and_then(|i| i.get("kind"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .unwrap_or_default();
        let (list_kind, api_version) = view.list_type(&kind);
        Ok((
            200,
            json!({"kind": list_kind, "apiVersion": api_version, "metadata": metadata, "items": items}),
        ))
    }

    fn watch(
        &self,
        target: &Target,
        query: &Query,
        view: View,
    ) -> Result<Response<ResponseBody>, BoxError> {
        let selectors = LabelSelector::parse(query.get("labelSelector").unwrap_or_default())
            .and_then(|l| {
                Ok((
                    l,
                    FieldSelector::parse(query.get("fieldSelector").unwrap_or_default())?,
                ))
            });
        let (labels, fields) = match selectors {
            Ok(s) => s,
            Err(e) => return json_response(400, &ApiError::bad_request(e).to_status()),
        };
        let initial = query.flag("sendInitialEvents");
        let from = match query.get("resourceVersion") {
            _ if initial => None,
            Some("" | "0") | None => None,
            Some(rv) => match rv.parse::<u64>() {
                Ok(rv) => Some(rv),
                Err(_) => {
                    let refusal = ApiError::bad_request(format!("invalid resource version: {rv}"));
                    return json_response(400, &refusal.to_status());
                }
            },
        };
        let kind = self
            .store()
            .kinds
            .kind(&target.group, &target.resource)
            .unwrap_or_default()
            .to_string();
        let request = watch::Watch {
            group: target.group.clone(),
            resource: target.resource.clone(),
            kind,
            namespace: target.namespace.clone(),
            labels,
            fields,
            from,
            initial_events_end: initial,
            bookmarks: query.flag("allowWatchBookmarks"),
            timeout: query
                .get("timeoutSeconds")
                .and_then(|t| t.parse().ok())
                .map(std::time::Duration::from_secs),
            view,
        };
        let events = watch::stream(self.store.clone(), self.revisions.subscribe(), request);
        // A data frame of each event (an `http_body::Frame`, made by `Full` so that no other crate
        // is needed to name it).
        let frames = events
            .then(|chunk| async move { Full::new(chunk).frame().await })
            .filter_map(|frame| async move { frame })
            .map(|frame| frame.map_err(|never| match never {}));
        let body = StreamBody::new(frames).boxed_unsync();
        Ok(Response::builder()
            .status(200)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body)?)
    }

    fn write(
        &self,
        method: &Method,
        write: &write::Write<'_>,
        view: &View,
    ) -> Result<(u16, Value), ApiError> {
        let mut store = self.store();
        let before = store.revision();
        let answer = match *method {
            Method::POST => write::create(&mut store, write),
            Method::PUT => write::replace(&mut store, write),
            Method::PATCH => write::patch(&mut store, write),
            Method::DELETE if write.target.name.is_none() => {
                return Err(ApiError::method_not_allowed());
            }
            _ => write::delete(&mut store, write),
        };
        let after = store.revision();
        drop(store);
        if after != before {
            self.revisions.send_replace(after);
        }
        let (code, object) = answer?;
        let shown = if object.get("kind").and_then(Value::as_str) == Some("Status") {
            (*object).clone()
        } else {
            view.show(&object)
        };
        Ok((code, shown))
    }
}

/// The key a request's target names (its name, or none for a collection).
fn write_key(target: &Target) -> Key {
    Key {
        group: target.group.clone(),
        resource: target.resource.clone(),
        namespace: target.namespace.clone().unwrap_or_default(),
        name: target.name.clone().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests;
