//! The provider catalog: one [`Entry`] per infrastructure provider, with everything the rest of
//! capi-lb needs to know about it. `capi-lb run`, the simulation `World`, the generated RBAC, the
//! in-memory API, the installed CRDs and the documentation tests all read [`CATALOG`], so a new
//! provider is its own module (with its entry) plus one line in [`CATALOG`]; a missing piece is a
//! compile error (a field of [`Entry`]) or a failing test, never a silent gap.

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::ApiResource;

use crate::clock::SharedClock;
use crate::inmemory::InMemoryCloud;
use crate::observe::ApiObserver;
use crate::provider::{Provider, Reason};
use crate::registry::ProviderRegistry;
use crate::{inmemory, kubedc, octavia, servicelb};

/// Every provider capi-lb has, in the order `--providers` lists them.
pub const CATALOG: &[Entry] = &[
    inmemory::ENTRY,
    kubedc::ENTRY,
    octavia::ENTRY,
    servicelb::ENTRY,
];

/// What a provider is built from.
#[derive(Clone)]
pub struct Dependencies {
    /// Client of the management cluster (credentials Secrets, objects a provider creates there).
    pub client: kube::Client,
    /// The clock (a manual one in tests and `simulate`).
    pub clock: SharedClock,
    /// Receives every request a provider makes to its cloud's API (metrics, tests).
    pub observer: Option<Arc<dyn ApiObserver>>,
    /// The in-memory cloud the in-memory provider uses; a new one when `None`. A simulation shares
    /// one across controller restarts.
    pub cloud: Option<InMemoryCloud>,
}

impl std::fmt::Debug for Dependencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dependencies")
            .field("observer", &self.observer.is_some())
            .field("cloud", &self.cloud)
            .finish_non_exhaustive()
    }
}

impl Dependencies {
    /// Dependencies with `client` and `clock`, no observer and a new in-memory cloud.
    pub fn new(client: kube::Client, clock: SharedClock) -> Self {
        Self {
            client,
            clock,
            observer: None,
            cloud: None,
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

/// One provider.
#[derive(Clone, Copy)]
pub struct Entry {
    /// Name for `capi-lb run --providers` (e.g. `kubedc`).
    pub name: &'static str,
    /// Name in prose, for the generated RBAC comments (e.g. `kube-dc provider`).
    pub title: &'static str,
    /// The documentation page, relative to the repository root.
    pub docs: &'static str,
    /// The infrastructure kind (`spec.infrastructureRef`) the provider handles.
    pub infrastructure: fn() -> ApiResource,
    /// The CRD of the infrastructure kind.
    pub crd: fn() -> CustomResourceDefinition,
    /// Build the provider.
    pub build: fn(&Dependencies) -> Arc<dyn Provider>,
    /// Kinds the provider creates through the Kubernetes API besides Services (which `run` always
    /// maps back by their tags).
    pub owned_kinds: &'static [OwnedKind],
    /// Permissions the provider needs besides watching its infrastructure kind and `owned_kinds`.
    pub calls: &'static [Rule],
    /// Every condition reason the provider reports, with its severity.
    pub reasons: &'static [Reason],
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
}

/// The entry named `name`.
pub fn find(name: &str) -> Option<&'static Entry> {
    CATALOG.iter().find(|e| e.name == name)
}

/// The names of every provider.
pub fn names() -> Vec<&'static str> {
    CATALOG.iter().map(|e| e.name).collect()
}

/// The entry whose infrastructure kind is `kind` (in any group).
pub fn for_kind(kind: &str) -> Option<&'static Entry> {
    CATALOG.iter().find(|e| (e.infrastructure)().kind == kind)
}

/// A provider name no entry has.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown provider {name:?}; available: {}", names().join(", "))]
pub struct UnknownProvider {
    /// The name asked for.
    pub name: String,
}

/// The registry of the providers named `names`, built from `dependencies`.
pub fn registry(
    names: &[impl AsRef<str>],
    dependencies: &Dependencies,
) -> Result<ProviderRegistry, UnknownProvider> {
    let mut registry = ProviderRegistry::new();
    for name in names {
        let entry = find(name.as_ref()).ok_or_else(|| UnknownProvider {
            name: name.as_ref().to_string(),
        })?;
        registry.register((entry.build)(dependencies));
    }
    Ok(registry)
}

/// The registry of every provider.
pub fn all(dependencies: &Dependencies) -> ProviderRegistry {
    let mut registry = ProviderRegistry::new();
    for entry in CATALOG {
        registry.register((entry.build)(dependencies));
    }
    registry
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::*;
    use crate::clock::SystemClock;

    /// A client that is never called (building a provider makes no request).
    fn dependencies() -> Dependencies {
        let service = tower::service_fn(|_: http::Request<kube::client::Body>| async {
            Err::<http::Response<kube::client::Body>, std::io::Error>(std::io::Error::other(
                "no API in this test",
            ))
        });
        Dependencies::new(kube::Client::new(service, "default"), Arc::new(SystemClock))
    }

    #[tokio::test]
    async fn every_entry_builds_the_provider_it_describes() {
        let deps = dependencies();
        for entry in CATALOG {
            let provider = (entry.build)(&deps);
            assert_eq!(provider.name(), entry.name);
            let infra = (entry.infrastructure)();
            assert_eq!(provider.infrastructure_resource(), infra, "{}", entry.name);
            let crd = (entry.crd)();
            assert_eq!(crd.spec.group, infra.group, "{}", entry.name);
            assert_eq!(crd.spec.names.kind, infra.kind, "{}", entry.name);
            assert_eq!(crd.spec.names.plural, infra.plural, "{}", entry.name);
            assert!(
                crd.spec.versions.iter().any(|v| v.name == infra.version),
                "{}",
                entry.name
            );
            assert_eq!(for_kind(&infra.kind).map(|e| e.name), Some(entry.name));
        }
        let registry = all(&deps);
        assert_eq!(registry.names(), names());
    }

    #[test]
    fn names_kinds_and_reasons_are_unique_and_docs_exist() {
        let names: BTreeSet<_> = CATALOG.iter().map(|e| e.name).collect();
        assert_eq!(names.len(), CATALOG.len());
        let kinds: BTreeSet<_> = CATALOG.iter().map(|e| (e.infrastructure)().kind).collect();
        assert_eq!(kinds.len(), CATALOG.len());
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for entry in CATALOG {
            assert!(
                root.join(entry.docs).is_file(),
                "{}: {} is missing",
                entry.name,
                entry.docs
            );
            let reasons: BTreeSet<_> = entry.reasons.iter().map(|r| r.name).collect();
            assert_eq!(reasons.len(), entry.reasons.len(), "{}", entry.name);
            for reason in entry.reasons {
                assert!(
                    reason.name.starts_with(|c: char| c.is_ascii_uppercase())
                        && reason.name.chars().all(|c| c.is_ascii_alphanumeric()),
                    "{}: {:?} is not CamelCase",
                    entry.name,
                    reason.name
                );
            }
            // The infrastructure kind is always watched and never granted twice.
            let infra = (entry.infrastructure)();
            assert_eq!(entry.watches()[0], (infra.group, infra.plural));
        }
    }

    #[tokio::test]
    async fn unknown_names_are_refused_with_the_available_ones() {
        let err = registry(&["inmemory", "azure"], &dependencies()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "unknown provider \"azure\"; available: {}",
                names().join(", ")
            )
        );
    }
}
