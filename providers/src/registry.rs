//! The provider registry: maps an `infrastructureRef` (API group and kind) to the enabled provider
//! that handles it. Built once at start-up from the catalog entries of the enabled providers; the
//! entry says the provider's name and kind, so a provider does not repeat them.

use std::sync::Arc;

use kube::core::ApiResource;

use crate::entry::Entry;
use crate::provider::Provider;

/// An enabled provider: its catalog entry and the provider built from it.
#[derive(Clone)]
pub struct Enabled {
    /// What the catalog says of it.
    pub entry: &'static Entry,
    /// The provider.
    pub provider: Arc<dyn Provider>,
}

impl std::fmt::Debug for Enabled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.entry.name)
    }
}

impl Enabled {
    /// Its name (`--providers`).
    pub fn name(&self) -> &'static str {
        self.entry.name
    }

    /// The infrastructure kind it handles.
    pub fn infrastructure_resource(&self) -> ApiResource {
        (self.entry.infrastructure)()
    }
}

impl std::ops::Deref for Enabled {
    type Target = dyn Provider;

    fn deref(&self) -> &Self::Target {
        self.provider.as_ref()
    }
}

/// The enabled providers.
#[derive(Clone, Default)]
pub struct ProviderRegistry {
    enabled: Vec<Enabled>,
}

impl std::fmt::Debug for ProviderRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl ProviderRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Enable `provider` as what `entry` describes. A later provider for the same kind replaces an
    /// earlier one.
    pub fn register(&mut self, entry: &'static Entry, provider: Arc<dyn Provider>) -> &mut Self {
        let resource = (entry.infrastructure)();
        self.enabled
            .retain(|e| !e.entry.handles(&resource.group, &resource.kind));
        self.enabled.push(Enabled { entry, provider });
        self
    }

    /// Replace the provider of `entry` with `provider`, when `entry` is enabled (e.g. the in-memory
    /// provider over a cloud that outlives it); otherwise nothing changes.
    pub fn replace(&mut self, entry: &'static Entry, provider: Arc<dyn Provider>) -> &mut Self {
        for enabled in &mut self.enabled {
            if enabled.entry.name == entry.name {
                enabled.provider = provider.clone();
            }
        }
        self
    }

    /// The provider for an infrastructure API group and kind.
    pub fn get(&self, api_group: &str, kind: &str) -> Option<Enabled> {
        self.enabled
            .iter()
            .find(|e| e.entry.handles(api_group, kind))
            .cloned()
    }

    /// The same providers, each wrapped by `wrap` (e.g. to measure their calls).
    pub fn wrapped(
        &self,
        wrap: impl Fn(&'static Entry, Arc<dyn Provider>) -> Arc<dyn Provider>,
    ) -> Self {
        Self {
            enabled: self
                .enabled
                .iter()
                .map(|e| Enabled {
                    entry: e.entry,
                    provider: wrap(e.entry, e.provider.clone()),
                })
                .collect(),
        }
    }

    /// The catalog entries of the enabled providers.
    pub fn entries(&self) -> impl Iterator<Item = &'static Entry> + '_ {
        self.enabled.iter().map(|e| e.entry)
    }

    /// The infrastructure kinds of every enabled provider.
    pub fn resources(&self) -> Vec<ApiResource> {
        self.entries().map(|e| (e.infrastructure)()).collect()
    }

    /// Names of the enabled providers.
    pub fn names(&self) -> Vec<&'static str> {
        self.entries().map(|e| e.name).collect()
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
