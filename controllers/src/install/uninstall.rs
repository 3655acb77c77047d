//! `capi-lb uninstall`: lets capi-lb go without taking the clusters behind it with it. Run after the
//! controller is gone (`helm uninstall`, `clusterctl delete`, the Deployment deleted) and before the
//! CRDs are deleted. For every object of every capi-lb kind (LoadBalancers and every provider's
//! infrastructure kind, the in-memory one included, whatever the install ran), in every namespace:
//!
//! 1. its dependents (the Service provider's Service, kube-dc's EIp and Service, the `-ext`
//!    Service, the DNSEndpoint, a zone's LoadBalancer, ...: whatever carries an ownerReference to
//!    it) lose that ownerReference, so that deleting the CRDs does not garbage-collect them: the
//!    load balancers keep serving and the `-ext` names keep resolving, to the last addresses;
//! 2. its finalizers (capi-lb's only) are removed, so that deleting the CRDs does not hang;
//!
//! and every Machine loses capi-lb's deletion hooks and target annotations (a hook left behind
//! would hold the Machine's deletion forever). Nothing is deleted: cloud load balancers (Octavia),
//! Services and EIps stay, as do `Cluster.spec.controlPlaneEndpoint` and a workload cluster's
//! `default/kubernetes`. To remove the load balancers too, delete the LoadBalancers while the
//! controller still runs (its finalizers release them) and uninstall after.
//!
//! It refuses while capi-lb's leader Lease is held and fresh (the controller would put back what it
//! removes) unless `--force`; `--dry-run` says what it would do. Every change is a merge patch at
//! the object's resourceVersion, so nothing changed since it was read is overwritten; a conflict is
//! reported and a second run picks up where the first stopped.

use std::collections::{BTreeMap, BTreeSet};

use capi_lb_api::constants::{
    INFRASTRUCTURE_FINALIZER, LOADBALANCER_FINALIZER, PRE_DRAIN_HOOK_PREFIX,
    PRE_TERMINATE_HOOK_PREFIX, TARGET_SINCE_PREFIX, TARGET_STATE_PREFIX,
};
use capi_lb_providers::catalog;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// The prefix of capi-lb's target keys (the name part of its hooks' annotation keys).
const TARGET_KEY_PREFIX: &str = "capi-lb-";
/// The start of the value of capi-lb's deletion hooks (`capi-lb/<LoadBalancer>`).
const HOOK_OWNER: &str = "capi-lb/";

/// What `capi-lb uninstall` is asked.
#[derive(Clone, Debug)]
pub struct Options {
    /// Say what would be done, change nothing.
    pub dry_run: bool,
    /// Go on while the leader Lease looks held.
    pub force: bool,
    /// The leader Lease: namespace and name.
    pub lease: (String, String),
    /// Only this namespace (an install that watched one, `run --namespace`); all when `None`.
    pub namespace: Option<String>,
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum UninstallError {
    /// The controller still runs.
    #[error(
        "capi-lb still runs: the Lease {0} is held by {1}, renewed {2} s ago; remove the controller first (helm uninstall, clusterctl delete, or delete its Deployment) and wait for the Lease to lapse, or give --force"
    )]
    StillRunning(String, String, i64),
    /// A request failed.
    #[error("{0}")]
    Kube(#[from] kube::Error),
    /// Some objects could not be changed (each named); the rest were.
    #[error("{} change(s) failed (run again to retry them):\n{}", .0.len(), .0.join("\n"))]
    Incomplete(Vec<String>),
}

/// Every change made (or, with `--dry-run`, that would be).
#[derive(Debug, Default)]
pub struct Report {
    /// One line per change.
    pub changes: Vec<String>,
}

/// The kinds capi-lb defines: LoadBalancers and every provider's infrastructure kind.
fn own_kinds() -> Vec<ApiResource> {
    capi_lb_api::kinds::all()
        .iter()
        .map(|k| (k.resource)())
        .collect()
}

/// Kinds whose objects capi-lb's kinds may own: Services, EndpointSlices, ExternalDNS's
/// DNSEndpoints, what the providers make, and capi-lb's own kinds (a zone's LoadBalancer).
fn dependent_kinds() -> Vec<ApiResource> {
    let plain = |group: &str, version: &str, kind: &str, plural: &str| ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    };
    let mut out = vec![
        plain("", "v1", "Service", "services"),
        plain("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"),
        plain(
            "externaldns.k8s.io",
            "v1alpha1",
            "DNSEndpoint",
            "dnsendpoints",
        ),
    ];
    for entry in catalog::CATALOG {
        for owned in entry.owned_kinds {
            let resource = owned.api_resource();
            if !out
                .iter()
                .any(|r| r.api_version == resource.api_version && r.kind == resource.kind)
            {
                out.push(resource);
            }
        }
    }
    out.extend(own_kinds());
    out
}

/// Every object of `resource` in `namespace` (all when `None`); an empty list when the kind is not
/// served.
async fn list_all(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
) -> Result<Vec<DynamicObject>, kube::Error> {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = match api.list(&params).await {
            Ok(page) => page,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        out.extend(page.items);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(out),
        }
    }
}

/// `namespace/name` of `object`.
fn key(object: &DynamicObject) -> String {
    format!(
        "{}/{}",
        object.namespace().unwrap_or_default(),
        object.name_any()
    )
}

/// The refusal while the leader Lease is held and was renewed within twice its duration.
async fn check_not_running(client: &Client, options: &Options) -> Result<(), UninstallError> {
    let (namespace, name) = &options.lease;
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let Some(lease) = leases.get_opt(name).await? else {
        return Ok(());
    };
    let Some(spec) = lease.spec else {
        return Ok(());
    };
    let Some(holder) = spec.holder_identity.filter(|h| !h.is_empty()) else {
        return Ok(());
    };
    let renewed = spec.renew_time.or(spec.acquire_time);
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    let age = renewed.map(|t| jiff::Timestamp::now().as_second() - t.0.as_second());
    match age {
        Some(age) if age <= 2 * duration && !options.force => Err(UninstallError::StillRunning(
            format!("{namespace}/{name}"),
            holder,
            age,
        )),
        _ => Ok(()),
    }
}

/// One run: where it writes, what it was asked, what it did and what failed.
struct Work<'a> {
    client: &'a Client,
    options: &'a Options,
    report: Report,
    failed: Vec<String>,
}

impl Work<'_> {
    /// A merge patch of `object` at its resourceVersion (or nothing with `--dry-run`), said as
    /// `what`, or the failure.
    async fn patch(
        &mut self,
        resource: &ApiResource,
        object: &DynamicObject,
        mut body: Value,
        what: String,
    ) {
        if !self.options.dry_run {
            body["metadata"]["resourceVersion"] = json!(object.resource_version());
            let api: Api<DynamicObject> = match object.namespace() {
                Some(ns) => Api::namespaced_with(self.client.clone(), &ns, resource),
                None => Api::all_with(self.client.clone(), resource),
            };
            if let Err(e) = api
                .patch(
                    &object.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&body),
                )
                .await
            {
                self.failed.push(format!("{what}: {e}"));
                return;
            }
        }
        self.report.changes.push(what);
    }
}

/// Let capi-lb go: see the module's documentation.
pub async fn uninstall(client: Client, options: &Options) -> Result<Report, UninstallError> {
    check_not_running(&client, options).await?;
    let mut work = Work {
        client: &client,
        options,
        report: Report::default(),
        failed: Vec::new(),
    };

    // What capi-lb's kinds hold: their UIDs and objects.
    let mut owners: BTreeMap<String, String> = BTreeMap::new();
    let mut objects: Vec<(ApiResource, DynamicObject)> = Vec::new();
    for resource in own_kinds() {
        for object in list_all(&client, &resource, options.namespace.as_deref()).await? {
            if let Some(uid) = object.uid() {
                owners.insert(uid, format!("{} {}", resource.kind, key(&object)));
            }
            objects.push((resource.clone(), object));
        }
    }

    // 1. Orphan the dependents (capi-lb's own objects in step 3, in the same patch as their
    // finalizers).
    let own: BTreeSet<(String, String)> = own_kinds()
        .into_iter()
        .map(|r| (r.api_version, r.kind))
        .collect();
    for resource in dependent_kinds() {
        if own.contains(&(resource.api_version.clone(), resource.kind.clone())) {
            continue;
        }
        for object in list_all(&client, &resource, options.namespace.as_deref()).await? {
            let Some((kept, from)) = orphaned(&object, &owners) else {
                continue;
            };
            let what = format!(
                "{} {}: kept (no longer owned by {from})",
                resource.kind,
                key(&object)
            );
            let body = json!({"metadata": {"ownerReferences": kept}});
            work.patch(&resource, &object, body, what).await;
        }
    }

    // 2. Machines: capi-lb's hooks and target annotations.
    if let Some(machines) = machine_kind(&client).await {
        for machine in list_all(&client, &machines, options.namespace.as_deref()).await? {
            let gone: Vec<&String> = machine
                .annotations()
                .iter()
                .filter(|(k, v)| is_ours(k, v))
                .map(|(k, _)| k)
                .collect();
            if gone.is_empty() {
                continue;
            }
            let hooks = gone.iter().filter(|k| k.contains(".delete.hook.")).count();
            let what = format!(
                "Machine {}: {} capi-lb annotation(s) removed, {hooks} of them deletion hooks",
                key(&machine),
                gone.len()
            );
            let annotations: serde_json::Map<String, Value> =
                gone.iter().map(|k| ((*k).clone(), Value::Null)).collect();
            let body = json!({"metadata": {"annotations": annotations}});
            work.patch(&machines, &machine, body, what).await;
        }
    }

    // 3. capi-lb's own objects: its finalizers released, and orphaned from each other (an
    // infrastructure object from its LoadBalancer, a zone from its ZonedLoadBalancer).
    for (resource, object) in &objects {
        let finalizers = object.finalizers();
        let kept: Vec<&String> = finalizers
            .iter()
            .filter(|f| *f != LOADBALANCER_FINALIZER && *f != INFRASTRUCTURE_FINALIZER)
            .collect();
        let mut body = json!({"metadata": {}});
        let mut said = Vec::new();
        if kept.len() != finalizers.len() {
            body["metadata"]["finalizers"] = json!(kept);
            said.push("capi-lb's finalizer removed".to_string());
        }
        if let Some((refs, from)) = orphaned(object, &owners) {
            body["metadata"]["ownerReferences"] = json!(refs);
            said.push(format!("no longer owned by {from}"));
        }
        if said.is_empty() {
            continue;
        }
        let what = format!("{} {}: {}", resource.kind, key(object), said.join("; "));
        work.patch(resource, object, body, what).await;
    }

    if work.failed.is_empty() {
        Ok(work.report)
    } else {
        Err(UninstallError::Incomplete(work.failed))
    }
}

/// The ownerReferences `object` keeps and the owners it loses (`Kind namespace/name`, joined),
/// when some of its owners are capi-lb's objects (`owners`: their UIDs).
fn orphaned(
    object: &DynamicObject,
    owners: &BTreeMap<String, String>,
) -> Option<(
    Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
    String,
)> {
    let (ours, kept): (Vec<_>, Vec<_>) = object
        .owner_references()
        .iter()
        .cloned()
        .partition(|r| owners.contains_key(&r.uid));
    if ours.is_empty() {
        return None;
    }
    let from: BTreeSet<&str> = ours
        .iter()
        .filter_map(|r| owners.get(&r.uid))
        .map(String::as_str)
        .collect();
    Some((kept, from.into_iter().collect::<Vec<_>>().join(", ")))
}

/// Whether the Machine annotation `key` = `value` is capi-lb's: a target state or its time, or a
/// deletion hook of capi-lb's (its key's name part is a capi-lb target key and its value names
/// capi-lb as owner).
pub fn is_ours(key: &str, value: &str) -> bool {
    if key.starts_with(TARGET_STATE_PREFIX) || key.starts_with(TARGET_SINCE_PREFIX) {
        return true;
    }
    [PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX]
        .iter()
        .any(|prefix| {
            key.strip_prefix(prefix)
                .is_some_and(|name| name.starts_with(TARGET_KEY_PREFIX))
                && value.starts_with(HOOK_OWNER)
        })
}

/// Cluster API's Machine kind at the version the cluster prefers, when Cluster API is installed.
async fn machine_kind(client: &Client) -> Option<ApiResource> {
    let discovery = kube::discovery::Discovery::new(client.clone())
        .filter(&["cluster.x-k8s.io"])
        .run()
        .await
        .ok()?;
    let group = discovery.get("cluster.x-k8s.io")?;
    let (resource, _) = group
        .recommended_resources()
        .into_iter()
        .find(|(r, _)| r.kind == "Machine")?;
    Some(resource)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_capi_lbs_machine_annotations_are_ours() {
        let keys = capi_lb_api::target::TargetKeys::new("ns", "lb");
        assert!(is_ours(&keys.state, "active"));
        assert!(is_ours(&keys.since, "2026-01-01T00:00:00Z"));
        assert!(is_ours(&keys.pre_drain, "capi-lb/lb"));
        assert!(is_ours(&keys.pre_terminate, "capi-lb/lb"));
        // Another owner's hook, even under a name like ours; another tool's annotations.
        assert!(!is_ours(&keys.pre_drain, "someone-else"));
        assert!(!is_ours(
            "pre-drain.delete.hook.machine.cluster.x-k8s.io/kcp-cleanup",
            "kcp"
        ));
        assert!(!is_ours("cluster.x-k8s.io/cluster-name", "capi-lb/x"));
    }

    #[test]
    fn every_capi_lb_kind_and_what_the_providers_make_are_looked_at() {
        let own: Vec<String> = own_kinds().into_iter().map(|r| r.kind).collect();
        for kind in [
            "LoadBalancer",
            "InMemoryLoadBalancer",
            "KubeDCLoadBalancer",
            "OctaviaLoadBalancer",
            "ServiceLoadBalancer",
            "DNSLoadBalancer",
            "ZonedLoadBalancer",
        ] {
            assert!(own.contains(&kind.to_string()), "{kind}: {own:?}");
        }
        let dependents: Vec<String> = dependent_kinds().into_iter().map(|r| r.kind).collect();
        for kind in [
            "Service",
            "EndpointSlice",
            "DNSEndpoint",
            "EIp",
            "LoadBalancer",
        ] {
            assert!(
                dependents.contains(&kind.to_string()),
                "{kind}: {dependents:?}"
            );
        }
    }
}
