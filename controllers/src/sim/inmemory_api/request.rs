//! What a request to the in-memory API names (pure): the group, version, resource, namespace, name
//! and subresource of a Kubernetes API path (`/api/v1/...`, `/apis/{group}/{version}/...`,
//! namespaced or cluster-scoped), the query parameters, decoded, and how the response shows objects. No kind is registered for a
//! request: the path says everything the store needs.

use serde_json::{Value, json};

/// The object or collection a path names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Target {
    /// API group (`""` for the core group).
    pub group: String,
    /// API version of the request (objects are returned in it).
    pub version: String,
    /// The resource (plural), e.g. `services`.
    pub resource: String,
    /// The namespace of a namespaced path; `None` for a cluster-scoped path or a list across all
    /// namespaces.
    pub namespace: Option<String>,
    /// The object's name; `None` for a collection.
    pub name: Option<String>,
    /// A subresource (`status`).
    pub subresource: Option<String>,
}

impl Target {
    /// The target of `path`; `None` when it is no resource path (discovery, `/version`, ...).
    pub fn parse(path: &str) -> Option<Self> {
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        let (group, version, rest) = match parts.as_slice() {
            ["api", version, rest @ ..] => ("", *version, rest),
            ["apis", group, version, rest @ ..] => (*group, *version, rest),
            _ => return None,
        };
        let core = group.is_empty();
        let (namespace, resource, name, subresource) = match rest {
            // Namespaces themselves are a cluster-scoped resource of the core group.
            ["namespaces"] if core => (None, "namespaces", None, None),
            ["namespaces", name] if core => (None, "namespaces", Some(*name), None),
            ["namespaces", name, sub @ ("status" | "finalize")] if core => {
                (None, "namespaces", Some(*name), Some(*sub))
            }
            ["namespaces", ns, resource] => (Some(*ns), *resource, None, None),
            ["namespaces", ns, resource, name] => (Some(*ns), *resource, Some(*name), None),
            ["namespaces", ns, resource, name, sub] => {
                (Some(*ns), *resource, Some(*name), Some(*sub))
            }
            [resource] => (None, *resource, None, None),
            [resource, name] => (None, *resource, Some(*name), None),
            [resource, name, sub] => (None, *resource, Some(*name), Some(*sub)),
            _ => return None,
        };
        Some(Self {
            group: group.to_string(),
            version: version.to_string(),
            resource: resource.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.map(str::to_string),
            subresource: subresource.map(str::to_string),
        })
    }

    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether the request is on the `status` subresource.
    pub fn is_status(&self) -> bool {
        self.subresource.as_deref() == Some("status")
    }

    /// Whether the path names one object itself (not a collection, not a subresource).
    pub fn names_one_object(&self) -> bool {
        self.name.is_some() && self.subresource.is_none()
    }
}

/// How a response shows objects: whole, in the request's API version (the store keeps one
/// version and only relabels it), or as `PartialObjectMetadata` when the `Accept` header asks so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum View {
    /// The whole object, with this `apiVersion`.
    Full(String),
    /// Only `metadata`.
    Metadata,
}

impl View {
    /// The view a request with `target` and `accept` (its `Accept` header) asks for.
    pub fn of(target: &Target, accept: &str) -> Self {
        if accept.contains("as=PartialObjectMetadata") {
            Self::Metadata
        } else {
            Self::Full(target.api_version())
        }
    }

    /// `object` as shown.
    pub fn show(&self, object: &Value) -> Value {
        match self {
            Self::Full(api_version) => {
                let mut shown = object.clone();
                if let Some(map) = shown.as_object_mut() {
                    map.insert("apiVersion".into(), Value::String(api_version.clone()));
                }
                shown
            }
            Self::Metadata => json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
            }),
        }
    }

    /// The `kind` and `apiVersion` of a list of objects of `kind`.
    pub fn list_type(&self, kind: &str) -> (String, String) {
        match self {
            Self::Full(api_version) => (format!("{kind}List"), api_version.clone()),
            Self::Metadata => ("PartialObjectMetadataList".into(), "meta.k8s.io/v1".into()),
        }
    }
}

/// The decoded query parameters of a request.
#[derive(Clone, Debug, Default)]
pub(super) struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    /// The parameters of `query` (`a=b&c=d`, percent-encoded, `+` for a space).
    pub fn parse(query: Option<&str>) -> Self {
        let pairs = query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|pair| match pair.split_once('=') {
                Some((k, v)) => (decode(k), decode(v)),
                None => (decode(pair), String::new()),
            })
            .collect();
        Self { pairs }
    }

    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether `key` is set to true (`key=true`, `key=1` or a bare `key`).
    pub fn flag(&self, key: &str) -> bool {
        self.get(key)
            .is_some_and(|v| v.is_empty() || v == "true" || v == "1")
    }
}

/// `text` with its percent escapes decoded and `+` read as a space (form encoding, as kube sends
/// query parameters); an invalid escape is kept as it is.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                if let Some(decoded) = hex {
                    out.push(decoded);
                    i += 3;
                    continue;
                }
                out.push(b);
            }
            _ => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(
        path: &str,
    ) -> (
        String,
        String,
        Option<String>,
        Option<String>,
        Option<String>,
    ) {
        let t = Target::parse(path).unwrap();
        (t.group, t.resource, t.namespace, t.name, t.subresource)
    }

    #[test]
    fn namespaced_and_cluster_scoped_paths() {
        assert_eq!(
            target(
                "/apis/loadbalancer.cluster.x-k8s.io/v1alpha1/namespaces/default/loadbalancers/cp/status"
            ),
            (
                "loadbalancer.cluster.x-k8s.io".into(),
                "loadbalancers".into(),
                Some("default".into()),
                Some("cp".into()),
                Some("status".into())
            )
        );
        assert_eq!(
            target("/api/v1/namespaces/default/services"),
            (
                "".into(),
                "services".into(),
                Some("default".into()),
                None,
                None
            )
        );
        assert_eq!(
            target("/apis/cluster.x-k8s.io/v1beta2/machines"),
            (
                "cluster.x-k8s.io".into(),
                "machines".into(),
                None,
                None,
                None
            )
        );
        assert_eq!(
            target("/api/v1/nodes/n1"),
            ("".into(), "nodes".into(), None, Some("n1".into()), None)
        );
    }

    #[test]
    fn namespaces_are_cluster_scoped() {
        assert_eq!(
            target("/api/v1/namespaces/default"),
            (
                "".into(),
                "namespaces".into(),
                None,
                Some("default".into()),
                None
            )
        );
        assert_eq!(
            target("/api/v1/namespaces"),
            ("".into(), "namespaces".into(), None, None, None)
        );
        assert_eq!(
            target("/api/v1/namespaces/default/status").4,
            Some("status".into())
        );
        assert!(
            Target::parse("/api/v1/namespaces/default")
                .unwrap()
                .names_one_object()
        );
        assert!(
            !Target::parse("/api/v1/namespaces/default/services")
                .unwrap()
                .names_one_object()
        );
    }

    #[test]
    fn other_paths_are_none() {
        assert_eq!(Target::parse("/version"), None);
        assert_eq!(Target::parse("/apis"), None);
        assert_eq!(Target::parse("/api/v1"), None);
        assert_eq!(Target::parse("/apis/apps/v1/a/b/c/d"), None);
    }

    #[test]
    fn api_version_of_the_core_group_has_no_group() {
        assert_eq!(Target::parse("/api/v1/pods").unwrap().api_version(), "v1");
        assert_eq!(
            Target::parse("/apis/events.k8s.io/v1/events")
                .unwrap()
                .api_version(),
            "events.k8s.io/v1"
        );
    }

    #[test]
    fn queries_are_decoded() {
        let q = Query::parse(Some(
            "labelSelector=app%20in%20%28a%2Cb%29&fieldSelector=metadata.name%3Dx&watch=true&force&x=a+b",
        ));
        assert_eq!(q.get("labelSelector"), Some("app in (a,b)"));
        assert_eq!(q.get("fieldSelector"), Some("metadata.name=x"));
        assert!(q.flag("watch"));
        assert!(q.flag("force"));
        assert!(!q.flag("allowWatchBookmarks"));
        assert_eq!(q.get("x"), Some("a b"));
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%zz"), "%zz");
    }
}
