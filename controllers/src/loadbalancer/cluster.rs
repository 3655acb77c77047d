//! The Cluster side of a LoadBalancer: its Cluster, pause, and `Cluster.spec.controlPlaneEndpoint`.

use capi_lb_api::LoadBalancer;
use capi_lb_api::capi::Cluster;
use capi_lb_api::conditions::DesiredCondition;
use capi_lb_api::constants::{ANNOTATION_PAUSED, DEFAULT_PORT, FIELD_MANAGER, event};
use capi_lb_api::loadbalancer::EndpointHost;
use kube::ResourceExt;
use kube::api::{Api, Patch};
use kube::core::DynamicObject;
use serde_json::json;

use crate::conditions::{ClusterEndpoint, cluster_endpoint_condition};
use crate::context::Context;
use crate::error::{Error, Result, is_conflict, kube_err};
use crate::metadata::patch_params;

use super::Reconciliation;
use super::consent::{Consent, Touch};
use super::publish::Publication;

impl Reconciliation<'_> {
    /// Publish the endpoint to `Cluster.spec.controlPlaneEndpoint` while it is empty (never
    /// overwriting another value) and say how it stands; `None` when this is not a control-plane
    /// load balancer.
    pub(super) async fn cluster_endpoint(
        &mut self,
        publication: &Publication,
    ) -> Result<Option<DesiredCondition>> {
        let Some(cluster_name) = self.lb.spec.cluster_name.clone() else {
            return Ok(None);
        };
        let Some(cluster) = self.cluster.clone() else {
            let qualified = format!("{}/{cluster_name}", self.namespace);
            return Ok(self.lb.spec.control_plane.as_ref().map(|_| {
                cluster_endpoint_condition(&ClusterEndpoint::ClusterNotFound(&qualified))
            }));
        };
        let asked = self.lb.spec.control_plane.is_some();
        // Meant to realise a Service of capi-lb's class (its author names one, as the Kamaji
        // flavors do): the address goes into the Service's ingress, and the Cluster's endpoint is
        // the Service's owner's to write (Kamaji's), unless `spec.controlPlane` asks for it. Told
        // by the annotation, not the binding: the Service may come after the first pass.
        if !asked
            && self
                .lb
                .annotations()
                .contains_key(crate::class::ANNOTATION_SERVICE)
        {
            return Ok(None);
        }
        let settings = match (&self.consent, asked) {
            (consent, _) if consent.allows(Touch::Endpoint) => {
                self.lb.spec.control_plane.clone().unwrap_or_default()
            }
            // Whether the Cluster consents cannot be told: said (its hooks are withheld too),
            // and nothing written.
            (Consent::Unreadable(message), _) => {
                return Ok(Some(cluster_endpoint_condition(
                    &ClusterEndpoint::ControlPlaneUnreadable {
                        cluster: &cluster_name,
                        message: message.clone(),
                    },
                )));
            }
            // Asked for, without the Cluster's consent: said, and nothing written.
            (_, true) => {
                return Ok(Some(cluster_endpoint_condition(
                    &ClusterEndpoint::NotNamed {
                        cluster: &cluster_name,
                    },
                )));
            }
            (_, false) => return Ok(None),
        };
        if !settings.publish_endpoint {
            return Ok(None);
        }
        let port = self
            .lb
            .spec
            .ports
            .first()
            .map(|p| p.port)
            .unwrap_or(DEFAULT_PORT);
        let desired = match (&self.lb.spec.endpoint, settings.endpoint_host) {
            (Some(endpoint), _) => Some((endpoint.host.clone(), endpoint.port)),
            (None, EndpointHost::StableName) => publication
                .endpoint
                .as_ref()
                .map(|e| (e.host.clone(), e.port)),
            (None, EndpointHost::ProviderAddress) => publication
                .publishable
                .first()
                .map(|a| (a.address.clone(), port)),
        };
        let Some((host, port)) = desired else {
            return Ok(Some(cluster_endpoint_condition(
                &ClusterEndpoint::WaitingForAddress,
            )));
        };
        let resource = self.ctx.capi.cluster.clone();
        let clusters: Api<DynamicObject> =
            Api::namespaced_with(self.ctx.client.clone(), &self.namespace, &resource);
        let describe = format!("Cluster {}/{cluster_name}", self.namespace);
        let mut cluster = cluster;
        let mut attempts = 0;
        let current = loop {
            let current = cluster
                .spec
                .control_plane_endpoint
                .clone()
                .unwrap_or_default();
            if !current.is_empty() {
                break current;
            }
            // First writer wins: the patch carries the resourceVersion read, so a concurrent write
            // (CAPI filling it from the infrastructure cluster) makes it fail instead of overwriting.
            let patch = json!({
                "metadata": {"resourceVersion": cluster.resource_version()},
                "spec": {"controlPlaneEndpoint": {"host": host, "port": port}},
            });
            match clusters
                .patch(&cluster_name, &patch_params(), &Patch::Merge(&patch))
                .await
            {
                Ok(updated) => {
                    self.ctx.caches.wrote(&resource, &updated);
                    break current;
                }
                // The Cluster changed since it was read (the cache lags Cluster API's frequent
                // status updates): read it again and decide on what it is now, a few times,
                // instead of failing the reconcile into the retry back-off.
                Err(e) if is_conflict(&e) && attempts < 3 => {
                    attempts += 1;
                    cluster = parse_cluster(
                        clusters
                            .get(&cluster_name)
                            .await
                            .map_err(kube_err("get", describe.clone()))?,
                        &describe,
                    )?;
                }
                Err(e) => return Err(kube_err("set controlPlaneEndpoint of", describe)(e)),
            }
        };
        let ours = format!("{host}:{port}");
        // Empty here means this pass set it.
        let state = if !current.is_empty() && (current.host != host || current.port != port) {
            let theirs = format!("{}:{}", current.host, current.port);
            if self.held_ours_last_pass(&cluster_name, &ours)
                && let Some(manager) = self
                    .restore_after_stale_copy(&clusters, &cluster_name, &current, &host, port)
                    .await?
            {
                self.notes.push(super::Note {
                    warning: true,
                    reason: event::CLUSTER_ENDPOINT_RESTORED,
                    message: format!(
                        "Cluster {cluster_name}'s spec.controlPlaneEndpoint was {ours}, written by \
                         capi-lb, when {manager} (the writer of the Cluster's status: Cluster API's \
                         cluster controller) replaced it with {theirs}, its infrastructure or \
                         control-plane provider's endpoint, from a read that had not seen capi-lb's \
                         write; capi-lb wrote {ours} back. A provider that reports an endpoint of its \
                         own competes with the LoadBalancer for the Cluster's: configure it not to"
                    ),
                });
                ClusterEndpoint::Set {
                    cluster: &cluster_name,
                    endpoint: ours,
                }
            } else {
                ClusterEndpoint::Mismatch {
                    cluster: &cluster_name,
                    current: theirs,
                    ours,
                }
            }
        } else {
            ClusterEndpoint::Set {
                cluster: &cluster_name,
                endpoint: ours,
            }
        };
        Ok(Some(cluster_endpoint_condition(&state)))
    }

    /// Whether this LoadBalancer's status says the Cluster held `ours` at its last pass.
    fn held_ours_last_pass(&self, cluster: &str, ours: &str) -> bool {
        let set = cluster_endpoint_condition(&ClusterEndpoint::Set {
            cluster,
            endpoint: ours.to_string(),
        });
        self.lb
            .status
            .as_ref()
            .into_iter()
            .flat_map(|s| &s.conditions)
            .any(|c| {
                c.type_ == set.type_
                    && c.status == "True"
                    && c.reason == set.reason.name
                    && c.message == set.message
            })
    }

    /// Cluster API's cluster controller fills an empty `spec.controlPlaneEndpoint` from its
    /// infrastructure cluster or control plane with a merge patch computed from its cache and sent
    /// without the resourceVersion (core/reconcilers/cluster/cluster_controller_phases.go, the
    /// patch helper): when its cache has not seen capi-lb's write yet, it writes the provider's
    /// endpoint over capi-lb's, which users meet too, and the certificates of later Machines would
    /// name it. Told apart from a person's change by who holds the field now: the manager that
    /// also writes the Cluster's status (a person does not). Then capi-lb's endpoint, which was
    /// there first, is written back, at the resourceVersion read. Returns that manager when
    /// restored; `None` leaves the other value alone (reported as a mismatch).
    async fn restore_after_stale_copy(
        &self,
        clusters: &Api<DynamicObject>,
        cluster_name: &str,
        seen: &capi_lb_api::capi::ClusterEndpoint,
        host: &str,
        port: i32,
    ) -> Result<Option<String>> {
        let describe = format!("Cluster {}/{cluster_name}", self.namespace);
        let Some(fresh) = clusters
            .get_opt(cluster_name)
            .await
            .map_err(kube_err("get", describe.clone()))?
        else {
            return Ok(None);
        };
        let Some(manager) = stale_copier(&fresh) else {
            return Ok(None);
        };
        let now = parse_cluster(fresh.clone(), &describe)?
            .spec
            .control_plane_endpoint
            .unwrap_or_default();
        if now != *seen {
            // Changed again since the pass began: the next pass decides on what it is then.
            return Ok(None);
        }
        let patch = json!({
            "metadata": {"resourceVersion": fresh.resource_version()},
            "spec": {"controlPlaneEndpoint": {"host": host, "port": port}},
        });
        match clusters
            .patch(cluster_name, &patch_params(), &Patch::Merge(&patch))
            .await
        {
            Ok(updated) => {
                self.ctx.caches.wrote(&self.ctx.capi.cluster, &updated);
                Ok(Some(manager))
            }
            // Written meanwhile: the Cluster's watch brings the next pass.
            Err(e) if is_conflict(&e) => Ok(None),
            Err(e) => Err(kube_err("restore controlPlaneEndpoint of", describe)(e)),
        }
    }
}

/// The field manager holding the Cluster's `spec.controlPlaneEndpoint`, when it is not capi-lb and
/// also writes the Cluster's status subresource: Cluster API's cluster controller.
fn stale_copier(cluster: &DynamicObject) -> Option<String> {
    let entries = cluster
        .metadata
        .managed_fields
        .as_deref()
        .unwrap_or_default();
    let holder = entries.iter().find(|e| {
        e.subresource.as_deref().unwrap_or_default().is_empty()
            && e.fields_v1
                .as_ref()
                .and_then(|f| {
                    f.0.get("f:spec")?
                        .get("f:controlPlaneEndpoint")?
                        .get("f:host")
                })
                .is_some()
    })?;
    let manager = holder.manager.clone()?;
    let writes_status = entries.iter().any(|e| {
        e.manager.as_ref() == Some(&manager) && e.subresource.as_deref() == Some("status")
    });
    (manager != FIELD_MANAGER && writes_status).then_some(manager)
}

/// The Cluster named by `spec.clusterName`, if it exists (a missing Cluster, or Cluster API not
/// installed, is not an error).
pub(super) async fn cluster_of(
    ctx: &Context,
    lb: &LoadBalancer,
    namespace: &str,
) -> Result<Option<Cluster>> {
    let Some(cluster) = &lb.spec.cluster_name else {
        return Ok(None);
    };
    // From the Clusters' cache when it has it (a Cluster it does not have yet may just be new).
    if let Some(Some(cached)) = ctx
        .caches
        .of(&ctx.capi.cluster)
        .and_then(|c| c.get(namespace, cluster))
        && let Ok(cluster) = cached.try_parse::<Cluster>()
    {
        return Ok(Some(cluster));
    }
    let describe = format!("Cluster {namespace}/{cluster}");
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), namespace, &ctx.capi.cluster);
    match clusters
        .get_opt(cluster)
        .await
        .map_err(kube_err("get", describe.clone()))?
    {
        Some(found) => parse_cluster(found, &describe).map(Some),
        None => Ok(None),
    }
}

/// A Cluster read at whichever version the cluster serves, in capi-lb's view.
fn parse_cluster(cluster: DynamicObject, describe: &str) -> Result<Cluster> {
    serde_json::to_value(cluster)
        .and_then(serde_json::from_value)
        .map_err(|source| Error::Serialization {
            object: describe.to_string(),
            source,
        })
}

/// Why reconciliation of `lb` is paused, if it is: the CAPI pause annotation on the LoadBalancer, or
/// `spec.paused` on its Cluster.
pub(super) fn paused(lb: &LoadBalancer, cluster: Option<&Cluster>) -> Option<String> {
    if lb.annotations().contains_key(ANNOTATION_PAUSED) {
        return Some(format!(
            "the LoadBalancer has the {ANNOTATION_PAUSED} annotation"
        ));
    }
    cluster
        .filter(|c| c.spec.paused == Some(true))
        .map(|c| format!("Cluster {} has spec.paused set", c.name_any()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(entries: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "demo", "namespace": "a", "managedFields": entries},
        }))
        .unwrap()
    }

    fn entry(
        manager: &str,
        subresource: Option<&str>,
        fields: serde_json::Value,
    ) -> serde_json::Value {
        let mut e = json!({"manager": manager, "operation": "Update", "apiVersion": "cluster.x-k8s.io/v1beta2",
            "fieldsType": "FieldsV1", "fieldsV1": fields});
        if let Some(s) = subresource {
            e["subresource"] = json!(s);
        }
        e
    }

    #[test]
    fn only_the_clusters_status_writer_holding_the_endpoint_is_a_stale_copier() {
        let endpoint = json!({"f:spec": {"f:controlPlaneEndpoint": {"f:host": {}, "f:port": {}}}});
        let status = json!({"f:status": {"f:conditions": {}}});
        let copied = cluster(json!([
            entry("manager", None, endpoint.clone()),
            entry("manager", Some("status"), status.clone()),
        ]));
        assert_eq!(stale_copier(&copied).as_deref(), Some("manager"));
        // A person (no status written) holding it, or capi-lb itself: not a copier.
        let person = cluster(json!([
            entry("kubectl-edit", None, endpoint.clone()),
            entry("manager", Some("status"), status.clone()),
        ]));
        assert_eq!(stale_copier(&person), None);
        let ours = cluster(json!([
            entry(FIELD_MANAGER, None, endpoint),
            entry(FIELD_MANAGER, Some("status"), status.clone()),
        ]));
        assert_eq!(stale_copier(&ours), None);
        // An earlier holder keeps the field's parent once the host moved to another manager.
        let moved = cluster(json!([
            entry(
                FIELD_MANAGER,
                None,
                json!({"f:spec": {"f:controlPlaneEndpoint": {}}})
            ),
            entry(
                "manager",
                None,
                json!({"f:spec": {"f:controlPlaneEndpoint": {"f:host": {}}}})
            ),
            entry("manager", Some("status"), status.clone()),
        ]));
        assert_eq!(stale_copier(&moved).as_deref(), Some("manager"));
        // Nobody holds the endpoint.
        let none = cluster(json!([entry("manager", Some("status"), status)]));
        assert_eq!(stale_copier(&none), None);
    }
}
