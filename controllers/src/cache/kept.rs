//! How a cache keeps an object: its name, namespace, UID and resourceVersion as metadata (what the
//! store's keys and the read-your-writes comparisons need), the whole object as compact JSON, parsed
//! again for the few objects a reconcile reads.
//!
//! A `serde_json` tree costs four to seven times the object's JSON size (a B-tree node of eleven
//! slots for every JSON object, however small, and a 32-byte value for every field): measured on
//! the objects of 1,000 converged LoadBalancers, 4.3 KB for a Machine's view whose JSON is under
//! 1 KB, 7 KB for an InMemoryLoadBalancer. A reconcile parses the handful it reads (its targets
//! through the index, one Cluster, one Service), so the copy is cheap where the tree was not.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::{ApiResource, DynamicObject, DynamicResourceScope};
use kube::runtime::watcher::Event;

/// An object as a cache keeps it (see the module docs).
#[derive(Clone, Debug)]
pub struct Kept {
    metadata: ObjectMeta,
    json: Box<str>,
}

impl Kept {
    /// `object` as kept.
    fn of(object: &DynamicObject) -> Self {
        Self {
            // A DynamicObject always serialises (its maps have string keys); one that did not
            // would read as missing (see `object`).
            json: serde_json::to_string(object)
                .unwrap_or_default()
                .into_boxed_str(),
            ..Self::key_of(object)
        }
    }

    /// What identifies `object` in a store, without its JSON (for a deletion).
    fn key_of(object: &DynamicObject) -> Self {
        let meta = &object.metadata;
        Self {
            metadata: ObjectMeta {
                name: meta.name.clone(),
                namespace: meta.namespace.clone(),
                uid: meta.uid.clone(),
                resource_version: meta.resource_version.clone(),
                ..ObjectMeta::default()
            },
            json: Box::default(),
        }
    }

    /// The object again; `None` if its JSON does not parse back (never expected: logged).
    pub fn object(&self) -> Option<DynamicObject> {
        serde_json::from_str(&self.json)
            .inspect_err(|e| {
                tracing::warn!(
                    name = self.metadata.name.as_deref().unwrap_or_default(),
                    "a cached object does not parse back, left out: {e}"
                );
            })
            .ok()
    }

    /// The object's whole metadata, without parsing the rest of it (`None` as [`Self::object`]).
    pub fn metadata(&self) -> Option<ObjectMeta> {
        #[derive(serde::Deserialize)]
        struct Head {
            #[serde(default)]
            metadata: ObjectMeta,
        }
        serde_json::from_str::<Head>(&self.json)
            .map(|head| head.metadata)
            .ok()
    }

    /// `event` with its objects as kept.
    pub fn event(event: &Event<DynamicObject>) -> Event<Self> {
        match event {
            Event::Apply(o) => Event::Apply(Self::of(o)),
            Event::InitApply(o) => Event::InitApply(Self::of(o)),
            Event::Delete(o) => Event::Delete(Self::key_of(o)),
            Event::Init => Event::Init,
            Event::InitDone => Event::InitDone,
        }
    }
}

/// Its kind, shared by every key of a store (an `ApiResource` in each key is five strings).
pub type Kind = Arc<ApiResource>;

impl Resource for Kept {
    type DynamicType = Kind;
    type Scope = DynamicResourceScope;

    fn kind(dt: &Kind) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &Kind) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &Kind) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &Kind) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &Kind) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_object_reads_back_as_it_was_kept() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m", "namespace": "a", "uid": "u", "resourceVersion": "7",
                         "labels": {"role": "cp"}, "annotations": {"k": "v"}},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}))
        .unwrap();
        let Event::Apply(kept) = Kept::event(&Event::Apply(object.clone())) else {
            unreachable!()
        };
        assert_eq!(kept.object().unwrap(), object);
        assert_eq!(kept.meta().resource_version.as_deref(), Some("7"));
        assert!(kept.meta().labels.is_none());
    }
}
