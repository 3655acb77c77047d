//! The in-memory API's objects: JSON objects by group, resource, namespace and name (listed in
//! that order, as etcd lists them); one resourceVersion counter bumped by every write that changes
//! an object and by no other; the fields the server sets (uid, creationTimestamp from the world's
//! clock, generation, namespace); the `status` subresource's isolation; two-phase deletion
//! (`deletionTimestamp` while finalizers remain); the garbage collector's cascade to dependents
//! whose owners are all gone; and a bounded history of changes for watches.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use capi_lb_providers::clock::SharedClock;
use jiff::Timestamp;
use serde_json::{Map, Value};

use super::kinds::{Kinds, has_status_subresource, tracks_generation};
use super::status::ApiError;

/// How many changes the history keeps for watches (older resourceVersions answer 410 Gone).
pub(super) const HISTORY: usize = 1000;

/// Where an object is kept.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Key {
    /// API group.
    pub group: String,
    /// Resource (plural).
    pub resource: String,
    /// Namespace (`""` for cluster-scoped objects).
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// What a change did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ChangeType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed.
    Deleted,
}

/// One change, for watches.
#[derive(Debug)]
pub(super) struct Change {
    /// The resourceVersion it made.
    pub revision: u64,
    /// The object's key.
    pub key: Key,
    /// What it did.
    pub kind: ChangeType,
    /// The object after it (its last state when deleted).
    pub object: Arc<Value>,
    /// The object before it (for a modification).
    pub previous: Option<Arc<Value>>,
}

/// A DELETE's preconditions.
#[derive(Clone, Debug, Default)]
pub(super) struct Preconditions {
    /// The object's UID must be this.
    pub uid: Option<String>,
    /// The object's resourceVersion must be this.
    pub resource_version: Option<String>,
}

/// The objects, the resourceVersion counter and the history.
#[derive(Debug)]
pub(super) struct Store {
    objects: BTreeMap<Key, Arc<Value>>,
    uids: HashMap<String, Key>,
    revision: u64,
    serial: u64,
    /// This store's own part of every UID it gives: two in-memory APIs (two tests of one binary,
    /// or two runs) never give the same UID, so objects tagged with one (an Octavia load balancer
    /// of a test on the shared real Octavia) are never taken for another's.
    stamp: u64,
    history: VecDeque<Arc<Change>>,
    /// Every change after this resourceVersion is in `history`.
    floor: u64,
    clock: SharedClock,
    /// The kinds known beyond the request paths.
    pub kinds: Kinds,
}

fn meta(object: &mut Value) -> Option<&mut Map<String, Value>> {
    object
        .as_object_mut()?
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
}

fn text<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn finalizers(object: &Value) -> Vec<&str> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn generation(object: &Value) -> Option<i64> {
    object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
}

/// What a change of generation compares: the object without metadata (and without status when the
/// status has its own subresource).
fn desired(object: &Value, status_separate: bool) -> Value {
    let mut copy = object.clone();
    if let Some(map) = copy.as_object_mut() {
        map.remove("metadata");
        map.remove("apiVersion");
        map.remove("kind");
        if status_separate {
            map.remove("status");
        }
    }
    copy
}

/// Set or remove `field` of `to`'s metadata to what it is in `from`'s.
fn carry(from: &Value, to: &mut Value, field: &str) {
    let value = from.get("metadata").and_then(|m| m.get(field)).cloned();
    if let Some(meta) = meta(to) {
        match value {
            Some(v) => meta.insert(field.to_string(), v),
            None => meta.remove(field),
        };
    }
}

/// A value no other store of this process, nor of another process at another time, starts with:
/// the process's id, the time and a count of the stores made, mixed.
fn stamp() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static MADE: AtomicU64 = AtomicU64::new(0);
    let made = MADE.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut x =
        nanos ^ (u64::from(std::process::id()) << 32) ^ made.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    // splitmix64's finaliser: every bit of the inputs reaches every bit of the stamp.
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl Store {
    /// An empty store stamping times from `clock`.
    pub fn new(clock: SharedClock, kinds: Kinds) -> Self {
        Self {
            objects: BTreeMap::new(),
            uids: HashMap::new(),
            revision: 0,
            serial: 0,
            stamp: stamp(),
            history: VecDeque::new(),
            floor: 0,
            clock,
            kinds,
        }
    }

    /// The current time, to the second, as the apiserver writes it.
    pub fn now(&self) -> String {
        let now = self.clock.now();
        Timestamp::from_second(now.as_second())
            .unwrap_or(now)
            .to_string()
    }

    /// The latest resourceVersion.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The object at `key`.
    pub fn get(&self, key: &Key) -> Option<Arc<Value>> {
        self.objects.get(key).cloned()
    }

    /// The objects of `group`/`resource` (of `namespace`, or all), in key order, after `after`.
    pub fn objects<'a>(
        &'a self,
        group: &'a str,
        resource: &'a str,
        namespace: Option<&'a str>,
        after: Option<&Key>,
    ) -> impl Iterator<Item = (&'a Key, &'a Arc<Value>)> + 'a {
        let start = match after {
            Some(key) => Bound::Excluded(key.clone()),
            None => Bound::Included(Key {
                group: group.to_string(),
                resource: resource.to_string(),
                namespace: namespace.unwrap_or_default().to_string(),
                name: String::new(),
            }),
        };
        self.objects
            .range((start, Bound::Unbounded))
            .take_while(move |(k, _)| {
                k.group == group
                    && k.resource == resource
                    && namespace.is_none_or(|ns| k.namespace == ns)
            })
    }

    /// A fresh UID: unique to this store ([`Store::stamp`]), its first part varied (capi-lb and
    /// the simulated peers derive names from UID prefixes).
    fn next_uid(&mut self) -> String {
        loop {
            self.serial += 1;
            let n = self.serial;
            let mixed = (n as u32).wrapping_mul(0x9E37_79B1);
            let s = self.stamp;
            let uid = format!(
                "{mixed:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
                (s >> 32) & 0xffff,
                (s >> 20) & 0xfff,
                (s >> 8) & 0xfff,
                ((s & 0xff) << 40) | (n & 0xff_ffff_ffff)
            );
            if !self.uids.contains_key(&uid) {
                return uid;
            }
        }
    }

    /// A name for `generateName` `prefix` that no object of `key`'s resource and namespace has.
    pub fn generate_name(&mut self, key: &Key, prefix: &str) -> String {
        const LETTERS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        loop {
            self.serial += 1;
            let mut n = self.serial.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let suffix: String = (0..5)
                .map(|_| {
                    let c = LETTERS[(n % LETTERS.len() as u64) as usize];
                    n /= LETTERS.len() as u64;
                    char::from(c)
                })
                .collect();
            let name = format!("{prefix}{suffix}");
            let candidate = Key {
                name: name.clone(),
                ..key.clone()
            };
            if !self.objects.contains_key(&candidate) {
                return name;
            }
        }
    }

    fn record(
        &mut self,
        key: &Key,
        kind: ChangeType,
        object: Arc<Value>,
        previous: Option<Arc<Value>>,
    ) {
        self.history.push_back(Arc::new(Change {
            revision: self.revision,
            key: key.clone(),
            kind,
            object,
            previous,
        }));
        while self.history.len() > HISTORY {
            if let Some(oldest) = self.history.pop_front() {
                self.floor = oldest.revision;
            }
        }
    }

    /// The changes after `revision`; `Err` with the oldest revision kept when some are no
    /// longer kept.
    pub fn changes_since(&self, revision: u64) -> Result<Vec<Arc<Change>>, u64> {
        if revision < self.floor {
            return Err(self.floor);
        }
        let first = self.history.partition_point(|c| c.revision <= revision);
        Ok(self.history.range(first..).cloned().collect())
    }

    /// Check that `object`'s name and namespace, when it has them, are `key`'s.
    fn check_identity(key: &Key, object: &Value) -> Result<(), ApiError> {
        if let Some(name) = text(object, "name")
            && name != key.name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({name}) does not match the name on the URL ({})",
                key.name
            )));
        }
        if let Some(ns) = text(object, "namespace")
            && !key.namespace.is_empty()
            && ns != key.namespace
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        }
        Ok(())
    }

    /// Keep one of the objects the API starts with: its UID, creationTimestamp and generation
    /// filled in where it has none.
    pub fn insert_initial(&mut self, key: Key, mut object: Value) {
        self.kinds.serve(&key.group, &key.resource);
        let now = Value::String(self.now());
        let uid = match text(&object, "uid") {
            Some(uid) => uid.to_string(),
            None => self.next_uid(),
        };
        self.revision += 1;
        let tracked = tracks_generation(&key.group, &key.resource);
        if let Some(meta) = meta(&mut object) {
            meta.insert("name".into(), Value::String(key.name.clone()));
            if key.namespace.is_empty() {
                meta.remove("namespace");
            } else {
                meta.insert("namespace".into(), Value::String(key.namespace.clone()));
            }
            meta.insert("uid".into(), Value::String(uid.clone()));
            meta.entry("creationTimestamp").or_insert(now);
            if tracked {
                meta.entry("generation").or_insert(Value::from(1));
            }
            meta.insert(
                "resourceVersion".into(),
                Value::String(self.revision.to_string()),
            );
        }
        self.uids.insert(uid, key.clone());
        self.objects.insert(key, Arc::new(object));
        self.floor = self.revision;
    }

    /// Create `object` at `key` (which must be free): the server's fields set.
    pub fn create(&mut self, key: &Key, mut object: Value) -> Result<Arc<Value>, ApiError> {
        Self::check_identity(key, &object)?;
        if self.objects.contains_key(key) {
            return Err(ApiError::already_exists(
                &key.group,
                &key.resource,
                &key.name,
            ));
        }
        if let Some(rv) = text(&object, "resourceVersion") {
            return Err(ApiError::bad_request(format!(
                "resourceVersion should not be set on objects to be created (found {rv})"
            )));
        }
        let uid = self.next_uid();
        let now = Value::String(self.now());
        self.revision += 1;
        let tracked = tracks_generation(&key.group, &key.resource);
        if let Some(meta) = meta(&mut object) {
            meta.insert("name".into(), Value::String(key.name.clone()));
            if key.namespace.is_empty() {
                meta.remove("namespace");
            } else {
                meta.insert("namespace".into(), Value::String(key.namespace.clone()));
            }
            meta.insert("uid".into(), Value::String(uid.clone()));
            meta.insert("creationTimestamp".into(), now);
            meta.remove("deletionTimestamp");
            meta.remove("deletionGracePeriodSeconds");
            if tracked {
                meta.insert("generation".into(), Value::from(1));
            }
            meta.insert(
                "resourceVersion".into(),
                Value::String(self.revision.to_string()),
            );
        }
        let object = Arc::new(object);
        self.uids.insert(uid, key.clone());
        self.objects.insert(key.clone(), object.clone());
        self.record(key, ChangeType::Added, object.clone(), None);
        Ok(object)
    }

    /// Replace the object at `key` with `new` (through the `status` subresource when `status`):
    /// the server's fields kept, the status or everything but it kept as the subresource says,
    /// `generation` bumped when the desired state changed; nothing is written (and the
    /// resourceVersion stays) when the result equals the stored object. A write that leaves an
    /// object being deleted without finalizers removes it.
    pub fn update(
        &mut self,
        key: &Key,
        mut new: Value,
        status: bool,
    ) -> Result<Arc<Value>, ApiError> {
        let old = self
            .get(key)
            .ok_or_else(|| ApiError::not_found(&key.group, &key.resource, &key.name))?;
        Self::check_identity(key, &new)?;
        if let Some(rv) = text(&new, "resourceVersion")
            && Some(rv) != text(&old, "resourceVersion")
        {
            return Err(ApiError::stale(&key.group, &key.resource, &key.name));
        }
        let separate = has_status_subresource(&key.group, &key.resource);
        if status {
            let mut only = (*old).clone();
            if let Some(map) = only.as_object_mut() {
                match new.get("status") {
                    Some(s) => map.insert("status".into(), s.clone()),
                    None => map.remove("status"),
                };
            }
            carry(&new, &mut only, "managedFields");
            new = only;
        } else if separate && let Some(map) = new.as_object_mut() {
            match old.get("status") {
                Some(s) => map.insert("status".into(), s.clone()),
                None => map.remove("status"),
            };
        }
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "resourceVersion",
        ] {
            carry(&old, &mut new, field);
        }
        for field in ["apiVersion", "kind"] {
            if new.get(field).is_none()
                && let (Some(value), Some(map)) = (old.get(field), new.as_object_mut())
            {
                map.insert(field.into(), value.clone());
            }
        }
        if text(&old, "deletionTimestamp").is_some() {
            let before = finalizers(&old);
            let mut added: Vec<&str> = finalizers(&new)
                .into_iter()
                .filter(|f| !before.contains(f))
                .collect();
            added.sort_unstable();
            added.dedup();
            if !added.is_empty() {
                let kind = old
                    .get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or(&key.resource);
                let listed: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
                let message = format!(
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    listed.join(", ")
                );
                return Err(ApiError::invalid(
                    &key.group,
                    kind,
                    &key.name,
                    &[("metadata.finalizers", "FieldValueForbidden", message)],
                ));
            }
        }
        if tracks_generation(&key.group, &key.resource)
            && desired(&old, separate) != desired(&new, separate)
            && let Some(meta) = meta(&mut new)
        {
            let next = generation(&old).unwrap_or(0) + 1;
            meta.insert("generation".into(), Value::from(next));
        }
        if new == *old {
            return Ok(old);
        }
        self.revision += 1;
        if let Some(meta) = meta(&mut new) {
            meta.insert(
                "resourceVersion".into(),
                Value::String(self.revision.to_string()),
            );
        }
        if text(&new, "deletionTimestamp").is_some() && finalizers(&new).is_empty() {
            let removed = self.remove(key, new, Some(old));
            self.collect_garbage(&removed);
            return Ok(removed);
        }
        let new = Arc::new(new);
        self.objects.insert(key.clone(), new.clone());
        self.record(key, ChangeType::Modified, new.clone(), Some(old));
        Ok(new)
    }

    /// Take the object at `key` out, its last state `last` (with its new resourceVersion).
    fn remove(&mut self, key: &Key, last: Value, previous: Option<Arc<Value>>) -> Arc<Value> {
        self.objects.remove(key);
        if let Some(uid) = text(&last, "uid") {
            self.uids.remove(uid);
        }
        let last = Arc::new(last);
        self.record(key, ChangeType::Deleted, last.clone(), previous);
        last
    }

    /// Delete the object at `key`: with finalizers, only mark it (`deletionTimestamp` from the
    /// clock, `deletionGracePeriodSeconds` 0, `generation` bumped); without, remove it, and when
    /// `cascade`, its dependents whose owners are all gone. Returns the object and whether it is
    /// gone.
    pub fn delete(
        &mut self,
        key: &Key,
        preconditions: &Preconditions,
        cascade: bool,
    ) -> Result<(Arc<Value>, bool), ApiError> {
        let old = self
            .get(key)
            .ok_or_else(|| ApiError::not_found(&key.group, &key.resource, &key.name))?;
        let failed = |what: &str, wanted: &str, found: Option<&str>| {
            let why = format!(
                "Precondition failed: {what} in precondition: {wanted}, {what} in object meta: {}",
                found.unwrap_or_default()
            );
            ApiError::conflict(&key.group, &key.resource, &key.name, &why)
        };
        if let Some(uid) = &preconditions.uid
            && Some(uid.as_str()) != text(&old, "uid")
        {
            return Err(failed("UID", uid, text(&old, "uid")));
        }
        if let Some(rv) = &preconditions.resource_version
            && Some(rv.as_str()) != text(&old, "resourceVersion")
        {
            return Err(failed("ResourceVersion", rv, text(&old, "resourceVersion")));
        }
        Ok(self.delete_found(key, old, cascade))
    }

    fn delete_found(&mut self, key: &Key, old: Arc<Value>, cascade: bool) -> (Arc<Value>, bool) {
        let mut new = (*old).clone();
        if !finalizers(&old).is_empty() {
            if text(&old, "deletionTimestamp").is_some() {
                return (old, false);
            }
            let now = Value::String(self.now());
            self.revision += 1;
            let bumped = generation(&old).filter(|g| *g > 0).map(|g| g + 1);
            if let Some(meta) = meta(&mut new) {
                meta.insert("deletionTimestamp".into(), now);
                meta.insert("deletionGracePeriodSeconds".into(), Value::from(0));
                if let Some(g) = bumped {
                    meta.insert("generation".into(), Value::from(g));
                }
                meta.insert(
                    "resourceVersion".into(),
                    Value::String(self.revision.to_string()),
                );
            }
            let new = Arc::new(new);
            self.objects.insert(key.clone(), new.clone());
            self.record(key, ChangeType::Modified, new.clone(), Some(old));
            return (new, false);
        }
        self.revision += 1;
        if let Some(meta) = meta(&mut new) {
            meta.insert(
                "resourceVersion".into(),
                Value::String(self.revision.to_string()),
            );
        }
        let removed = self.remove(key, new, None);
        if cascade {
            self.collect_garbage(&removed);
        }
        (removed, true)
    }

    /// The garbage collector after `removed` went: every object whose owner references name only
    /// owners that are gone is deleted too (marked, when it has finalizers), and so on down.
    fn collect_garbage(&mut self, removed: &Value) {
        let mut gone: VecDeque<(String, String)> = VecDeque::new();
        if let Some(uid) = text(removed, "uid") {
            let namespace = text(removed, "namespace").unwrap_or_default();
            gone.push_back((uid.to_string(), namespace.to_string()));
        }
        while let Some((uid, namespace)) = gone.pop_front() {
            let dependents: Vec<(Key, Arc<Value>)> = self
                .objects
                .iter()
                .filter(|(k, _)| namespace.is_empty() || k.namespace == namespace)
                .filter(|(_, o)| {
                    let owners: Vec<&str> = o
                        .pointer("/metadata/ownerReferences")
                        .and_then(Value::as_array)
                        .map(|r| r.iter().filter_map(|r| r.get("uid")?.as_str()).collect())
                        .unwrap_or_default();
                    owners.contains(&uid.as_str())
                        && owners.iter().all(|o| !self.uids.contains_key(*o))
                })
                .map(|(k, o)| (k.clone(), o.clone()))
                .collect();
            for (key, object) in dependents {
                let (last, removed) = self.delete_found(&key, object, false);
                if removed && let Some(uid) = text(&last, "uid") {
                    gone.push_back((uid.to_string(), key.namespace.clone()));
                }
            }
        }
    }
}
