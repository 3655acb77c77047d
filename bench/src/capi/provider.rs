//! The benchmark's infrastructure provider: its kinds (`BenchCluster`, `BenchMachine` in
//! [`GROUP`], CRDs with Cluster API's contract label, and the ClusterRole that lets Cluster API's
//! manager read and own them) and a fake provider task that provisions them as a real
//! infrastructure provider would, so that Cluster API's controllers reach their steady state.
//!
//! The provider waits, like a real one, until Cluster API has adopted an object (an owner
//! reference to its Cluster or Machine), then provisions it: a BenchCluster gets
//! `status.initialization.provisioned` (and, when it carries an [`ADDRESS_ANNOTATION`], that
//! address as its `spec.controlPlaneEndpoint`, as a provider with its own load balancer sets it;
//! without it, capi-lb publishes the Cluster's endpoint); a BenchMachine
//! gets `spec.providerID`, then `status.initialization.provisioned` and `status.addresses` (the
//! address the benchmark put in its [`ADDRESS_ANNOTATION`], standing in for the cloud's answer).
//! Cluster API copies providerID and addresses into the Machine.

use std::collections::HashSet;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::launch::{BenchError, apply, apply_crd};

/// API group of the benchmark's infrastructure kinds.
pub const GROUP: &str = "infrastructure.bench.capi-lb.dev";
/// Their version (the value of the contract label `cluster.x-k8s.io/v1beta2`).
pub const VERSION: &str = "v1alpha1";
/// The infrastructure cluster kind.
pub const CLUSTER_KIND: &str = "BenchCluster";
/// The infrastructure machine kind.
pub const MACHINE_KIND: &str = "BenchMachine";
/// The address the provider gives a BenchMachine, or a BenchCluster as its endpoint (set by the
/// benchmark when it creates them, standing in for what the cloud would answer).
pub const ADDRESS_ANNOTATION: &str = "bench.capi-lb.dev/address";
/// The ClusterRole aggregated into Cluster API's manager role.
const ROLE: &str = "capi-lb-bench:infrastructure";

/// The CRD of `kind` in [`GROUP`]: namespaced, any spec and status (status subresource), with
/// Cluster API's contract label, so that Cluster API resolves a reference to it (it looks the CRD
/// up as `<lowercase plural kind>.<group>` and reads the label for the version).
pub fn crd(kind: &str) -> Result<CustomResourceDefinition, BenchError> {
    let plural = format!("{}s", kind.to_lowercase());
    let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}"),
                     "labels": {"cluster.x-k8s.io/v1beta2": VERSION}},
        "spec": {"group": GROUP, "scope": "Namespaced",
                 "names": {"kind": kind, "listKind": format!("{kind}List"), "plural": plural,
                           "singular": kind.to_lowercase()},
                 "versions": [{"name": VERSION, "served": true, "storage": true,
                               "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object",
                                   "properties": {"spec": open, "status": open}}}}]}}))
    .map_err(|e| BenchError::Setup(format!("the CRD of {kind}: {e}")))
}

/// The API resource of `kind` in [`GROUP`].
pub fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, VERSION, kind),
        &format!("{}s", kind.to_lowercase()),
    )
}

/// Apply the two CRDs and the ClusterRole (they stay: cluster-scoped and harmless).
pub async fn install(client: &Client) -> Result<(), BenchError> {
    for kind in [CLUSTER_KIND, MACHINE_KIND] {
        apply_crd(client, &crd(kind)?).await?;
    }
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": ROLE, "labels": {"cluster.x-k8s.io/aggregate-to-manager": "true"}},
        "rules": [{"apiGroups": [GROUP], "resources": ["*"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]});
    apply(client, &role).await
}

/// A new object of `kind` named `name` with `annotations`, as a template would create it.
pub fn object(kind: &str, name: &str, annotations: Value) -> Value {
    json!({"apiVersion": format!("{GROUP}/{VERSION}"), "kind": kind,
           "metadata": {"name": name, "annotations": annotations}, "spec": {}})
}

/// What the provider does to one object.
#[derive(Debug, PartialEq)]
pub(crate) enum Job {
    /// Provision BenchCluster `name`, with this endpoint on its spec when `Some`.
    Cluster(String, Option<String>),
    /// Provision BenchMachine `name` with this address.
    Machine(String, String),
}

/// The provider's decision for an object of `kind` it sees: a job once Cluster API has adopted it
/// and while it is not provisioned yet (`None` otherwise).
pub(crate) fn decide(kind: &str, o: &DynamicObject) -> Option<Job> {
    let owner = if kind == CLUSTER_KIND {
        "Cluster"
    } else {
        "Machine"
    };
    let adopted = o
        .owner_references()
        .iter()
        .any(|r| r.kind == owner && r.api_version.starts_with("cluster.x-k8s.io/"));
    let provisioned = o.data["status"]["initialization"]["provisioned"] == json!(true);
    if !adopted || provisioned || o.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let name = o.name_any();
    if kind == CLUSTER_KIND {
        Some(Job::Cluster(
            name,
            o.annotations().get(ADDRESS_ANNOTATION).cloned(),
        ))
    } else {
        let address = o.annotations().get(ADDRESS_ANNOTATION)?.clone();
        Some(Job::Machine(name, address))
    }
}

/// The writes of one job, each a merge patch: (whether to the status subresource, the patch).
pub(crate) fn writes(job: &Job, ns: &str) -> Vec<(bool, Value)> {
    let provisioned = json!({"initialization": {"provisioned": true}});
    match job {
        Job::Cluster(_, endpoint) => {
            let mut out = Vec::new();
            if let Some(host) = endpoint {
                out.push((
                    false,
                    json!({"spec": {"controlPlaneEndpoint": {"host": host, "port": 6443}}}),
                ));
            }
            out.push((true, json!({"status": provisioned})));
            out
        }
        Job::Machine(name, address) => {
            let mut status = provisioned;
            status["addresses"] = json!([{"type": "InternalIP", "address": address}]);
            vec![
                (
                    false,
                    json!({"spec": {"providerID": format!("bench://{ns}/{name}")}}),
                ),
                (true, json!({"status": status})),
            ]
        }
    }
}

/// How often the provider asks for one of its writes before it gives up on the object.
const WRITE_ATTEMPTS: u32 = 30;

/// Run the provider in namespace `ns` until the task is aborted: `parallel` jobs at a time.
pub(crate) fn spawn(client: Client, ns: String, parallel: usize) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<(&'static str, Job)>();
        for kind in [CLUSTER_KIND, MACHINE_KIND] {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &resource(kind));
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut seen = HashSet::new();
                let stream = super::changes(api, format!("the bench provider's {kind}s"));
                futures::pin_mut!(stream);
                while let Some(o) = stream.next().await {
                    let Some(job) = decide(kind, &o) else {
                        continue;
                    };
                    if seen.insert(o.uid().unwrap_or_default()) && tx.send((kind, job)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let jobs = tokio_stream_of(rx);
        jobs.for_each_concurrent(parallel.max(1), |(kind, job)| {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &resource(kind));
            let ns = ns.clone();
            async move {
                let name = match &job {
                    Job::Cluster(n, _) | Job::Machine(n, _) => n.clone(),
                };
                for (status, patch) in writes(&job, &ns) {
                    let params = PatchParams::default();
                    // A write that fails (the apiserver busy, a connection reset) is asked again:
                    // an object left unprovisioned would keep its phase from ever settling.
                    for attempt in 1..=WRITE_ATTEMPTS {
                        let result = if status {
                            api.patch_status(&name, &params, &Patch::Merge(&patch))
                                .await
                        } else {
                            api.patch(&name, &params, &Patch::Merge(&patch)).await
                        };
                        match result {
                            Ok(_) => break,
                            Err(kube::Error::Api(e)) if e.code == 404 => return,
                            Err(e) => {
                                eprintln!(
                                    "capi-lb-bench capi: the bench provider could not provision {kind} {name} (attempt {attempt} of {WRITE_ATTEMPTS}): {e}"
                                );
                                if attempt == WRITE_ATTEMPTS {
                                    return;
                                }
                                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                            }
                        }
                    }
                }
            }
        })
        .await;
    })
}

/// An unbounded receiver as a stream.
fn tokio_stream_of<T: Send + 'static>(
    rx: tokio::sync::mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = T> {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|t| (t, rx)) })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn seen(kind: &str, owner: &str, status: Value) -> DynamicObject {
        let mut o = object(kind, "c-00001-m0", json!({ADDRESS_ANNOTATION: "10.0.1.1"}));
        o["metadata"]["ownerReferences"] = json!([{"apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": owner, "name": "x", "uid": "u"}]);
        o["status"] = status;
        serde_json::from_value(o).unwrap()
    }

    #[test]
    fn the_provider_waits_for_adoption_and_provisions_once() {
        let fresh = seen(MACHINE_KIND, "Machine", json!({}));
        assert_eq!(
            decide(MACHINE_KIND, &fresh),
            Some(Job::Machine("c-00001-m0".into(), "10.0.1.1".into()))
        );
        let foreign = seen(MACHINE_KIND, "MachineSet", json!({}));
        assert_eq!(decide(MACHINE_KIND, &foreign), None);
        let done = seen(
            MACHINE_KIND,
            "Machine",
            json!({"initialization": {"provisioned": true}}),
        );
        assert_eq!(decide(MACHINE_KIND, &done), None);
        let cluster = seen(CLUSTER_KIND, "Cluster", json!({}));
        assert_eq!(
            decide(CLUSTER_KIND, &cluster),
            Some(Job::Cluster("c-00001-m0".into(), Some("10.0.1.1".into())))
        );
    }

    #[test]
    fn a_machine_gets_its_provider_id_then_its_status() {
        let w = writes(&Job::Machine("m".into(), "10.0.0.1".into()), "ns");
        assert_eq!(w.len(), 2);
        assert_eq!(
            w[0],
            (false, json!({"spec": {"providerID": "bench://ns/m"}}))
        );
        assert!(w[1].0);
        assert_eq!(w[1].1["status"]["addresses"][0]["address"], "10.0.0.1");
        assert_eq!(
            writes(&Job::Cluster("c".into(), None), "ns"),
            vec![(
                true,
                json!({"status": {"initialization": {"provisioned": true}}})
            )]
        );
    }

    #[test]
    fn the_crds_carry_the_contract_label_under_the_name_cluster_api_looks_up() {
        let c = crd(MACHINE_KIND).unwrap();
        assert_eq!(
            c.metadata.name.as_deref(),
            Some("benchmachines.infrastructure.bench.capi-lb.dev")
        );
        assert_eq!(
            c.metadata.labels.unwrap()["cluster.x-k8s.io/v1beta2"],
            VERSION
        );
    }
}
