//! Careful metadata edits: adding or removing finalizers, owner references and capi-lb's own
//! annotations with a JSON patch that first tests the object's resourceVersion (a concurrent change
//! makes the patch fail and the reconcile retry instead of silently overwriting someone else's
//! finalizers or owner references), and changing targets' annotations with a merge patch of only
//! the keys that change.

use std::collections::BTreeMap;
use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use capi_lb_api::constants::FIELD_MANAGER;

/// Parameters of capi-lb's patches that are not server-side applies: they name capi-lb as the field
/// manager, so an object's `managedFields` say which of its fields capi-lb set (the apiserver would
/// otherwise name the client library).
pub fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// Set each `(path, value)` of `obj` in one JSON patch that first tests the resourceVersion `obj`
/// was read at.
async fn guarded_patch<K>(api: &Api<K>, obj: &K, sets: &[(&str, Value)]) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut ops = vec![json!({
        "op": "test", "path": "/metadata/resourceVersion", "value": obj.meta().resource_version,
    })];
    ops.extend(
        sets.iter()
            .map(|(path, value)| json!({"op": "add", "path": path, "value": value})),
    );
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(ops)).map_err(kube::Error::SerdeError)?;
    api.patch(&obj.name_any(), &patch_params(), &Patch::Json::<()>(patch))
        .await
}

/// Removing from an object that is already gone has nothing left to do.
fn gone_is_done<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(e) if crate::error::is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Add `finalizer` unless present. Returns the updated object (or the unchanged one).
pub async fn add_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    mark(
        api,
        obj,
        Marks {
            finalizer: Some(finalizer),
            ..Marks::default()
        },
    )
    .await
}

/// What capi-lb keeps on an object it works with: each is added unless present (an annotation
/// with another value is set).
#[derive(Default, Debug)]
pub struct Marks<'a> {
    /// A finalizer.
    pub finalizer: Option<&'a str>,
    /// One annotation and its value.
    pub annotation: Option<(&'a str, String)>,
    /// Owner references (matched by UID; one whose apiVersion or kind differs is replaced, e.g. by
    /// the version Cluster API serves after an upgrade from v1beta1).
    pub owners: Vec<OwnerReference>,
}

/// Make `obj` carry `marks` in one guarded patch; no request when it already does. Returns the
/// updated object (or the unchanged one).
pub async fn mark<K>(api: &Api<K>, obj: &K, marks: Marks<'_>) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut sets: Vec<(&str, Value)> = Vec::new();
    let missing: Vec<OwnerReference> = marks
        .owners
        .into_iter()
        .filter(|o| {
            !obj.owner_references()
                .iter()
                .any(|r| r.uid == o.uid && r.api_version == o.api_version && r.kind == o.kind)
        })
        .collect();
    if !missing.is_empty() {
        let mut refs: Vec<OwnerReference> = obj
            .owner_references()
            .iter()
            .filter(|r| !missing.iter().any(|o| o.uid == r.uid))
            .cloned()
            .collect();
        refs.extend(missing);
        sets.push(("/metadata/ownerReferences", json!(refs)));
    }
    if let Some(finalizer) = marks.finalizer
        && !obj.finalizers().iter().any(|f| f == finalizer)
    {
        let mut finalizers = obj.finalizers().to_vec();
        finalizers.push(finalizer.to_string());
        sets.push(("/metadata/finalizers", json!(finalizers)));
    }
    if let Some((key, value)) = marks.annotation
        && obj.annotations().get(key) != Some(&value)
    {
        let mut annotations = obj.annotations().clone();
        annotations.insert(key.to_string(), value);
        sets.push(("/metadata/annotations", json!(annotations)));
    }
    if sets.is_empty() {
        return Ok(obj.clone());
    }
    guarded_patch(api, obj, &sets).await
}

/// Remove `finalizer` if present.
pub async fn remove_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    if !obj.finalizers().iter().any(|f| f == finalizer) {
        return Ok(());
    }
    let finalizers: Vec<&String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .collect();
    gone_is_done(guarded_patch(api, obj, &[("/metadata/finalizers", json!(finalizers))]).await)
}

/// Claim `obj`: add the controller owner reference `owner`, the finalizer `finalizer` and the
/// annotation `annotation` (each unless present) in one guarded patch. Returns the updated object
/// (or the unchanged one).
pub async fn claim<K>(
    api: &Api<K>,
    obj: &K,
    owner: OwnerReference,
    finalizer: &str,
    annotation: Option<(&str, String)>,
) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    mark(
        api,
        obj,
        Marks {
            finalizer: Some(finalizer),
            annotation,
            owners: vec![owner],
        },
    )
    .await
}

/// Remove the finalizer `finalizer` and, unless `keep_owner_reference`, the owner reference with
/// `uid`, in one guarded patch.
pub async fn release<K>(
    api: &Api<K>,
    obj: &K,
    uid: &str,
    finalizer: &str,
    keep_owner_reference: bool,
) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let has_ref = !keep_owner_reference && obj.owner_references().iter().any(|r| r.uid == uid);
    let has_finalizer = obj.finalizers().iter().any(|f| f == finalizer);
    if !has_ref && !has_finalizer {
        return Ok(());
    }
    let refs: Vec<&OwnerReference> = obj
        .owner_references()
        .iter()
        .filter(|r| keep_owner_reference || r.uid != uid)
        .collect();
    let finalizers: Vec<&String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .collect();
    gone_is_done(
        guarded_patch(
            api,
            obj,
            &[
                ("/metadata/ownerReferences", json!(refs)),
                ("/metadata/finalizers", json!(finalizers)),
            ],
        )
        .await,
    )
}

/// Change `obj`'s annotations into `annotations` with a JSON merge patch of only the keys that
/// differ (set, or removed as `null`). Keys someone else adds or changes meanwhile are not in the
/// patch, so nothing of theirs is lost, and their concurrent writes (Cluster API updates Machines
/// often while they come up) do not make it fail, as a patch guarded by the resourceVersion would.
/// Returns the updated object.
pub async fn patch_annotations<K>(
    api: &Api<K>,
    obj: &K,
    annotations: &BTreeMap<String, String>,
) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let current = obj.annotations();
    let mut delta = serde_json::Map::new();
    for (key, value) in annotations {
        if current.get(key) != Some(value) {
            delta.insert(key.clone(), json!(value));
        }
    }
    for key in current.keys() {
        if !annotations.contains_key(key) {
            delta.insert(key.clone(), Value::Null);
        }
    }
    api.patch(
        &obj.name_any(),
        &patch_params(),
        &Patch::Merge(json!({"metadata": {"annotations": delta}})),
    )
    .await
}

/// The controller owner reference of `obj`, if any.
pub fn controller_of(obj: &impl Resource) -> Option<&OwnerReference> {
    obj.meta()
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|r| r.controller == Some(true))
}

/// True when `obj`'s controller owner reference points at the object with `uid`.
pub fn is_controlled_by(obj: &impl Resource, uid: &str) -> bool {
    controller_of(obj).is_some_and(|r| r.uid == uid)
}
