//! The Cluster side of a LoadBalancer: its Cluster, pause, and `Cluster.spec.controlPlaneEndpoint`.

use capi_lb_api::LoadBalancer;
use capi_lb_api::capi::Cluster;
use capi_lb_api::conditions::DesiredCondition;
use capi_lb_api::constants::{ANNOTATION_PAUSED, DEFAULT_PORT};
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
        // Empty here means this pass set it.
        let state = if !current.is_empty() && (current.host != host || current.port != port) {
            ClusterEndpoint::Mismatch {
                cluster: &cluster_name,
                current: format!("{}:{}", current.host, current.port),
                ours: format!("{host}:{port}"),
            }
        } else {
            ClusterEndpoint::Set {
                cluster: &cluster_name,
                endpoint: format!("{host}:{port}"),
            }
        };
        Ok(Some(cluster_endpoint_condition(&state)))
    }
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
