//! The provider registry: maps an `infrastructureRef` (API group and kind) to the enabled provider
//! that handles it. Built once at start-up from the catalog entries of the enabled providers; the
//! entry says the provider's name and kind, so a provider does not repeat them. Every call to a
//! provider goes through [`Enabled`], which gives it a deadline and, while it waits, gives back
//! the caller's work slot ([`Waiting`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use kube::core::ApiResource;

use crate::entry::Entry;
use crate::error::ProviderError;
use crate::provider::{
    DeleteOutcome, DeleteRequest, EnsureOutcome, EnsureRequest, MembersOutcome, MembersRequest,
    Provider,
};

/// How long a provider call may take by default before it is abandoned as
/// [`ProviderError::TimedOut`] (`capi-lb run --provider-timeout-seconds`). A provider's own
/// requests have shorter deadlines (Octavia: 5 s to connect, 15 s a request; a remote kube-dc
/// cluster: 5 s to connect, 10 s a request); this one bounds a call of several of them.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(30);

/// What a caller holds while it works and gives back while a provider call waits on a cloud or a
/// remote cluster: the controller's work slot. So a cloud that answers only at the deadline holds
/// no slot while it is waited for, and reconciles of other tenants run meanwhile.
pub trait Waiting: Send + Sync {
    /// A provider call starts waiting: give the slot back.
    fn release(&self);
    /// The call has ended: resolves when the caller holds a slot again.
    fn reacquire(&self) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>>;
}

tokio::task_local! {
    /// The [`Waiting`] of the reconcile that runs in this task, if it set one
    /// (`WAITING.scope(slot, reconcile)`). Provider calls made without one keep what they hold.
    pub static WAITING: Arc<dyn Waiting>;
}

/// An enabled provider: its catalog entry and the provider built from it. Its calls have a
/// deadline.
#[derive(Clone)]
pub struct Enabled {
    /// What the catalog says of it.
    pub entry: &'static Entry,
    /// The provider.
    pub provider: Arc<dyn Provider>,
    /// How long a call may take.
    pub deadline: Duration,
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

impl Enabled {
    /// [`Provider::ensure`], within the deadline.
    pub async fn ensure(&self, request: EnsureRequest<'_>) -> Result<EnsureOutcome, ProviderError> {
        self.within(self.provider.ensure(request)).await
    }

    /// [`Provider::converge_members`], within the deadline.
    pub async fn converge_members(
        &self,
        request: MembersRequest<'_>,
    ) -> Result<MembersOutcome, ProviderError> {
        self.within(self.provider.converge_members(request)).await
    }

    /// [`Provider::delete`], within the deadline.
    pub async fn delete(&self, request: DeleteRequest<'_>) -> Result<DeleteOutcome, ProviderError> {
        self.within(self.provider.delete(request)).await
    }

    /// `call`, abandoned (dropped, so whatever it waits on is cancelled) after the deadline; the
    /// caller's [`WAITING`] slot is given back while it runs.
    async fn within<T>(
        &self,
        call: impl Future<Output = Result<T, ProviderError>>,
    ) -> Result<T, ProviderError> {
        let waiting = WAITING.try_with(Arc::clone).ok();
        if let Some(waiting) = &waiting {
            waiting.release();
        }
        let result = match tokio::time::timeout(self.deadline, call).await {
            Ok(result) => result,
            Err(_) => Err(ProviderError::TimedOut {
                message: format!("no answer within {} s", self.deadline.as_secs()),
            }),
        };
        if let Some(waiting) = &waiting {
            waiting.reacquire().await;
        }
        result
    }
}

/// The enabled providers.
#[derive(Clone)]
pub struct ProviderRegistry {
    enabled: Vec<Enabled>,
    /// The deadline of every call.
    deadline: Duration,
}

impl Default for ProviderRegistry {
    fn default() -> Self {
        Self {
            enabled: Vec::new(),
            deadline: DEFAULT_DEADLINE,
        }
    }
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
        self.enabled.push(Enabled {
            entry,
            provider,
            deadline: self.deadline,
        });
        self
    }

    /// Give every call of every provider, enabled now or later, `deadline`.
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        for enabled in &mut self.enabled {
            enabled.deadline = deadline;
        }
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
                    provider: wrap(e.entry, e.provider.clone()),
                    ..e.clone()
                })
                .collect(),
            deadline: self.deadline,
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
