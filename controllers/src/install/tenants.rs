//! The tenants' roles: two ClusterRoles that Kubernetes' user-facing roles aggregate, as
//! Kubernetes documents for custom resources, so that whoever may edit a namespace (`admin` or
//! `edit` bound there) may create, change and delete its LoadBalancers and the infrastructure
//! objects of the shipped providers, and whoever may view it (`view`) may read them. The in-memory
//! kind is never among them: its address pools are whatever the writer chooses (docs/security.md).
//!
//! Every install ships them, switchable: `config/rbac/tenant_roles.yaml` (a kustomization's own
//! resource, left out by removing it), the chart's `tenantRoles.enabled`, and clusterctl's
//! `CAPI_LB_TENANT_ROLES` (the value of the aggregation labels: `false` keeps the roles but
//! aggregates them nowhere).

use capi_lb_api::kinds;
use serde_json::{Value, json};

/// The role Kubernetes' `admin` and `edit` aggregate.
pub const EDIT_ROLE: &str = "capi-lb-tenant-edit";
/// The role Kubernetes' `view` (and so `edit` and `admin`) aggregates.
pub const VIEW_ROLE: &str = "capi-lb-tenant-view";

/// Kubernetes' aggregation labels of its user-facing roles.
pub const AGGREGATE_TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
/// See [`AGGREGATE_TO_ADMIN`].
pub const AGGREGATE_TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
/// See [`AGGREGATE_TO_ADMIN`].
pub const AGGREGATE_TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

/// What `view` allows (Kubernetes' own read verbs).
pub const READ_VERBS: &[&str] = &["get", "list", "watch"];
/// What `edit` allows besides reading (Kubernetes' `edit` verbs on its own kinds; never a status
/// subresource, which is capi-lb's to write).
pub const WRITE_VERBS: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];

/// The resources a tenant works with, as (API group, plural): LoadBalancers and the
/// infrastructure kind of every shipped provider (never the in-memory one).
pub fn resources() -> Vec<(String, String)> {
    kinds::all()
        .iter()
        .filter(|k| k.shipped)
        .map(|k| (k.resource)())
        .map(|r| (r.group, r.plural))
        .collect()
}

/// The rules granting `verbs` on [`resources`], one per API group; `status` adds the read of the
/// status subresources (what `kubectl get` with subresource reads).
fn rules(verbs: &[&str], status: bool) -> Value {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for (group, plural) in resources() {
        let mut names = vec![plural.clone()];
        if status {
            names.push(format!("{plural}/status"));
        }
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, list)) => list.extend(names),
            None => groups.push((group, names)),
        }
    }
    Value::Array(
        groups
            .into_iter()
            .map(|(group, names)| json!({"apiGroups": [group], "resources": names, "verbs": verbs}))
            .collect(),
    )
}

/// The two ClusterRoles, with `labels` (capi-lb's own) and `aggregate` as the value of the
/// aggregation labels (`"true"`, or clusterctl's variable).
pub fn objects(labels: &Value, aggregate: &str) -> Vec<Value> {
    let with = |extra: &[&str]| {
        let mut l = labels.clone();
        for key in extra {
            l[*key] = json!(aggregate);
        }
        l
    };
    let mut all_verbs: Vec<&str> = READ_VERBS.to_vec();
    all_verbs.extend(WRITE_VERBS);
    vec![
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": EDIT_ROLE,
                         "labels": with(&[AGGREGATE_TO_ADMIN, AGGREGATE_TO_EDIT])},
            "rules": rules(&all_verbs, false),
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": VIEW_ROLE, "labels": with(&[AGGREGATE_TO_VIEW])},
            "rules": rules(READ_VERBS, true),
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_roles_cover_loadbalancers_and_the_shipped_kinds_and_never_the_in_memory_one() {
        let objects = objects(&json!({}), "true");
        let text = serde_json::to_string(&objects).unwrap();
        assert!(!text.contains("inmemory"), "{text}");
        for plural in [
            "loadbalancers",
            "kubedcloadbalancers",
            "octavialoadbalancers",
            "serviceloadbalancers",
            "dnsloadbalancers",
            "zonedloadbalancers",
        ] {
            assert!(text.contains(&format!("\"{plural}\"")), "{plural}: {text}");
        }
        let edit = &objects[0];
        assert_eq!(edit["metadata"]["labels"][AGGREGATE_TO_EDIT], "true");
        assert_eq!(edit["metadata"]["labels"][AGGREGATE_TO_ADMIN], "true");
        assert!(!text.contains("\"*\""), "no wildcard: {text}");
        // Never a status write.
        for rule in edit["rules"].as_array().unwrap() {
            assert!(!rule["resources"].to_string().contains("/status"), "{rule}");
        }
        let view = &objects[1];
        assert_eq!(view["metadata"]["labels"][AGGREGATE_TO_VIEW], "true");
        for rule in view["rules"].as_array().unwrap() {
            assert_eq!(rule["verbs"], json!(READ_VERBS), "{rule}");
        }
    }
}
