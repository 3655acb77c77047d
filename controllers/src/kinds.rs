//! Resolves a target kind (`apiGroup` + `kind` from `spec.targetKind`) to the API resource to list.
//! Well-known kinds (the Cluster API Machine) are built in; others are looked up with API discovery
//! when a client is available (against a real cluster) and cached once found. A kind that is not
//! installed is not cached, so installing its CRD later is picked up.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use capi_lb_api::capi::Machine;
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
        let (resource, _caps) = api_group
            .recommended_kind(kind)
            .ok_or_else(|| format!("API group {group} has no kind {kind}"))?;
        self.insert(resource.clone());
        Ok(resource)
    }
}
