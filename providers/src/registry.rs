//! The provider registry: maps an `infrastructureRef` (API group and kind) to the provider that
//! handles it. Built once at start-up from the enabled providers.

use std::sync::Arc;

use kube::core::ApiResource;

use crate::provider::Provider;

/// The enabled providers.
#[derive(Clone, Default)]
pub struct ProviderRegistry {
    providers: Vec<Arc<dyn Provider>>,
}

impl std::fmt::Debug for ProviderRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.providers.iter().map(|p| p.name()))
            .finish()
    }
}

impl ProviderRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a provider. A later provider for the same kind replaces an earlier one.
    pub fn register(&mut self, provider: Arc<dyn Provider>) -> &mut Self {
        let resource = provider.infrastructure_resource();
        self.providers.retain(|p| {
            let r = p.infrastructure_resource();
            !(r.group == resource.group && r.kind == resource.kind)
        });
        self.providers.push(provider);
        self
    }

    /// The provider for an infrastructure API group and kind.
    pub fn get(&self, api_group: &str, kind: &str) -> Option<Arc<dyn Provider>> {
        self.providers
            .iter()
            .find(|p| {
                let r = p.infrastructure_resource();
                r.group == api_group && r.kind == kind
            })
            .cloned()
    }

    /// The same providers, each wrapped by `wrap` (e.g. to measure their calls).
    pub fn wrapped(&self, wrap: impl Fn(Arc<dyn Provider>) -> Arc<dyn Provider>) -> Self {
        Self {
            providers: self.providers.iter().cloned().map(wrap).collect(),
        }
    }

    /// The infrastructure kinds of every enabled provider.
    pub fn resources(&self) -> Vec<ApiResource> {
        self.providers
            .iter()
            .map(|p| p.infrastructure_resource())
            .collect()
    }

    /// Names of the enabled providers.
    pub fn names(&self) -> Vec<&'static str> {
        self.providers.iter().map(|p| p.name()).collect()
    }

    /// `Kind.group` of every enabled provider, for messages.
    pub fn describe(&self) -> String {
        let kinds: Vec<String> = self
            .resources()
            .iter()
            .map(|r| format!("{}.{}", r.kind, r.group))
            .collect();
        if kinds.is_empty() {
            "none".to_string()
        } else {
            kinds.join(", ")
        }
    }
}
