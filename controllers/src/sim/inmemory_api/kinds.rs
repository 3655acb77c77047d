//! What the in-memory API knows of resources beyond a request's path (pure): a kind's plural and
//! scope (for the initial objects, which carry only `apiVersion` and `kind`), which resources have
//! a `status` subresource, which track `metadata.generation`, and which answer a DELETE with the
//! deleted object rather than a `Status`. A built-in table covers the core kinds capi-lb and its
//! tests use; the kinds registered with the builder add theirs; any other kind gets kube's guessed
//! plural. Custom resources are served only when known (a CRD installed), Kubernetes' own always.

use std::collections::{BTreeMap, BTreeSet};

use kube::core::{ApiResource, GroupVersionKind};

/// The core kinds: group, kind, plural, namespaced.
const BUILTIN: &[(&str, &str, &str, bool)] = &[
    ("", "Namespace", "namespaces", false),
    ("", "Node", "nodes", false),
    ("", "PersistentVolume", "persistentvolumes", false),
    ("", "Service", "services", true),
    ("", "Endpoints", "endpoints", true),
    ("", "Secret", "secrets", true),
    ("", "ConfigMap", "configmaps", true),
    ("", "Event", "events", true),
    ("", "Pod", "pods", true),
    ("", "ServiceAccount", "serviceaccounts", true),
    ("discovery.k8s.io", "EndpointSlice", "endpointslices", true),
    ("events.k8s.io", "Event", "events", true),
    ("coordination.k8s.io", "Lease", "leases", true),
    ("apps", "Deployment", "deployments", true),
    (
        "rbac.authorization.k8s.io",
        "ClusterRole",
        "clusterroles",
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
    ),
    ("rbac.authorization.k8s.io", "Role", "roles", true),
    (
        "rbac.authorization.k8s.io",
        "RoleBinding",
        "rolebindings",
        true,
    ),
    (
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
    ),
];

/// Groups of Kubernetes itself (their kinds are not custom resources; other `*.k8s.io` groups,
/// such as ExternalDNS's `externaldns.k8s.io`, are).
fn is_builtin_group(group: &str) -> bool {
    matches!(
        group,
        "" | "apps"
            | "batch"
            | "policy"
            | "autoscaling"
            | "admissionregistration.k8s.io"
            | "apiextensions.k8s.io"
            | "apiregistration.k8s.io"
            | "authentication.k8s.io"
            | "authorization.k8s.io"
            | "certificates.k8s.io"
            | "coordination.k8s.io"
            | "discovery.k8s.io"
            | "events.k8s.io"
            | "flowcontrol.apiserver.k8s.io"
            | "networking.k8s.io"
            | "node.k8s.io"
            | "rbac.authorization.k8s.io"
            | "resource.k8s.io"
            | "scheduling.k8s.io"
            | "storage.k8s.io"
    )
}

/// A known kind.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Known {
    plural: String,
    namespaced: bool,
}

/// Kinds by group and name, and back from group and plural; the custom resources served.
#[derive(Clone, Debug, Default)]
pub(super) struct Kinds {
    by_kind: BTreeMap<(String, String), Known>,
    by_plural: BTreeMap<(String, String), String>,
    served: BTreeSet<(String, String)>,
}

impl Kinds {
    /// The built-in core kinds.
    pub fn builtin() -> Self {
        let mut kinds = Self::default();
        for (group, kind, plural, namespaced) in BUILTIN {
            kinds.register(group, kind, plural, *namespaced);
        }
        kinds
    }

    /// Know `kind` of `group` by its `plural` and scope.
    pub fn register(&mut self, group: &str, kind: &str, plural: &str, namespaced: bool) {
        self.by_kind.insert(
            (group.to_string(), kind.to_string()),
            Known {
                plural: plural.to_string(),
                namespaced,
            },
        );
        self.by_plural
            .insert((group.to_string(), plural.to_string()), kind.to_string());
        self.serve(group, plural);
    }

    /// Serve `resource` of `group` (a custom resource's CRD is installed).
    pub fn serve(&mut self, group: &str, resource: &str) {
        self.served
            .insert((group.to_string(), resource.to_string()));
    }

    /// Whether requests for `resource` of `group` are served: every resource of Kubernetes' own
    /// groups; a custom resource when its kind is registered or among the initial objects (else
    /// it answers 404, as an apiserver without the CRD does).
    pub fn serves(&self, group: &str, resource: &str) -> bool {
        is_builtin_group(group)
            || self
                .served
                .contains(&(group.to_string(), resource.to_string()))
    }

    /// The plural of `kind` (registered, else kube's guess from the kind's name).
    pub fn plural(&self, group: &str, kind: &str) -> String {
        match self.by_kind.get(&(group.to_string(), kind.to_string())) {
            Some(known) => known.plural.clone(),
            None => ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", kind)).plural,
        }
    }

    /// Whether `kind` is namespaced (`None`: not known).
    pub fn namespaced(&self, group: &str, kind: &str) -> Option<bool> {
        self.by_kind
            .get(&(group.to_string(), kind.to_string()))
            .map(|k| k.namespaced)
    }

    /// The kind of `resource` of `group`, when known.
    pub fn kind(&self, group: &str, resource: &str) -> Option<&str> {
        self.by_plural
            .get(&(group.to_string(), resource.to_string()))
            .map(String::as_str)
    }
}

/// Whether `group` takes strategic merge patches: Kubernetes' own kinds do, custom resources do
/// not (415).
pub(super) fn takes_strategic_merge_patch(group: &str) -> bool {
    is_builtin_group(group)
}

/// Whether `resource` of `group` has a `status` subresource: writes to it change only `.status`,
/// writes to the object ignore `.status`. Every custom resource here has one (capi-lb's and Cluster
/// API's CRDs, ExternalDNS's, kube-dc's); of the core kinds, those without a status do not.
pub(super) fn has_status_subresource(group: &str, resource: &str) -> bool {
    let without = matches!(
        (group, resource),
        (
            "",
            "configmaps" | "secrets" | "endpoints" | "events" | "serviceaccounts"
        ) | ("discovery.k8s.io", "endpointslices")
            | ("events.k8s.io", "events")
            | ("coordination.k8s.io", "leases")
            | ("rbac.authorization.k8s.io", _)
    );
    !without
}

/// Whether objects of `resource` carry a `metadata.generation` that counts changes of their
/// desired state: custom resources, and the core kinds whose strategy sets one (EndpointSlices,
/// workloads, Pods); not Services, ConfigMaps, Secrets, Events, Namespaces or Nodes.
pub(super) fn tracks_generation(group: &str, resource: &str) -> bool {
    if !is_builtin_group(group) {
        return true;
    }
    matches!(
        (group, resource),
        ("", "pods")
            | ("discovery.k8s.io", "endpointslices")
            | ("apps" | "batch" | "policy" | "autoscaling", _)
            | ("networking.k8s.io", "ingresses" | "networkpolicies")
            | ("apiextensions.k8s.io", "customresourcedefinitions")
    )
}

/// Whether a DELETE that removes an object answers with the object (custom resources and a few
/// core kinds) or with a `Status` of success (most core kinds).
pub(super) fn returns_deleted_object(group: &str, resource: &str) -> bool {
    !is_builtin_group(group)
        || matches!(
            (group, resource),
            ("", "pods" | "services" | "namespaces" | "nodes")
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_come_from_the_table_the_registrations_or_kube() {
        let mut kinds = Kinds::builtin();
        assert_eq!(kinds.plural("", "Endpoints"), "endpoints");
        assert_eq!(kinds.plural("events.k8s.io", "Event"), "events");
        assert_eq!(kinds.plural("x.io", "Policy"), "policies");
        assert_eq!(kinds.plural("kube-dc.com", "EIp"), "eips");
        kinds.register("x.io", "Mouse", "mice", true);
        assert_eq!(kinds.plural("x.io", "Mouse"), "mice");
        assert_eq!(kinds.kind("x.io", "mice"), Some("Mouse"));
        assert_eq!(kinds.namespaced("", "Namespace"), Some(false));
        assert_eq!(kinds.namespaced("x.io", "Unknown"), None);
        assert!(kinds.serves("x.io", "mice"));
        assert!(kinds.serves("", "pods"));
        assert!(!kinds.serves("externaldns.k8s.io", "dnsendpoints"));
    }

    #[test]
    fn status_subresources_and_generations() {
        assert!(has_status_subresource("", "services"));
        assert!(has_status_subresource(
            "loadbalancer.cluster.x-k8s.io",
            "loadbalancers"
        ));
        assert!(!has_status_subresource("", "configmaps"));
        assert!(!has_status_subresource(
            "discovery.k8s.io",
            "endpointslices"
        ));
        assert!(tracks_generation("cluster.x-k8s.io", "machines"));
        assert!(tracks_generation("discovery.k8s.io", "endpointslices"));
        assert!(tracks_generation("externaldns.k8s.io", "dnsendpoints"));
        assert!(!tracks_generation("", "services"));
        assert!(!tracks_generation("", "configmaps"));
        assert!(returns_deleted_object("cluster.x-k8s.io", "machines"));
        assert!(!returns_deleted_object("", "configmaps"));
    }
}
