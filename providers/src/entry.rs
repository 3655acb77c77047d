//! What the rest of capi-lb knows about a provider: its [`Entry`] (name, infrastructure kind, how
//! it is built, what it creates through the Kubernetes API, the permissions it needs, the reasons
//! it reports) and what every provider is built from ([`Dependencies`]). Each provider module
//! states its entry once, as `pub const ENTRY`; the [`crate::catalog`] lists them. This module
//! names no provider, so providers depend on it and the catalog on them, never the other way.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::{ApiResource, DynamicObject};

use crate::clock::SharedClock;
use crate::observe::ApiObserver;
use crate::provider::{Provider, Reason};

/// Which Secrets a provider may use as credentials (a cloud's clouds.yaml, a remote cluster's
/// kubeconfig). By default any Secret of the provider object's namespace (the trust model of Cluster
/// API's providers: whoever may write the provider object may use the namespace's Secrets); with a
/// required label (`--credentials-secret-label`), only Secrets their owner labelled for capi-lb.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CredentialsPolicy {
    /// The label (key, value) a credentials Secret must carry.
    pub required_label: Option<(String, String)>,
}

impl CredentialsPolicy {
    /// Why `secret` (in `namespace`, named `name`) may not be used as credentials, if it may not.
    pub fn refuses(&self, secret: &k8s_openapi::api::core::v1::Secret) -> Option<String> {
        let (key, value) = self.required_label.as_ref()?;
        let labels = secret.metadata.labels.as_ref();
        if labels.and_then(|l| l.get(key)) == Some(value) {
            return None;
        }
        Some(format!(
            "Secret {}/{} is not labelled {key}={value}, which capi-lb requires of a Secret used as credentials: it was not read",
            secret.metadata.namespace.as_deref().unwrap_or_default(),
            secret.metadata.name.as_deref().unwrap_or_default()
        ))
    }
}

/// What a provider is built from.
#[derive(Clone)]
pub struct Dependencies {
    /// Client of the management cluster (credentials Secrets, objects a provider creates there).
    pub client: kube::Client,
    /// Which Secrets may be used as credentials.
    pub credentials: CredentialsPolicy,
    /// The clock (a manual one in tests and `simulate`).
    pub clock: SharedClock,
    /// Receives every request a provider makes to its cloud's API (metrics, tests).
    pub observer: Option<Arc<dyn ApiObserver>>,
}

impl std::fmt::Debug for Dependencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dependencies")
            .field("observer", &self.observer.is_some())
            .finish_non_exhaustive()
    }
}

impl Dependencies {
    /// Dependencies with `client` and `clock`, and no observer.
    pub fn new(client: kube::Client, clock: SharedClock) -> Self {
        Self {
            client,
            credentials: CredentialsPolicy::default(),
            clock,
            observer: None,
        }
    }
}

/// One RBAC permission: API group, resource (with `/subresource`), verbs.
pub type Rule = (&'static str, &'static str, &'static [&'static str]);

/// A kind a provider creates through the Kubernetes API, labelled with the owning LoadBalancer's UID
/// tag and annotated with its name (see [`crate::provider::tags`]); `run` watches it (when it is
/// installed) and maps each object back to its LoadBalancer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnedKind {
    /// API group.
    pub group: &'static str,
    /// API version.
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Plural resource name.
    pub plural: &'static str,
    /// What to say when the kind is not installed.
    pub missing: &'static str,
}

impl OwnedKind {
    /// The kind as an [`ApiResource`].
    pub fn api_resource(&self) -> ApiResource {
        ApiResource {
            group: self.group.to_string(),
            version: self.version.to_string(),
            api_version: if self.group.is_empty() {
                self.version.to_string()
            } else {
                format!("{}/{}", self.group, self.version)
            },
            kind: self.kind.to_string(),
            plural: self.plural.to_string(),
        }
    }
}

/// One provider: the single statement of its name, kind and construction.
#[derive(Clone, Copy)]
pub struct Entry {
    /// Name for `capi-lb run --providers` (e.g. `kubedc`).
    pub name: &'static str,
    /// Name in prose, for the generated RBAC comments (e.g. `kube-dc provider`).
    pub title: &'static str,
    /// Enabled by the shipped install (`config/`, the clusterctl components) and by `run` without
    /// `--providers`. False for a provider whose addresses the tenants choose (the in-memory
    /// provider: tests, demos and `simulate`), which must be asked for by name.
    pub shipped: bool,
    /// The documentation page, relative to the repository root.
    pub docs: &'static str,
    /// The infrastructure kind (`spec.infrastructureRef`) the provider handles.
    pub infrastructure: fn() -> ApiResource,
    /// The CRD of the infrastructure kind.
    pub crd: fn() -> CustomResourceDefinition,
    /// Build the provider.
    pub build: fn(&Dependencies) -> Arc<dyn Provider>,
    /// The provider checks its members' health itself (Octavia's health monitor), so capi-lb's
    /// target probes (`spec.targetHealth`) do not apply.
    pub checks_members: bool,
    /// The load balancer proxies connections (Octavia's amphorae end them and open their own to
    /// the members) rather than forwarding packets to a virtual IP: a Service of capi-lb's class
    /// on it gets `ipMode: Proxy` on its ingress, so kube-proxy does not send in-cluster clients
    /// of that IP straight to the endpoints, past the load balancer (KEP-1860).
    pub proxies: bool,
    /// Kinds the provider creates through the Kubernetes API besides Services (which `run` always
    /// maps back by their tags).
    pub owned_kinds: &'static [OwnedKind],
    /// Permissions the provider needs besides watching its infrastructure kind and `owned_kinds`.
    pub calls: &'static [Rule],
    /// Every condition reason the provider reports, with its severity.
    pub reasons: &'static [Reason],
    /// For a load balancer made of DNS records whose addresses are its members' (the DNS
    /// provider): the name and TTL of the infrastructure object's records, which the reconciler
    /// publishes through its `DNSEndpoint`, waits on in every drain, and changes only on targets
    /// probed since (see `docs/providers/dns.md`). `None` for every other provider.
    pub records: fn(&DynamicObject) -> Option<RecordSet>,
}

/// The records of a load balancer made of DNS ([`Entry::records`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordSet {
    /// The name the records are published under.
    pub hostname: String,
    /// Their TTL.
    pub ttl: Duration,
    /// How long a record taken out may still be in resolvers' caches: the larger of the TTL asked
    /// for and the TTL the published records were written with.
    pub cached_for: Duration,
}

/// [`Entry::records`] of a provider whose load balancer is not made of DNS records.
pub fn no_records(_: &DynamicObject) -> Option<RecordSet> {
    None
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Entry {
    /// The watched resources (group, plural): the infrastructure kind and the owned kinds.
    pub fn watches(&self) -> Vec<(String, String)> {
        let infra = (self.infrastructure)();
        std::iter::once((infra.group, infra.plural))
            .chain(
                self.owned_kinds
                    .iter()
                    .map(|k| (k.group.to_string(), k.plural.to_string())),
            )
            .collect()
    }

    /// Whether this provider handles the infrastructure kind `group`/`kind`.
    pub fn handles(&self, group: &str, kind: &str) -> bool {
        let infra = (self.infrastructure)();
        infra.group == group && infra.kind == kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Secret;

    fn secret(labels: &[(&str, &str)]) -> Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "openstack", "namespace": "team-a",
                         "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string()))
                             .collect::<std::collections::BTreeMap<_, _>>()}
        }))
        .unwrap_or_default()
    }

    #[test]
    fn a_required_label_admits_only_the_secrets_that_carry_it() {
        let open = CredentialsPolicy::default();
        assert_eq!(open.refuses(&secret(&[])), None);
        let strict = CredentialsPolicy {
            required_label: Some(("capi-lb/credentials".into(), "true".into())),
        };
        assert_eq!(
            strict.refuses(&secret(&[("capi-lb/credentials", "true")])),
            None
        );
        for labels in [
            &[][..],
            &[("capi-lb/credentials", "false")],
            &[("other", "true")],
        ] {
            let why = strict.refuses(&secret(labels));
            assert!(
                why.as_deref()
                    .is_some_and(|m| m.contains("Secret team-a/openstack")
                        && m.contains("capi-lb/credentials=true")),
                "{labels:?}: {why:?}"
            );
        }
    }
}
