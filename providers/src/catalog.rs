//! The provider catalog: the [`Entry`] of every infrastructure provider, with everything the rest
//! of capi-lb needs to know about it. `capi-lb run`, the simulation `World`, the generated RBAC,
//! the in-memory API, the installed CRDs and the documentation tests all read [`CATALOG`], so a new
//! provider is its own module (with its entry) plus one line in [`CATALOG`]; a missing piece is a
//! compile error (a field of [`Entry`]) or a failing test, never a silent gap.

use crate::entry::{Dependencies, Entry};
use crate::registry::ProviderRegistry;
use crate::{dnslb, inmemory, kubedc, octavia, servicelb, zoned};

/// Every provider capi-lb has, in the order `--providers` lists them.
pub const CATALOG: &[Entry] = &[
    inmemory::ENTRY,
    kubedc::ENTRY,
    octavia::ENTRY,
    servicelb::ENTRY,
    dnslb::ENTRY,
    zoned::ENTRY,
];

/// The entry named `name`.
pub fn find(name: &str) -> Option<&'static Entry> {
    CATALOG.iter().find(|e| e.name == name)
}

/// The names of every provider.
pub fn names() -> Vec<&'static str> {
    CATALOG.iter().map(|e| e.name).collect()
}

/// The providers `capi-lb run` enables without `--providers`, and the shipped install: every
/// entry with `shipped` (checked by a test).
pub const DEFAULT_PROVIDERS: &str = "kubedc,octavia,service,dns,zoned";

/// The names of the providers the shipped install enables.
pub fn shipped() -> Vec<&'static str> {
    CATALOG
        .iter()
        .filter(|e| e.shipped)
        .map(|e| e.name)
        .collect()
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
        registry.register(entry, (entry.build)(dependencies));
    }
    Ok(registry)
}

/// The registry of every provider.
pub fn all(dependencies: &Dependencies) -> ProviderRegistry {
    let mut registry = ProviderRegistry::new();
    for entry in CATALOG {
        registry.register(entry, (entry.build)(dependencies));
    }
    registry
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_providers_are_the_shipped_ones_and_not_the_in_memory_one() {
        assert_eq!(DEFAULT_PROVIDERS, shipped().join(","));
        assert!(!shipped().contains(&"inmemory"));
    }

    #[test]
    fn the_entries_and_capi_lb_api_kinds_agree() {
        // Each provider's infrastructure kind is one of capi-lb's kinds, shipped alike, and each
        // infrastructure kind has its provider.
        let kinds = capi_lb_api::kinds::all();
        let infrastructure: Vec<_> = kinds
            .iter()
            .filter(|k| (k.resource)().group == capi_lb_api::constants::INFRASTRUCTURE_GROUP)
            .collect();
        assert_eq!(infrastructure.len(), CATALOG.len());
        for entry in CATALOG {
            let r = (entry.infrastructure)();
            let kind = kinds
                .iter()
                .find(|k| (k.resource)() == r)
                .unwrap_or_else(|| panic!("{}: {r:?} is not in kinds::all()", entry.name));
            assert_eq!(kind.shipped, entry.shipped, "{}", entry.name);
        }
    }

    use std::collections::BTreeSet;
    use std::path::Path;

    use std::sync::Arc;

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
            let registry = registry(&[entry.name], &deps).unwrap();
            let infra = (entry.infrastructure)();
            let enabled = registry.get(&infra.group, &infra.kind).unwrap();
            assert_eq!(enabled.name(), entry.name);
            assert_eq!(enabled.infrastructure_resource(), infra, "{}", entry.name);
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
