//! The one gate of what a LoadBalancer may touch of a Cluster: the Cluster's
//! `spec.controlPlaneEndpoint` (it goes into its certificates), its workload cluster's
//! `default/kubernetes` endpoints (written with Cluster API's admin kubeconfig), and deletion hooks
//! on its Machines (which hold their deletion). Who may write LoadBalancers in a namespace is not
//! always who owns its Clusters, so each of these needs the Cluster's consent: the Cluster, or its
//! control-plane object, names this LoadBalancer in `loadbalancer.cluster.x-k8s.io/loadBalancerRef`.
//! `spec.controlPlane` and `spec.workloadEndpoints` say how, never whether.
//!
//! The consent is read once a pass ([`Reconciliation::consent`]) and every path asks
//! [`Consent::allows`]: the Cluster endpoint, the workload endpoints and the targets' hooks.
//!
//! Machines of a Cluster that does not exist may get hooks: no one else's LoadBalancer can select
//! them (a LoadBalancer with `spec.clusterName` selects only that Cluster's Machines), and a Cluster
//! created later without naming this LoadBalancer takes them back at the next pass. A LoadBalancer
//! without `spec.clusterName` has no Cluster to ask and touches none of these.

use capi_lb_api::capi::Cluster;
use capi_lb_api::constants::{
    ANNOTATION_LOAD_BALANCER_REF, CONTROL_PLANE_GROUP, CONTROL_PLANE_KINDS,
};
use kube::ResourceExt;
use kube::api::Api;
use kube::core::DynamicObject;

use super::Reconciliation;

/// What the LoadBalancer's Cluster says of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Consent {
    /// No `spec.clusterName`: no Cluster to ask.
    NoCluster,
    /// `spec.clusterName` names a Cluster that does not exist.
    ClusterMissing,
    /// The Cluster, or its control-plane object, names this LoadBalancer.
    Named,
    /// Neither names it.
    NotNamed,
    /// Whether it is named cannot be told: the control-plane object cannot be read (the message
    /// says why).
    Unreadable(String),
}

/// What a LoadBalancer may touch of its Cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Touch {
    /// `Cluster.spec.controlPlaneEndpoint`.
    Endpoint,
    /// The workload cluster's `default/kubernetes` endpoints.
    WorkloadEndpoints,
    /// Deletion hooks on the Cluster's Machines.
    MachineHooks,
}

impl Consent {
    /// Whether this consent lets the LoadBalancer `touch` its Cluster.
    pub fn allows(&self, touch: Touch) -> bool {
        match self {
            Consent::Named => true,
            Consent::ClusterMissing => touch == Touch::MachineHooks,
            Consent::NoCluster | Consent::NotNamed | Consent::Unreadable(_) => false,
        }
    }
}

/// Whether `annotations` name the LoadBalancer `name` in `loadBalancerRef`.
fn names(annotations: &std::collections::BTreeMap<String, String>, name: &str) -> bool {
    annotations
        .get(ANNOTATION_LOAD_BALANCER_REF)
        .map(String::as_str)
        == Some(name)
}

impl Reconciliation<'_> {
    /// The consent of this LoadBalancer's Cluster (read once a pass). A control-plane object is
    /// read only when the Cluster itself does not name the LoadBalancer, and only of the
    /// control-plane kinds capi-lb knows: a Cluster's author must not be able to make capi-lb read
    /// another kind of object (a Secret, say) in the namespace.
    pub(super) async fn consent(&self) -> Consent {
        if self.lb.spec.cluster_name.is_none() {
            return Consent::NoCluster;
        }
        let Some(cluster) = &self.cluster else {
            return Consent::ClusterMissing;
        };
        match self.control_plane_names_us(cluster).await {
            Ok(true) => Consent::Named,
            Ok(false) => Consent::NotNamed,
            Err(message) => Consent::Unreadable(message),
        }
    }

    async fn control_plane_names_us(&self, cluster: &Cluster) -> Result<bool, String> {
        let name = self.identity.name.as_str();
        if names(cluster.annotations(), name) {
            return Ok(true);
        }
        let Some((group, kind, cp_name)) = cluster.control_plane_ref() else {
            return Ok(false);
        };
        let describe = format!("{kind}.{group} {}/{cp_name}", self.namespace);
        if group != CONTROL_PLANE_GROUP || !CONTROL_PLANE_KINDS.iter().any(|(k, _)| *k == kind) {
            let known: Vec<&str> = CONTROL_PLANE_KINDS.iter().map(|(k, _)| *k).collect();
            return Err(format!(
                "control plane {describe}: capi-lb reads the {ANNOTATION_LOAD_BALANCER_REF} \
                 annotation only from the control-plane kinds of {CONTROL_PLANE_GROUP} it knows \
                 ({}); put the annotation on the Cluster instead",
                known.join(", ")
            ));
        }
        let resource = self
            .ctx
            .kinds
            .resolve(&group, &kind)
            .await
            .map_err(|e| format!("control plane {describe}: {e}"))?;
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.ctx.client.clone(), &self.namespace, &resource);
        match api.get_opt(&cp_name).await {
            // Not created yet (or gone): it names nobody.
            Ok(None) => Ok(false),
            Ok(Some(control_plane)) => Ok(names(control_plane.annotations(), name)),
            Err(e) => Err(format!("reading control plane {describe}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_clusters_naming_opens_its_endpoint_workload_and_machines() {
        use Touch::*;
        for touch in [Endpoint, WorkloadEndpoints, MachineHooks] {
            assert!(Consent::Named.allows(touch));
            assert!(!Consent::NotNamed.allows(touch), "{touch:?}");
            assert!(!Consent::NoCluster.allows(touch), "{touch:?}");
            assert!(!Consent::Unreadable("x".into()).allows(touch), "{touch:?}");
        }
        // Only Machines of a Cluster that does not exist: no one else's can be selected.
        assert!(Consent::ClusterMissing.allows(MachineHooks));
        assert!(!Consent::ClusterMissing.allows(Endpoint));
        assert!(!Consent::ClusterMissing.allows(WorkloadEndpoints));
    }
}
