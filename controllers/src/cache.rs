//! Caches of watched kinds that reconciles read instead of listing through the API.
//!
//! `run` watches Cluster API Machines anyway (their changes trigger LoadBalancers); the same watch
//! fills an [`ObjectCache`] (without `managedFields`), and a LoadBalancer's targets are taken from it
//! instead of listing every object of the kind in the namespace on each pass, which made a pass
//! cost O(objects in the namespace) in requests and bytes. A kind that is not cached, or whose
//! cache has not finished its first list, is listed through the API as before.
//!
//! A watch lags behind the writes that caused it, so an object capi-lb itself just wrote could be
//! read back older than it wrote it and written again on a stale resourceVersion (refused with a
//! conflict, then retried). The cache therefore keeps what capi-lb wrote (read-your-writes) until the
//! watch delivers that version or a newer one.
//!
//! Reconciles wait for the caches' first lists ([`Caches::synced`]) as controller-runtime's workers
//! do: the LoadBalancers' own watch delivers them at once, and a reconcile that ran before the
//! Machine cache was filled listed every Machine of the namespace through the API, several at a
//! time (at a warm restart with 3,000 Machines that was most of the controller's peak memory). A
//! cache whose list fails (not installed, not allowed) is not waited for: its readers fall back to
//! the API, as before.
//!
//! The caches reconciles list from (targets, infrastructure objects, the published Services and
//! EndpointSlices) are indexed ([`index`]): a listing looks only at the objects its lookup (a
//! selector's labels, annotation keys, an owner) can match. Objects are kept as compact JSON
//! ([`kept`]) and parsed again when read.

mod index;
mod kept;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicObject};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use index::{Indexing, Named};
pub use index::{Lookup, Selected};
use kept::{Kept, Kind};

/// How long a deletion capi-lb made hides the object from listings when the watch has not said so.
const TOMBSTONE: Duration = Duration::from_secs(60);

/// How long after the caches were made reconciles wait at most for their first lists; after that
/// they never wait, and a cache still not listed is read through the API.
const SYNC_WAIT: Duration = Duration::from_secs(60);

/// Where a cache is with its first list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FirstList {
    /// Not listed yet.
    Pending,
    /// Listed: reads are served from the cache.
    Synced,
    /// The list failed (and is retried with back-off): readers use the API until it succeeds.
    Failing,
}

/// A watched kind's objects, as the watch delivered them plus capi-lb's own newer writes.
pub struct ObjectCache {
    resource: ApiResource,
    kind: Kind,
    /// The watch's side of `store` (see [`Self::apply`]).
    writer: Mutex<Writer<Kept>>,
    store: Store<Kept>,
    /// What is kept of each object.
    prune: Prune,
    sync: tokio::sync::watch::Sender<FirstList>,
    /// Reconciles stopped waiting for its first list (said once).
    gave_up: std::sync::atomic::AtomicBool,
    /// What capi-lb wrote, by UID, until the watch catches up.
    written: Mutex<HashMap<String, DynamicObject>>,
    /// What capi-lb deleted, by UID, until the watch delivers the deletion (or a minute passed:
    /// the watch may have delivered it before capi-lb said so).
    deleted: Mutex<HashMap<String, Instant>>,
    /// When indexed: listings look only at the objects a [`Lookup`] can match.
    index: Option<Mutex<Indexing>>,
}

impl std::fmt::Debug for ObjectCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectCache")
            .field("kind", &self.resource.kind)
            .field("sync", &*self.sync.borrow())
            .finish_non_exhaustive()
    }
}

/// The resourceVersion as a number: etcd's revisions. Kubernetes calls them opaque, so an object
/// whose versions do not parse is never taken from the written copies.
fn revision(object: &impl Resource) -> Option<u64> {
    object.meta().resource_version.as_deref()?.parse().ok()
}

impl ObjectCache {
    /// A cache of `resource`, filled by [`Self::apply`] with its watch's events (whose objects went
    /// through `prune`), usable once the first list is complete.
    pub fn new(resource: ApiResource, prune: Prune) -> Self {
        let kind = Arc::new(resource.clone());
        let writer = Writer::new(kind.clone());
        Self {
            resource,
            store: writer.as_reader(),
            writer: Mutex::new(writer),
            kind,
            prune,
            sync: tokio::sync::watch::Sender::new(FirstList::Pending),
            gave_up: std::sync::atomic::AtomicBool::new(false),
            written: Mutex::new(HashMap::new()),
            deleted: Mutex::new(HashMap::new()),
            index: None,
        }
    }

    /// This cache with an index.
    pub fn indexed(self) -> Self {
        Self {
            index: Some(Mutex::default()),
            ..self
        }
    }

    /// What the watch delivered: into the index (the keys it adds), the store, and the index again
    /// (the keys it drops), in that order, so that the index never lacks what the store has; then
    /// [`Self::seen`].
    pub fn apply(&self, event: &Event<DynamicObject>) {
        self.arriving(event);
        self.write(event);
        self.seen(event);
    }

    fn write(&self, event: &Event<DynamicObject>) {
        self.writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .apply_watcher_event(&Kept::event(event));
    }

    /// What the watch delivers, before the store has it (for the index).
    fn arriving(&self, event: &Event<DynamicObject>) {
        self.with_index(|index| index.arriving(event));
    }

    /// Run `f` on the index, if the cache has one.
    fn with_index<T>(&self, f: impl FnOnce(&mut Indexing) -> T) -> Option<T> {
        let index = self.index.as_ref()?;
        Some(f(&mut index.lock().unwrap_or_else(PoisonError::into_inner)))
    }

    fn is_synced(&self) -> bool {
        *self.sync.borrow() == FirstList::Synced
    }

    /// Its watch failed to list: readers go to the API meanwhile, and [`Caches::synced`] does not
    /// wait for it. A later successful list (`InitDone`) makes it synced.
    pub fn failing(&self) {
        self.sync.send_if_modified(|s| {
            let pending = *s == FirstList::Pending;
            if pending {
                *s = FirstList::Failing;
            }
            pending
        });
    }

    fn is(&self, resource: &ApiResource) -> bool {
        self.resource.group == resource.group && self.resource.kind == resource.kind
    }

    /// The objects of `namespace` that `keep` accepts, each in its newest version known, or `None`
    /// while the first list has not completed. An indexed cache looks only at the objects `lookup`
    /// can match (`keep` must not accept any other); another looks at every object.
    pub fn list(
        &self,
        namespace: &str,
        lookup: &Lookup,
        keep: impl Fn(&DynamicObject) -> bool,
    ) -> Option<Vec<DynamicObject>> {
        self.list_in(Some(namespace), lookup, keep)
    }

    /// [`Self::list`] over every namespace (no index is used).
    pub fn list_everywhere(
        &self,
        keep: impl Fn(&DynamicObject) -> bool,
    ) -> Option<Vec<DynamicObject>> {
        self.list_in(None, &Lookup::everything(), keep)
    }

    fn list_in(
        &self,
        namespace: Option<&str>,
        lookup: &Lookup,
        keep: impl Fn(&DynamicObject) -> bool,
    ) -> Option<Vec<DynamicObject>> {
        if !self.is_synced() {
            return None;
        }
        let indexed =
            namespace.and_then(|ns| self.with_index(|index| index.candidates(ns, lookup)));
        let candidates: Vec<Arc<Kept>> = match indexed {
            Some(named) => named
                .iter()
                .filter_map(|n| self.store.get(&self.key(n)))
                .collect(),
            None => self.store.state(),
        };
        let in_scope = |ns: Option<&str>| namespace.is_none_or(|wanted| ns == Some(wanted));
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        let deleted = self.deleted.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Vec::new();
        let mut in_store = HashSet::new();
        for cached in candidates {
            if !in_scope(cached.meta().namespace.as_deref()) {
                continue;
            }
            if let Some(uid) = cached.uid() {
                if deleted.contains_key(&uid) {
                    continue;
                }
                in_store.insert(uid);
            }
            let ours = (cached.meta().uid.as_deref()).and_then(|uid| written.get(uid));
            match ours {
                Some(ours) if revision(ours) > revision(cached.as_ref()) => {
                    keep(ours).then(|| out.push(ours.clone()));
                }
                _ => {
                    if ours.is_some() {
                        // The watch caught up.
                        if let Some(uid) = cached.uid() {
                            written.remove(&uid);
                        }
                    }
                    if let Some(object) = cached.object()
                        && keep(&object)
                    {
                        out.push(object);
                    }
                }
            }
        }
        // What capi-lb wrote that the watch has not delivered yet: created, or (with an index)
        // changed so that the lookup matches it now and not the version in the store.
        for (uid, ours) in written.iter() {
            if in_scope(ours.metadata.namespace.as_deref())
                && !in_store.contains(uid)
                && !deleted.contains_key(uid)
                && keep(ours)
            {
                match self.store.get(&self.key(&Named::from(ours))) {
                    Some(cached) if revision(cached.as_ref()) >= revision(ours) => {
                        if let Some(object) = cached.object()
                            && keep(&object)
                        {
                            out.push(object);
                        }
                    }
                    _ => out.push(ours.clone()),
                }
            }
        }
        Some(out)
    }

    /// Call `f` with the metadata of every object the watch delivered (one at a time: the objects
    /// are not all parsed at once); nothing while the first list has not completed.
    pub fn for_each_metadata(&self, mut f: impl FnMut(&ObjectMeta)) {
        if !self.is_synced() {
            return;
        }
        for kept in self.store.state() {
            if let Some(meta) = kept.metadata() {
                f(&meta);
            }
        }
    }

    fn key(&self, named: &Named) -> ObjectRef<Kept> {
        ObjectRef::new_with(&named.name, self.kind.clone()).within(&named.namespace)
    }

    /// Object `name` of `namespace` in its newest version known: `None` while the first list has
    /// not completed, `Some(None)` when the cache does not have it (the caller may still get it
    /// through the API: the watch may not have delivered a new object yet).
    pub fn get(&self, namespace: &str, name: &str) -> Option<Option<DynamicObject>> {
        if !self.is_synced() {
            return None;
        }
        let key = ObjectRef::new_with(name, self.kind.clone()).within(namespace);
        let Some(cached) = self.store.get(&key) else {
            return Some(None);
        };
        let uid = cached.uid().unwrap_or_default();
        if self
            .deleted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&uid)
        {
            return Some(None);
        }
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        match written.get(&uid) {
            Some(ours) if revision(ours) > revision(cached.as_ref()) => Some(Some(ours.clone())),
            ours => {
                if ours.is_some() {
                    written.remove(&uid);
                }
                // One that does not parse back (never expected) is read through the API.
                cached.object().map(Some)
            }
        }
    }

    /// What the watch delivered (after the store has it): a copy of ours is dropped once the watch
    /// has that version or a newer one, or the object is gone; the end of a list makes the cache
    /// synced.
    fn seen(&self, event: &Event<DynamicObject>) {
        self.with_index(|index| index.seen(event));
        let (object, deleted) = match event {
            Event::Apply(o) | Event::InitApply(o) => (o, false),
            Event::Delete(o) => (o, true),
            Event::InitDone => {
                let first = self.sync.send_if_modified(|s| {
                    let changed = *s != FirstList::Synced;
                    *s = FirstList::Synced;
                    changed
                });
                if first {
                    tracing::info!(
                        kind = %self.resource.kind,
                        objects = self.store.len(),
                        "cache filled"
                    );
                }
                return;
            }
            Event::Init => return,
        };
        let Some(uid) = object.metadata.uid.as_deref() else {
            return;
        };
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        if written
            .get(uid)
            .is_some_and(|ours| deleted || revision(object) >= revision(ours))
        {
            written.remove(uid);
        }
        if deleted {
            self.deleted
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(uid);
        }
    }

    /// Remember that capi-lb just deleted the object with `uid`: it is not listed any more.
    pub fn gone(&self, uid: &str) {
        self.written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
        let mut deleted = self.deleted.lock().unwrap_or_else(PoisonError::into_inner);
        deleted.retain(|_, at| at.elapsed() < TOMBSTONE);
        deleted.insert(uid.to_string(), Instant::now());
    }

    /// [`Self::list`] as objects of type `K` (a typed kind cached as dynamic objects); an object
    /// that does not parse is left out.
    pub fn list_as<K: serde::de::DeserializeOwned>(
        &self,
        namespace: &str,
        lookup: &Lookup,
        keep: impl Fn(&DynamicObject) -> bool,
    ) -> Option<Vec<K>> {
        let listed = self.list(namespace, lookup, keep)?;
        Some(listed.into_iter().filter_map(typed).collect())
    }

    /// [`Self::list_everywhere`] as objects of type `K`; an object that does not parse is left out.
    pub fn list_everywhere_as<K: serde::de::DeserializeOwned>(
        &self,
        keep: impl Fn(&DynamicObject) -> bool,
    ) -> Option<Vec<K>> {
        Some(
            self.list_everywhere(keep)?
                .into_iter()
                .filter_map(typed)
                .collect(),
        )
    }

    /// [`Self::wrote`] for an object of a typed kind.
    pub fn wrote_as<K: serde::Serialize>(&self, object: &K) {
        if let Ok(dynamic) =
            serde_json::to_value(object).and_then(serde_json::from_value::<DynamicObject>)
        {
            self.wrote(&dynamic);
        }
    }

    /// Remember `object` as capi-lb just wrote it.
    pub fn wrote(&self, object: &DynamicObject) {
        if let Some(uid) = object.uid() {
            self.written
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(uid, {
                    let mut kept = object.clone();
                    (self.prune)(&mut kept);
                    kept
                });
        }
    }
}

/// A cached object as its typed kind; `None` when it does not parse.
pub fn typed<K: serde::de::DeserializeOwned>(object: DynamicObject) -> Option<K> {
    serde_json::to_value(object)
        .and_then(serde_json::from_value)
        .ok()
}

/// What a cache keeps of each object of its kind (see [`without_managed_fields`], [`target_view`], [`cluster_view`]):
/// applied to what the watch delivers and to what capi-lb wrote.
pub type Prune = fn(&mut DynamicObject);

/// The object without its `managedFields`, which no reconcile reads and which are often the largest
/// part of it.
pub fn without_managed_fields(object: &mut DynamicObject) {
    object.metadata.managed_fields = None;
}

/// A target (a Cluster API Machine) as reconciles read it: its metadata, `status.addresses`, and
/// the type and status of its conditions (`status.conditions`, `status.v1beta2.conditions`; the
/// readiness gates), and `spec.failureDomain`. The rest of its spec and of its status (with Cluster API running, most of a
/// Machine: phase, node info, condition reasons, messages and times) are not kept.
pub fn target_view(object: &mut DynamicObject) {
    without_managed_fields(object);
    let Some(data) = object.data.as_object_mut() else {
        return;
    };
    // Of the spec, only the failure domain (`spec.targetFailureDomains`).
    let failure_domain = data
        .remove("spec")
        .and_then(|mut spec| spec.get_mut("failureDomain").map(Value::take))
        .filter(|fd| !fd.is_null());
    if let Some(failure_domain) = failure_domain {
        data.insert("spec".into(), json!({"failureDomain": failure_domain}));
    }
    let Some(status) = data.get_mut("status").and_then(Value::as_object_mut) else {
        return;
    };
    let conditions = |list: Option<&Value>| -> Option<Value> {
        let kept = list?
            .as_array()?
            .iter()
            .map(|c| json!({"type": c.get("type"), "status": c.get("status")}))
            .collect();
        Some(Value::Array(kept))
    };
    let mut view = serde_json::Map::new();
    if let Some(addresses) = status.remove("addresses") {
        view.insert("addresses".into(), addresses);
    }
    if let Some(kept) = conditions(status.get("conditions")) {
        view.insert("conditions".into(), kept);
    }
    if let Some(kept) = conditions(status.get("v1beta2").and_then(|v| v.get("conditions"))) {
        view.insert("v1beta2".into(), json!({"conditions": kept}));
    }
    *status = view;
}

/// A Cluster as a LoadBalancer reads it: metadata and spec, not its status.
pub fn cluster_view(object: &mut DynamicObject) {
    without_managed_fields(object);
    if let Some(data) = object.data.as_object_mut() {
        data.remove("status");
    }
}

/// The caches a controller has, by kind.
#[derive(Debug)]
pub struct Caches {
    caches: Vec<Arc<ObjectCache>>,
    /// Reconciles wait for the first lists until then at most.
    wait_until: Instant,
}

impl Default for Caches {
    fn default() -> Self {
        Self {
            caches: Vec::new(),
            wait_until: Instant::now() + SYNC_WAIT,
        }
    }
}

impl Caches {
    /// Add the cache of a kind.
    pub fn add(&mut self, cache: Arc<ObjectCache>) {
        self.caches.push(cache);
    }

    /// Until every cache has completed its first list or failed it (at most [`SYNC_WAIT`] after
    /// the caches were made): what a reconcile does first, so that it reads the caches instead of
    /// listing through the API. Immediate once they have.
    pub async fn synced(&self) {
        for cache in &self.caches {
            let mut sync = cache.sync.subscribe();
            let deadline = tokio::time::Instant::from_std(self.wait_until);
            // A cache still pending at the deadline is left to the API fallback.
            if tokio::time::timeout_at(deadline, sync.wait_for(|s| *s != FirstList::Pending))
                .await
                .is_err()
                && !cache
                    .gave_up
                    .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                tracing::warn!(
                    kind = %cache.resource.kind,
                    "reconciling without this kind's cache: its first list did not complete within {SYNC_WAIT:?}, it is read through the API meanwhile"
                );
            }
        }
    }

    /// Tell the cache of `resource`'s kind (if any) what capi-lb just wrote.
    pub fn wrote(&self, resource: &ApiResource, object: &DynamicObject) {
        if let Some(cache) = self.of(resource) {
            cache.wrote(object);
        }
    }

    /// The cache of `resource`'s kind, if it is cached.
    pub fn of(&self, resource: &ApiResource) -> Option<&ObjectCache> {
        self.caches.iter().find(|c| c.is(resource)).map(Arc::as_ref)
    }

    /// [`Self::of`], shared (for a watch that tells the cache what it sees).
    pub fn shared(&self, resource: &ApiResource) -> Option<Arc<ObjectCache>> {
        self.caches.iter().find(|c| c.is(resource)).cloned()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn machine(name: &str, ns: &str, rv: &str, label: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"),
                         "resourceVersion": rv, "labels": {"role": label}}}))
        .unwrap()
    }

    /// The Machines' kind (also for the index's tests).
    pub(super) fn resource() -> ApiResource {
        ApiResource {
            group: "cluster.x-k8s.io".into(),
            version: "v1beta2".into(),
            api_version: "cluster.x-k8s.io/v1beta2".into(),
            kind: "Machine".into(),
            plural: "machines".into(),
        }
    }

    #[test]
    fn a_target_keeps_what_reconciles_read_and_a_cluster_its_spec() {
        use crate::loadbalancer::picking::{pending_gates, pick_address};
        use capi_lb_api::loadbalancer::{MachineAddressType, ReadinessGate};
        let mut machine: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "m", "namespace": "a", "uid": "u", "resourceVersion": "7",
                         "labels": {"role": "cp"}, "annotations": {"k": "v"},
                         "managedFields": [{"manager": "x"}]},
            "spec": {"clusterName": "c", "bootstrap": {"dataSecretName": "s"}},
            "status": {
                "phase": "Running", "nodeRef": {"name": "n"},
                "addresses": [{"type": "ExternalIP", "address": "192.0.2.1"},
                              {"type": "InternalIP", "address": "10.0.0.1"}],
                "conditions": [{"type": "Ready", "status": "True", "reason": "R",
                                "message": "long", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "v1beta2": {"conditions": [{"type": "NodeHealthy", "status": "False",
                                            "message": "m", "reason": "r"}]}}
        }))
        .unwrap();
        let full_value = serde_json::to_value(&machine).unwrap();
        target_view(&mut machine);
        let view = serde_json::to_value(&machine).unwrap();
        assert_eq!(
            view,
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
                "metadata": {"name": "m", "namespace": "a", "uid": "u", "resourceVersion": "7",
                             "labels": {"role": "cp"}, "annotations": {"k": "v"}},
                "status": {
                    "addresses": [{"type": "ExternalIP", "address": "192.0.2.1"},
                                  {"type": "InternalIP", "address": "10.0.0.1"}],
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "v1beta2": {"conditions": [{"type": "NodeHealthy", "status": "False"}]}}
            })
        );
        // What a reconcile reads is the same on the view.
        let order = [
            MachineAddressType::InternalIp,
            MachineAddressType::ExternalIp,
        ];
        assert_eq!(
            pick_address(&view, &order),
            pick_address(&full_value, &order)
        );
        assert_eq!(pick_address(&view, &order).as_deref(), Some("10.0.0.1"));
        let gates: Vec<ReadinessGate> = serde_json::from_value(json!([
            {"conditionType": "Ready"}, {"conditionType": "NodeHealthy"}
        ]))
        .unwrap();
        assert_eq!(
            pending_gates(&view, &gates),
            pending_gates(&full_value, &gates)
        );
        assert_eq!(pending_gates(&view, &gates), ["NodeHealthy"]);

        let mut cluster: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c", "namespace": "a"},
            "spec": {"paused": true}, "status": {"phase": "Provisioned"}
        }))
        .unwrap();
        cluster_view(&mut cluster);
        assert_eq!(cluster.data, json!({"spec": {"paused": true}}));
    }

    #[tokio::test]
    async fn reconciles_wait_for_the_first_lists_but_not_for_a_failing_one() {
        let mut other = resource();
        other.kind = "Cluster".into();
        let mut caches = Caches::default();
        caches.add(Arc::new(ObjectCache::new(
            resource(),
            without_managed_fields,
        )));
        caches.add(Arc::new(ObjectCache::new(
            other.clone(),
            without_managed_fields,
        )));
        let caches = Arc::new(caches);
        let waiting = {
            let caches = caches.clone();
            tokio::spawn(async move { caches.synced().await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "returned before any list");
        caches.of(&resource()).unwrap().apply(&Event::InitDone);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "returned with the Clusters not listed"
        );
        // The Clusters' list fails: their readers use the API, reconciles go on.
        caches.of(&other).unwrap().failing();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("still waiting once every cache synced or failed")
            .unwrap();
        assert!(
            caches
                .of(&other)
                .unwrap()
                .list("a", &Lookup::everything(), |_| true)
                .is_none()
        );
        // A later list that succeeds serves reads; a failure after that does not undo it.
        caches.of(&other).unwrap().apply(&Event::InitDone);
        caches.of(&other).unwrap().failing();
        assert!(
            caches
                .of(&other)
                .unwrap()
                .list("a", &Lookup::everything(), |_| true)
                .is_some()
        );
        tokio::time::timeout(Duration::from_millis(100), caches.synced())
            .await
            .unwrap();
    }

    #[test]
    fn lists_by_namespace_and_filter_and_reads_its_own_writes_until_the_watch_catches_up() {
        let cache = ObjectCache::new(resource(), without_managed_fields);
        let caches = {
            let mut c = Caches::default();
            c.add(Arc::new(cache));
            c
        };
        let cache = caches.of(&resource()).unwrap();
        // Not synced yet: the caller lists through the API.
        assert!(cache.list("a", &Lookup::everything(), |_| true).is_none());
        assert!(cache.get("a", "m1").is_none());

        cache.apply(&Event::Init);
        for m in [
            machine("m1", "a", "10", "cp"),
            machine("m2", "a", "11", "worker"),
            machine("m3", "b", "12", "cp"),
        ] {
            cache.apply(&Event::InitApply(m));
        }
        cache.apply(&Event::InitDone);
        let cp = |o: &DynamicObject| o.labels().get("role").map(String::as_str) == Some("cp");
        let names = |v: Vec<DynamicObject>| v.iter().map(|o| o.name_any()).collect::<Vec<_>>();
        assert_eq!(
            names(cache.list("a", &Lookup::everything(), cp).unwrap()),
            ["m1"]
        );
        assert_eq!(
            cache
                .list("a", &Lookup::everything(), |_| true)
                .unwrap()
                .len(),
            2
        );
        // Every namespace, filtered, with what capi-lb wrote in another one.
        cache.wrote(&machine("m4", "c", "13", "cp"));
        let mut everywhere = names(cache.list_everywhere(cp).unwrap());
        everywhere.sort();
        assert_eq!(everywhere, ["m1", "m3", "m4"]);
        cache.gone("uid-m4");

        // Our write is read back before the watch delivers it...
        let mut ours = machine("m1", "a", "20", "cp");
        ours.annotations_mut().insert("hook".into(), "x".into());
        cache.wrote(&ours);
        let listed = cache.list("a", &Lookup::everything(), cp).unwrap();
        assert_eq!(listed[0].resource_version().as_deref(), Some("20"));
        assert!(listed[0].annotations().contains_key("hook"));
        // ...and the watch's version once it is as new or newer.
        cache.write(&Event::Apply(machine("m1", "a", "21", "cp")));
        let listed = cache.list("a", &Lookup::everything(), cp).unwrap();
        assert_eq!(listed[0].resource_version().as_deref(), Some("21"));
        assert!(cache.written.lock().unwrap().is_empty());

        // A deleted object's copy goes with it.
        let mut gone = machine("m2", "a", "40", "worker");
        gone.annotations_mut().insert("hook".into(), "z".into());
        cache.wrote(&gone);
        cache.apply(&Event::Delete(machine("m2", "a", "41", "worker")));
        assert!(cache.written.lock().unwrap().is_empty());

        // An object capi-lb created is listed before the watch delivers it, and not after it
        // deleted it.
        let created = machine("m5", "a", "50", "cp");
        cache.wrote(&created);
        assert_eq!(
            names(cache.list("a", &Lookup::everything(), cp).unwrap()),
            ["m1", "m5"]
        );
        assert_eq!(
            names(cache.list("b", &Lookup::everything(), cp).unwrap()),
            ["m3"]
        );
        cache.gone("uid-m5");
        assert_eq!(
            names(cache.list("a", &Lookup::everything(), cp).unwrap()),
            ["m1"]
        );
        // One deleted that the watch still has is not listed either.
        cache.gone("uid-m1");
        assert!(
            cache
                .list("a", &Lookup::everything(), cp)
                .unwrap()
                .is_empty()
        );
        cache.apply(&Event::Delete(machine("m1", "a", "60", "cp")));
        // The watch's deletion clears its tombstone (m5's, never delivered, expires).
        assert!(!cache.deleted.lock().unwrap().contains_key("uid-m1"));
        assert!(cache.deleted.lock().unwrap().contains_key("uid-m5"));

        // By name, with the same read-your-writes.
        assert!(cache.get("a", "m9").unwrap().is_none());
        assert!(cache.get("b", "m3").unwrap().is_some());
        let mut ours = machine("m3", "b", "30", "cp");
        ours.annotations_mut().insert("hook".into(), "y".into());
        cache.wrote(&ours);
        let got = cache.get("b", "m3").unwrap().unwrap();
        assert_eq!(got.annotations()["hook"], "y");

        // Another kind is not cached.
        let mut other = resource();
        other.kind = "DockerMachine".into();
        assert!(caches.of(&other).is_none());
    }
}
