//! Resolves a target kind (`apiGroup` + `kind` from `spec.targetKind`) to the API resource to list.
//! Well-known kinds (the Cluster API Machine) are built in; others are looked up with API discovery
//! when a client is available (against a real cluster) and cached once found. A kind that is not
//! installed is not cached, so installing its CRD later is picked up.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use capi_lb_api::capi::{Cluster, Machine};
use kube::core::ApiResource;

/// Target kind resolver.
pub struct KindResolver {
    known: Mutex<HashMap<(String, String), ApiResource>>,
    discovery: Option<kube::Client>,
}

impl std::fmt::Debug for KindResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KindResolver")
            .field("discovery", &self.discovery.is_some())
            .finish_non_exhaustive()
    }
}

impl KindResolver {
    /// Only the built-in kinds (the in-memory API has no discovery).
    pub fn builtin() -> Self {
        let machine = ApiResource::erase::<Machine>(&());
        let known = HashMap::from([((machine.group.clone(), machine.kind.clone()), machine)]);
        Self {
            known: Mutex::new(known),
            discovery: None,
        }
    }

    /// Built-in kinds plus API discovery through `client`.
    pub fn with_discovery(client: kube::Client) -> Self {
        Self {
            discovery: Some(client),
            ..Self::builtin()
        }
    }

    /// Add a kind (tests, or a kind known from configuration).
    pub fn insert(&self, resource: ApiResource) {
        self.known
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((resource.group.clone(), resource.kind.clone()), resource);
    }

    /// The API resource for a kind, or a message saying why there is none.
    pub async fn resolve(&self, group: &str, kind: &str) -> Result<ApiResource, String> {
        let key = (group.to_string(), kind.to_string());
        if let Some(found) = self
            .known
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
        {
            return Ok(found.clone());
        }
        let Some(client) = &self.discovery else {
            return Err(format!(
                "target kind {kind}.{group} is not known; built-in kinds: Machine.cluster.x-k8s.io"
            ));
        };
        let api_group = kube::discovery::group(client, group)
            .await
            .map_err(|e| format!("API group {group} is not available: {e}"))?;
        let resource = served_kind(&api_group, kind)
            .ok_or_else(|| format!("API group {group} has no kind {kind}"))?;
        self.insert(resource.clone());
        Ok(resource)
    }
}

/// The Cluster API kinds capi-lb reads and writes (Machines, Clusters) at the version the cluster
/// serves: v1beta2 where Cluster API serves it (v1.11 and later), else the deprecated v1beta1 of an
/// older management cluster. The objects' shapes differ only where capi-lb reads both forms
/// (`controlPlaneRef`, conditions); what differs is the URL, and the `apiVersion` of the owner
/// reference to the Cluster, which the garbage collector resolves.
#[derive(Clone, Debug, PartialEq)]
pub struct CapiKinds {
    /// Machines.
    pub machine: ApiResource,
    /// Clusters.
    pub cluster: ApiResource,
    /// Whether the API serves Machines (false for a cluster without Cluster API).
    pub machine_served: bool,
    /// Whether the API serves Clusters.
    pub cluster_served: bool,
}

impl Default for CapiKinds {
    /// v1beta2, served (the in-memory API).
    fn default() -> Self {
        Self {
            machine: ApiResource::erase::<Machine>(&()),
            cluster: ApiResource::erase::<Cluster>(&()),
            machine_served: true,
            cluster_served: true,
        }
    }
}

impl CapiKinds {
    /// Ask API discovery which version of `cluster.x-k8s.io` serves Machines and Clusters (its
    /// preferred version when it has the kind). A missing group is not an error: nothing is served,
    /// and the v1beta2 resources stand in; failing to reach the API is.
    pub async fn discover(client: &kube::Client) -> Result<Self, kube::Error> {
        let defaults = Self::default();
        let group = match kube::discovery::group(client, &defaults.machine.group).await {
            Ok(group) => group,
            Err(kube::Error::Discovery(_)) => {
                return Ok(Self {
                    machine_served: false,
                    cluster_served: false,
                    ..defaults
                });
            }
            Err(e) => return Err(e),
        };
        let found = |kind: &str, default: ApiResource| match served_kind(&group, kind) {
            Some(resource) => (resource, true),
            None => (default, false),
        };
        let (machine, machine_served) = found(&defaults.machine.kind, defaults.machine.clone());
        let (cluster, cluster_served) = found(&defaults.cluster.kind, defaults.cluster.clone());
        Ok(Self {
            machine,
            cluster,
            machine_served,
            cluster_served,
        })
    }

    /// The Cluster API version in use, for messages (`v1beta2`, `v1beta1`).
    pub fn version(&self) -> &str {
        &self.machine.version
    }
}

/// The resource of `kind` in `group` at the group's preferred version, or, when the kind is not
/// served there, at its most stable version (a group's kinds may be served at different versions:
/// KubeadmControlPlane at v1beta2 and KamajiControlPlane at v1alpha2 share
/// `controlplane.cluster.x-k8s.io`, whose preferred version has no KamajiControlPlane).
pub fn served_kind(group: &kube::discovery::ApiGroup, kind: &str) -> Option<ApiResource> {
    if let Some((resource, _)) = group.recommended_kind(kind) {
        return Some(resource);
    }
    group
        .resources_by_stability()
        .into_iter()
        .map(|(resource, _)| resource)
        .find(|resource| resource.kind == kind)
}
