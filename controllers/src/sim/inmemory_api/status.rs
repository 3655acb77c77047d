//! The in-memory API's refusals as the apiserver shapes them (pure): a `Status` object with its
//! `reason`, `code`, `message` and `details`, worded as `k8s.io/apimachinery`'s errors word them
//! (`configmaps "x" not found`, `Operation cannot be fulfilled on ...`, `Apply failed with 1
//! conflict: ...`).

use serde_json::{Value, json};

use super::apply::{Conflict, conflict_message};

/// A refused request.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// The `reason` of the `Status`.
    pub reason: &'static str,
    /// The message.
    pub message: String,
    /// The `details` of the `Status`, when it has some.
    pub details: Option<Value>,
}

/// `resource.group`, or `resource` in the core group (a `GroupResource` as the apiserver prints it).
fn qualified(group: &str, name: &str) -> String {
    if group.is_empty() {
        name.to_string()
    } else {
        format!("{name}.{group}")
    }
}

fn details(group: &str, kind: &str, name: &str) -> Value {
    let mut details = json!({"name": name, "kind": kind});
    if !group.is_empty() {
        details["group"] = Value::String(group.to_string());
    }
    details
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: String, details: Option<Value>) -> Self {
        Self {
            code,
            reason,
            message,
            details,
        }
    }

    /// 404: no object `name` of `resource`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        let message = format!("{} {name:?} not found", qualified(group, resource));
        Self::new(
            404,
            "NotFound",
            message,
            Some(details(group, resource, name)),
        )
    }

    /// 404: the path names nothing the API serves.
    pub fn no_such_path() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource".into(),
            None,
        )
    }

    /// 409: `name` exists already.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        let message = format!("{} {name:?} already exists", qualified(group, resource));
        Self::new(
            409,
            "AlreadyExists",
            message,
            Some(details(group, resource, name)),
        )
    }

    /// 409: a write or delete whose precondition (resourceVersion, UID) does not hold.
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        let message = format!(
            "Operation cannot be fulfilled on {} {name:?}: {why}",
            qualified(group, resource)
        );
        Self::new(
            409,
            "Conflict",
            message,
            Some(details(group, resource, name)),
        )
    }

    /// 409: a write naming a resourceVersion that is not the object's.
    pub fn stale(group: &str, resource: &str, name: &str) -> Self {
        Self::conflict(
            group,
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409: a server-side apply that would change fields other managers own.
    pub fn apply_conflict(conflicts: &[Conflict]) -> Self {
        let causes: Vec<Value> = conflicts
            .iter()
            .map(|c| json!({"reason": "FieldManagerConflict", "message": c.owner(), "field": c.field()}))
            .collect();
        Self::new(
            409,
            "Conflict",
            conflict_message(conflicts),
            Some(json!({"causes": causes})),
        )
    }

    /// 422: the object `name` of `kind` is invalid; `causes` are (field, cause type, message).
    pub fn invalid(group: &str, kind: &str, name: &str, causes: &[(&str, &str, String)]) -> Self {
        let listed: Vec<String> = causes
            .iter()
            .map(|(field, _, message)| format!("{field}: {message}"))
            .collect();
        let listed = match listed.as_slice() {
            [one] => one.clone(),
            _ => format!("[{}]", listed.join(", ")),
        };
        let message = format!("{} {name:?} is invalid: {listed}", qualified(group, kind));
        let mut d = details(group, kind, name);
        d["causes"] = causes
            .iter()
            .map(|(field, kind, message)| json!({"reason": kind, "message": message, "field": field}))
            .collect();
        Self::new(422, "Invalid", message, Some(d))
    }

    /// 422 without an object: a request the apiserver rejects as a whole (a JSON patch that does
    /// not apply).
    pub fn unprocessable(message: String) -> Self {
        Self::new(422, "Invalid", message, None)
    }

    /// 400: a malformed request.
    pub fn bad_request(message: String) -> Self {
        Self::new(400, "BadRequest", message, None)
    }

    /// 405: a method the path does not take.
    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource".into(),
            None,
        )
    }

    /// 415: a patch type the API does not take.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (not {content_type:?})"
            ),
            None,
        )
    }

    /// 410: a watch or list from a resourceVersion older than the API keeps.
    pub fn expired(message: String) -> Self {
        Self::new(410, "Expired", message, None)
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_as_the_apiserver_words_them() {
        assert_eq!(
            ApiError::not_found("", "configmaps", "x").to_status(),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "configmaps \"x\" not found", "reason": "NotFound",
                   "details": {"name": "x", "kind": "configmaps"}, "code": 404})
        );
        let exists =
            ApiError::already_exists("loadbalancer.cluster.x-k8s.io", "loadbalancers", "lb");
        assert_eq!(
            exists.message,
            "loadbalancers.loadbalancer.cluster.x-k8s.io \"lb\" already exists"
        );
        assert_eq!(
            exists.details.unwrap()["group"],
            "loadbalancer.cluster.x-k8s.io"
        );
        assert_eq!(
            ApiError::stale("", "configmaps", "x").message,
            "Operation cannot be fulfilled on configmaps \"x\": the object has been modified; please apply your changes to the latest version and try again"
        );
        let invalid = ApiError::invalid(
            "",
            "ConfigMap",
            "x",
            &[(
                "metadata.finalizers",
                "FieldValueForbidden",
                "Forbidden: no".into(),
            )],
        );
        assert_eq!(
            invalid.message,
            "ConfigMap \"x\" is invalid: metadata.finalizers: Forbidden: no"
        );
        assert_eq!(invalid.code, 422);
    }
}
