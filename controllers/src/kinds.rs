//! Resolves a target kind (`apiGroup` + `kind` from `spec.targetKind`) to the API resource to list.
//! Well-known kinds (the Cluster API Machine) are built in; others are looked up with API discovery
//! when a client is available (against a real cluster) and cached once found. A kind that is not
//! installed is not cached, so installing its CRD later is picked up.
//!
//! Which kinds a LoadBalancer may name as targets is the administrator's choice, not the
//! LoadBalancer author's ([`TargetKinds`], `capi-lb run --target-kinds`): capi-lb lists the targets
//! and writes annotations on them with its own credentials, so a free choice would let anyone who may
//! create a LoadBalancer have capi-lb read and annotate objects they may not touch themselves.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};

use capi_lb_api::capi::{Cluster, Machine};
use capi_lb_api::constants::CAPI_GROUP;
use capi_lb_api::loadbalancer::TargetKind;
use kube::core::ApiResource;

/// Why a LoadBalancer's target kind yields no targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unlisted {
    /// The kind is not one LoadBalancers may name (`--target-kinds`), or capi-lb manages its
    /// objects for its own purposes: nothing of it is read or written.
    NotAllowed(String),
    /// The kind is not installed, or listing it failed.
    Unavailable(String),
}

impl Unlisted {
    /// The message, for conditions.
    pub fn message(&self) -> &str {
        match self {
            Unlisted::NotAllowed(m) | Unlisted::Unavailable(m) => m,
        }
    }
}

/// The target kinds LoadBalancers may name (`capi-lb run --target-kinds`). Cluster API's Machine
/// by default. Whatever is configured, a kind capi-lb reads or writes for its own purposes (every
/// resource its ClusterRole grants something on other than Machines: Services, EndpointSlices,
/// Secrets, Clusters, provider objects, its own LoadBalancers, ...) and every core kind is refused,
/// so a LoadBalancer can never make capi-lb annotate them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetKinds(Vec<TargetKind>);

impl Default for TargetKinds {
    fn default() -> Self {
        Self(vec![TargetKind::default()])
    }
}

impl TargetKinds {
    /// These kinds (duplicates dropped); Machines only when empty.
    pub fn new(kinds: Vec<TargetKind>) -> Self {
        let mut out = Vec::new();
        for kind in kinds {
            if !out.contains(&kind) {
                out.push(kind);
            }
        }
        if out.is_empty() {
            return Self::default();
        }
        Self(out)
    }

    /// Parse one `Kind.group` entry (`Machine.cluster.x-k8s.io`); a core kind (no group) is
    /// refused: no core kind has the addresses of a target, and capi-lb manages several.
    pub fn parse_one(entry: &str) -> Result<TargetKind, String> {
        let entry = entry.trim();
        let Some((kind, group)) = entry.split_once('.') else {
            return Err(format!(
                "{entry:?}: core kinds (without an API group) cannot be targets; write Kind.group, \
                 e.g. Machine.cluster.x-k8s.io"
            ));
        };
        let label = |l: &str| {
            !l.is_empty()
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        };
        let well_formed = kind.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && kind.chars().all(|c| c.is_ascii_alphanumeric())
            && group.split('.').all(label);
        if !well_formed {
            return Err(format!(
                "{entry:?} is not Kind.group (e.g. Machine.cluster.x-k8s.io)"
            ));
        }
        Ok(TargetKind {
            api_group: group.to_string(),
            kind: kind.to_string(),
        })
    }

    /// Whether LoadBalancers may name `kind`.
    pub fn allows(&self, kind: &TargetKind) -> bool {
        self.0.contains(kind)
    }

    /// Add a kind (tests).
    pub fn with(mut self, kind: TargetKind) -> Self {
        if !self.0.contains(&kind) {
            self.0.push(kind);
        }
        self
    }
}

impl std::fmt::Display for TargetKinds {
    /// `Machine.cluster.x-k8s.io,Other.example.com`, as the flag takes them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        write!(f, "{}", names.join(","))
    }
}

/// The resources (group, plural) capi-lb's ClusterRole grants anything on for its own purposes:
/// every resource of the generated role with every provider enabled, but Machines.
fn reserved_resources() -> BTreeSet<(String, String)> {
    let machines = (CAPI_GROUP.to_string(), "machines".to_string());
    crate::install::rbac::permissions(&crate::install::rbac::Enabled::all())
        .into_iter()
        .map(|(group, resource, _)| {
            let resource = resource
                .split_once('/')
                .map_or(resource.clone(), |(r, _)| r.to_string());
            (group, resource)
        })
        .filter(|r| *r != machines)
        .collect()
}

/// Target kind resolver.
pub struct KindResolver {
    known: Mutex<HashMap<(String, String), ApiResource>>,
    discovery: Option<kube::Client>,
    targets: Mutex<TargetKinds>,
    reserved: BTreeSet<(String, String)>,
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
            targets: Mutex::new(TargetKinds::default()),
            reserved: reserved_resources(),
        }
    }

    /// Built-in kinds plus API discovery through `client`.
    pub fn with_discovery(client: kube::Client) -> Self {
        Self {
            discovery: Some(client),
            ..Self::builtin()
        }
    }

    /// Let LoadBalancers name these target kinds (instead of Machines only).
    pub fn with_target_kinds(self, kinds: TargetKinds) -> Self {
        *self.targets.lock().unwrap_or_else(PoisonError::into_inner) = kinds;
        self
    }

    /// Let LoadBalancers name one more target kind (tests).
    pub fn allow_target_kind(&self, kind: TargetKind) {
        let mut targets = self.targets.lock().unwrap_or_else(PoisonError::into_inner);
        *targets = targets.clone().with(kind);
    }

    /// The API resource of a LoadBalancer's target kind, if LoadBalancers may name it
    /// ([`TargetKinds`]) and it is served.
    pub async fn resolve_target(&self, kind: &TargetKind) -> Result<ApiResource, Unlisted> {
        let allowed = self
            .targets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        // No core kind has the addresses of a target, and capi-lb manages several: never one,
        // whatever the configuration (the flag refuses them too).
        if kind.api_group.is_empty() {
            return Err(Unlisted::NotAllowed(format!(
                "target kind {kind} is not allowed: core kinds are never targets"
            )));
        }
        if !allowed.allows(kind) {
            return Err(Unlisted::NotAllowed(format!(
                "target kind {kind} is not allowed: this capi-lb takes targets of {allowed} only \
                 (an administrator adds kinds with capi-lb run --target-kinds, and grants capi-lb \
                 list, watch and patch on them)"
            )));
        }
        let resource = self
            .resolve(&kind.api_group, &kind.kind)
            .await
            .map_err(Unlisted::Unavailable)?;
        if self
            .reserved
            .contains(&(resource.group.clone(), resource.plural.clone()))
        {
            return Err(Unlisted::NotAllowed(format!(
                "target kind {kind} is not allowed: capi-lb manages {} for its own purposes and \
                 never takes them as targets",
                resource.plural
            )));
        }
        Ok(resource)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_kinds_parse_kind_dot_group_and_refuse_core_kinds() {
        let machine = TargetKinds::parse_one("Machine.cluster.x-k8s.io").unwrap();
        assert_eq!(machine, TargetKind::default());
        let appliance = TargetKinds::parse_one(" Appliance.example.com ").unwrap();
        assert_eq!(
            (appliance.kind.as_str(), appliance.api_group.as_str()),
            ("Appliance", "example.com")
        );
        for bad in [
            "Service",
            "",
            "machine.cluster.x-k8s.io",
            "Machine.",
            "Ma-chine.x.io",
            "M.Example.com",
        ] {
            assert!(TargetKinds::parse_one(bad).is_err(), "{bad}");
        }
        let kinds = TargetKinds::new(vec![appliance.clone(), appliance.clone()]);
        assert_eq!(kinds.to_string(), "Appliance.example.com");
        assert!(kinds.allows(&appliance) && !kinds.allows(&machine));
        assert_eq!(TargetKinds::new(Vec::new()), TargetKinds::default());
    }

    #[test]
    fn what_capi_lb_manages_is_reserved_and_machines_are_not() {
        let reserved = reserved_resources();
        for (group, resource) in [
            ("", "services"),
            ("", "secrets"),
            ("", "endpoints"),
            ("discovery.k8s.io", "endpointslices"),
            ("cluster.x-k8s.io", "clusters"),
            ("loadbalancer.cluster.x-k8s.io", "loadbalancers"),
            ("infrastructure.cluster.x-k8s.io", "octavialoadbalancers"),
            ("kube-dc.com", "eips"),
            ("externaldns.k8s.io", "dnsendpoints"),
        ] {
            assert!(
                reserved.contains(&(group.to_string(), resource.to_string())),
                "{group}/{resource}"
            );
        }
        assert!(!reserved.contains(&(CAPI_GROUP.to_string(), "machines".to_string())));
        assert!(
            reserved.iter().all(|(_, r)| !r.contains('/')),
            "{reserved:?}"
        );
    }

    #[tokio::test]
    async fn a_kind_not_allowed_is_refused_before_anything_is_resolved() {
        let resolver = KindResolver::builtin();
        let appliance = TargetKind {
            api_group: "example.com".into(),
            kind: "Appliance".into(),
        };
        assert!(matches!(
            resolver.resolve_target(&appliance).await,
            Err(Unlisted::NotAllowed(m)) if m.contains("Machine.cluster.x-k8s.io only")
        ));
        resolver.allow_target_kind(appliance.clone());
        // Allowed now, but not installed (no discovery here).
        assert!(matches!(
            resolver.resolve_target(&appliance).await,
            Err(Unlisted::Unavailable(_))
        ));
        assert!(
            resolver
                .resolve_target(&TargetKind::default())
                .await
                .is_ok()
        );
    }
}
