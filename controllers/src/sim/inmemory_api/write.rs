//! The writes of the in-memory API, from request to stored object: POST (create, `generateName`),
//! PUT, the patch types (`application/merge-patch+json`, `application/json-patch+json`,
//! `application/apply-patch+yaml` as JSON, which kube sends) with field managers recorded, and
//! DELETE with its preconditions and propagation. A strategic merge patch (kube-lease-manager
//! sends them on Leases) is taken for Kubernetes' own kinds as a merge patch whose map and set
//! lists merge item by item (the list types of [`super::fields`]; no `$patch` directives), and
//! refused (415) for custom resources, as the apiserver does.

use std::sync::Arc;

use serde_json::{Value, json};

use super::apply::{Writer, apply, record_update};
use super::fields::merge;
use super::kinds::{has_status_subresource, returns_deleted_object, takes_strategic_merge_patch};
use super::request::{Query, Target};
use super::status::ApiError;
use super::store::{Key, Preconditions, Store};

/// A write's request, its body read.
#[derive(Clone, Copy, Debug)]
pub(super) struct Write<'a> {
    /// What the path names.
    pub target: &'a Target,
    /// The query.
    pub query: &'a Query,
    /// The body.
    pub body: &'a [u8],
    /// The `Content-Type` header.
    pub content_type: &'a str,
    /// The `User-Agent` header (its first word names the field manager when the query names none).
    pub user_agent: &'a str,
}

/// What a write answers: a status code and a body.
pub(super) type Answer = (u16, Arc<Value>);

impl Write<'_> {
    fn key(&self, name: &str) -> Key {
        Key {
            group: self.target.group.clone(),
            resource: self.target.resource.clone(),
            namespace: self.target.namespace.clone().unwrap_or_default(),
            name: name.to_string(),
        }
    }

    fn manager(&self) -> String {
        match self.query.get("fieldManager") {
            Some(m) if !m.is_empty() => m.to_string(),
            _ => self
                .user_agent
                .split('/')
                .next()
                .unwrap_or_default()
                .to_string(),
        }
    }

    fn body_json(&self) -> Result<Value, ApiError> {
        let value: Value = serde_json::from_slice(self.body).map_err(|e| {
            ApiError::bad_request(format!("the body of the request is not JSON: {e}"))
        })?;
        if value.is_object() {
            Ok(value)
        } else {
            Err(ApiError::bad_request(
                "the body of the request is no JSON object".into(),
            ))
        }
    }

    /// The body as an object of this resource: `apiVersion` and `kind` filled in when missing.
    fn object(&self, store: &Store) -> Result<Value, ApiError> {
        let mut object = self.body_json()?;
        if object.get("apiVersion").is_none() {
            object["apiVersion"] = Value::String(self.target.api_version());
        }
        if object.get("kind").is_none()
            && let Some(kind) = store.kinds.kind(&self.target.group, &self.target.resource)
        {
            object["kind"] = Value::String(kind.to_string());
        }
        Ok(object)
    }

    /// The name the path gives, for writes that need one.
    fn name(&self) -> Result<&str, ApiError> {
        self.target
            .name
            .as_deref()
            .ok_or_else(ApiError::method_not_allowed)
    }

    fn check_subresource(&self) -> Result<(), ApiError> {
        match self.target.subresource.as_deref() {
            None => Ok(()),
            Some("status") if has_status_subresource(&self.target.group, &self.target.resource) => {
                Ok(())
            }
            Some(_) => Err(ApiError::no_such_path()),
        }
    }
}

fn writer<'a>(
    write: &Write<'a>,
    manager: &'a str,
    api_version: &'a str,
    time: &'a str,
) -> Writer<'a> {
    Writer {
        manager,
        api_version,
        resource: &write.target.resource,
        status: write.target.is_status(),
        status_separate: has_status_subresource(&write.target.group, &write.target.resource),
        time,
    }
}

/// POST: create the object of the body (its name from `metadata.name` or `generateName`).
pub(super) fn create(store: &mut Store, write: &Write<'_>) -> Result<Answer, ApiError> {
    if write.target.name.is_some() {
        return Err(ApiError::method_not_allowed());
    }
    let mut object = write.object(store)?;
    let given = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(str::to_string);
    let prefix = object
        .pointer("/metadata/generateName")
        .and_then(Value::as_str)
        .map(str::to_string);
    let name = match (given, prefix) {
        (Some(name), _) if !name.is_empty() => name,
        (_, Some(prefix)) if !prefix.is_empty() => store.generate_name(&write.key(""), &prefix),
        _ => {
            let kind = object
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            return Err(ApiError::invalid(
                &write.target.group,
                &kind,
                "",
                &[(
                    "metadata.name",
                    "FieldValueRequired",
                    "Required value: name or generateName is required".into(),
                )],
            ));
        }
    };
    object["metadata"]["name"] = Value::String(name.clone());
    let (manager, api_version, time) = (write.manager(), write.target.api_version(), store.now());
    record_update(
        None,
        &mut object,
        &writer(write, &manager, &api_version, &time),
    );
    let created = store.create(&write.key(&name), object)?;
    Ok((201, created))
}

/// PUT: replace the object (or its status) with the body.
pub(super) fn replace(store: &mut Store, write: &Write<'_>) -> Result<Answer, ApiError> {
    write.check_subresource()?;
    let key = write.key(write.name()?);
    let old = store
        .get(&key)
        .ok_or_else(|| ApiError::not_found(&key.group, &key.resource, &key.name))?;
    let mut new = write.object(store)?;
    let (manager, api_version, time) = (write.manager(), write.target.api_version(), store.now());
    record_update(
        Some(&old),
        &mut new,
        &writer(write, &manager, &api_version, &time),
    );
    Ok((200, store.update(&key, new, write.target.is_status())?))
}

/// PATCH: a merge patch, a JSON patch or a server-side apply (which creates a missing object).
pub(super) fn patch(store: &mut Store, write: &Write<'_>) -> Result<Answer, ApiError> {
    write.check_subresource()?;
    let key = write.key(write.name()?);
    let status = write.target.is_status();
    let content_type = write
        .content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim();
    let (manager, api_version, time) = (write.manager(), write.target.api_version(), store.now());
    let writer = writer(write, &manager, &api_version, &time);
    let old = store.get(&key);
    if content_type == "application/apply-patch+yaml" {
        if write.query.get("fieldManager").is_none_or(str::is_empty) {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                &[(
                    "fieldManager",
                    "FieldValueRequired",
                    "Required value: is required for apply patch".into(),
                )],
            ));
        }
        let applied = write.body_json()?;
        let force = write.query.flag("force");
        let Some(old) = old else {
            if status {
                return Err(ApiError::not_found(&key.group, &key.resource, &key.name));
            }
            let mut object = apply(&json!({}), &applied, &writer, force)
                .map_err(|c| ApiError::apply_conflict(&c))?;
            if object.get("apiVersion").is_none() {
                object["apiVersion"] = Value::String(api_version.clone());
            }
            return Ok((201, store.create(&key, object)?));
        };
        let new =
            apply(&old, &applied, &writer, force).map_err(|c| ApiError::apply_conflict(&c))?;
        return Ok((200, store.update(&key, new, status)?));
    }
    let old = old.ok_or_else(|| ApiError::not_found(&key.group, &key.resource, &key.name))?;
    let mut new = (*old).clone();
    match content_type {
        "application/merge-patch+json" => json_patch::merge(&mut new, &write.body_json()?),
        "application/strategic-merge-patch+json" if takes_strategic_merge_patch(&key.group) => {
            new = merge(&new, &write.body_json()?, &key.resource);
        }
        "application/json-patch+json" => {
            let operations: json_patch::Patch = serde_json::from_slice(write.body)
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(&mut new, &operations)
                .map_err(|e| ApiError::unprocessable(e.to_string()))?;
        }
        other => return Err(ApiError::unsupported_media_type(other)),
    }
    record_update(Some(&old), &mut new, &writer);
    Ok((200, store.update(&key, new, status)?))
}

/// DELETE of one object: its preconditions and propagation policy from the body (DeleteOptions)
/// or the query; answers the object, or a `Status` for the core kinds that answer so.
pub(super) fn delete(store: &mut Store, write: &Write<'_>) -> Result<Answer, ApiError> {
    if write.target.subresource.is_some() {
        return Err(ApiError::method_not_allowed());
    }
    let key = write.key(write.name()?);
    let options: Value = if write.body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(write.body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let text = |pointer: &str| {
        options
            .pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let preconditions = Preconditions {
        uid: text("/preconditions/uid"),
        resource_version: text("/preconditions/resourceVersion"),
    };
    let policy = write
        .query
        .get("propagationPolicy")
        .map(str::to_string)
        .or_else(|| text("/propagationPolicy"));
    let orphan = write.query.flag("orphanDependents")
        || options.get("orphanDependents") == Some(&Value::Bool(true));
    let cascade = policy.as_deref() != Some("Orphan") && !orphan;
    let (object, gone) = store.delete(&key, &preconditions, cascade)?;
    if gone && !returns_deleted_object(&key.group, &key.resource) {
        let mut details = json!({"name": key.name, "kind": key.resource});
        if !key.group.is_empty() {
            details["group"] = Value::String(key.group.clone());
        }
        if let Some(uid) = object.pointer("/metadata/uid") {
            details["uid"] = uid.clone();
        }
        let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Success", "details": details});
        return Ok((200, Arc::new(status)));
    }
    Ok((200, object))
}
