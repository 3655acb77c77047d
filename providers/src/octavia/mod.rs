//! The OpenStack Octavia provider: load balancers in Octavia (LBaaS v2), reached through Keystone
//! with credentials from a `clouds.yaml` in a Secret next to the `OctaviaLoadBalancer`.
//!
//! For a LoadBalancer whose `infrastructureRef` names an `OctaviaLoadBalancer`:
//! - one Octavia load balancer `capi-lb-<namespace>-<name>`, created in one call together with one
//!   listener, pool and health monitor per LoadBalancer port (`<lb>-<protocol>-<port>`) and the
//!   members to serve at that time (one Octavia operation to Ready, not a create and then a member
//!   update); ports added later get their listener, ports removed lose theirs;
//! - members from the LoadBalancer's targets, written per pool with Octavia's batch member update;
//!   a draining member gets weight 0 (existing connections continue, no new ones) until the
//!   reconciler leaves it out after the drain time;
//! - every object carries capi-lb's ownership tags (LoadBalancer namespace, name and UID, and the
//!   OctaviaLoadBalancer's UID). A restarted controller with a lost status finds its load balancer by
//!   these tags and adopts it; a load balancer without them (same name or not) is never touched.
//!
//! Nothing blocks: Octavia serialises writes on a load balancer (PENDING_* objects are immutable and
//! refuse writes with 409), so each call does at most one write and answers `Pending` to be asked
//! again. How soon is the re-look schedule of `relook`: [`FIRST_LOOK`] after a write, then as long
//! again as the wait so far, at most [`MAX_LOOK`] (0.25, 0.5, 1, 2, 4 s, then every 4 s), so an
//! operation Octavia finishes in under a second is seen at once and a one-minute amphora boot costs
//! 19 looks. A steady-state reconcile costs one Octavia request (the status tree), shared by `ensure`
//! and `converge_members`; the schedule only decides how often a busy load balancer is looked at.
//!
//! The files, lowest first (each uses only those above it; this one holds the [`OctaviaProvider`]
//! and its `Provider` impl, which delegates to the others):
//! - `reason`: the condition reasons; `stop`: [`Stop`];
//! - `relook`: how soon to look again while Octavia is busy ([`relook()`], and the per-load-balancer
//!   record of the wait it is measured from);
//! - `credentials`: where they are, the cloud's configuration from the Secret, the CA bundle;
//! - `http`: the bounded HTTP client (deadlines, answer size); `keystone`: the token request, the
//!   catalog and version documents;
//! - `api`: Keystone sessions and the metered request path;
//! - `documents`: what Octavia and Neutron answer; `naming`: names, tags and ownership;
//! - `settings`: what the spec asks for; `call`: one call in progress, and how soon it looks again;
//! - `tree`: the status tree of a load balancer, cached for the rest of a reconcile;
//! - `children` (listeners, pools, health monitors), `members` (member convergence) and
//!   `floating_ip` (Neutron);
//! - `loadbalancer` (the load balancer itself, and `ensure`), then `delete`.

pub mod api;
mod call;
mod children;
mod credentials;
mod delete;
mod documents;
mod floating_ip;
mod http;
pub mod keystone;
mod lenient;
mod loadbalancer;
mod members;
mod naming;
pub mod reason;
mod relook;
mod settings;
mod stop;
mod tree;
pub mod versions;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use capi_lb_api::OctaviaLoadBalancer;
use capi_lb_api::constants::INFRASTRUCTURE_GROUP;
use kube::ResourceExt;
use kube::core::ApiResource;
use serde_json::{Map, json};

use crate::clock::SharedClock;
use crate::entry::Entry;
use crate::error::{INVALID_CONFIGURATION, ProviderError};
use crate::observe::ApiObserver;
use crate::provider::{
    DeleteOutcome, DeleteRequest, EnsureOutcome, EnsureRequest, MembersOutcome, MembersRequest,
    Provider,
};
use api::{Session, Sessions};
use call::Call;
pub use documents::{PoolMember, Tree};
pub use members::plan;
pub use naming::lb_name;
use naming::uid_tag;
use relook::Waits;
pub use relook::{FIRST_LOOK, MAX_LOOK, relook};
use settings::Infra;
pub use stop::Stop;
use stop::done_or_wait;

/// The Octavia provider's catalog entry.
pub const ENTRY: Entry = Entry {
    name: "octavia",
    title: "Octavia provider",
    shipped: true,
    docs: "docs/providers/octavia.md",
    infrastructure: || ApiResource::erase::<OctaviaLoadBalancer>(&()),
    crd: <OctaviaLoadBalancer as kube::CustomResourceExt>::crd,
    build: |dependencies| {
        let provider =
            OctaviaProvider::new(dependencies.client.clone(), dependencies.clock.clone())
                .with_credentials(dependencies.credentials.clone());
        Arc::new(match &dependencies.observer {
            Some(observer) => provider.with_observer(observer.clone()),
            None => provider,
        })
    },
    checks_members: true,
    proxies: true,
    owned_kinds: &[],
    calls: &[
        (
            INFRASTRUCTURE_GROUP,
            "octavialoadbalancers",
            &["get", "patch"],
        ),
        (
            INFRASTRUCTURE_GROUP,
            "octavialoadbalancers/status",
            &["patch"],
        ),
        // The clouds.yaml, from the OctaviaLoadBalancer's own namespace only.
        ("", "secrets", &["get"]),
    ],
    reasons: reason::ALL,
    records: crate::entry::no_records,
};

/// The most entries each of the provider's caches keeps (status trees, pool members, floating-IP
/// checks, verified IDs; locks nobody holds): their keys are the UIDs and Octavia IDs of the
/// LoadBalancers tenants create, so how many there are is the tenants' to choose. Past it the
/// least recently stored entry goes, and is read from Octavia again when next needed.
pub const MAX_CACHED: usize = 4096;

/// How long an ownership check of an Octavia load balancer is trusted.
const VERIFIED_FOR: Duration = Duration::from_secs(3600);

/// The Octavia provider.
pub struct OctaviaProvider {
    client: kube::Client,
    clock: SharedClock,
    observer: Option<Arc<dyn ApiObserver>>,
    sessions: Sessions,
    /// Serialises the provider's calls per LoadBalancer: Octavia accepts one write at a time.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The last status tree per Octavia load balancer, with when it was read.
    trees: Mutex<HashMap<String, (Instant, Tree)>>,
    /// Members per pool as last written or read, with when.
    members: Mutex<HashMap<String, (Instant, Vec<PoolMember>)>>,
    /// When the floating IP of a load balancer was last checked against Neutron.
    fip_checked: Mutex<HashMap<String, Instant>>,
    /// Load balancers whose ownership tags this process has seen, by owner (the LoadBalancer's
    /// and the infrastructure object's UIDs, as [`relook::key`] writes them) and Octavia ID: an ID
    /// verified for one LoadBalancer is not trusted when another's status names it. With when.
    verified: Mutex<HashMap<(String, String), Instant>>,
    /// When each LoadBalancer's current wait on Octavia began (the re-look schedule's measure).
    waits: Waits,
}

impl std::fmt::Debug for OctaviaProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OctaviaProvider").finish_non_exhaustive()
    }
}

impl OctaviaProvider {
    /// A provider reading credentials through `client`.
    pub fn new(client: kube::Client, clock: SharedClock) -> Self {
        Self {
            client,
            clock,
            observer: None,
            sessions: Sessions::default(),
            locks: Mutex::new(HashMap::new()),
            trees: Mutex::new(HashMap::new()),
            members: Mutex::new(HashMap::new()),
            fip_checked: Mutex::new(HashMap::new()),
            verified: Mutex::new(HashMap::new()),
            waits: Waits::default(),
        }
    }

    /// Read only the credentials Secrets `policy` admits.
    pub fn with_credentials(mut self, policy: crate::entry::CredentialsPolicy) -> Self {
        self.sessions.policy = policy;
        self
    }

    /// Report every OpenStack request to `observer` (metrics, benchmarks).
    pub fn with_observer(mut self, observer: Arc<dyn ApiObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    fn observer(&self) -> Option<&dyn ApiObserver> {
        self.observer.as_deref()
    }

    async fn lock(&self, key: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = match self.locks.lock() {
            Ok(mut locks) => {
                if locks.len() >= MAX_CACHED && !locks.contains_key(key) {
                    // Only the map holds a lock nobody holds or waits for: it can go.
                    locks.retain(|_, lock| Arc::strong_count(lock) > 1);
                }
                locks.entry(key.to_string()).or_default().clone()
            }
            Err(_) => Arc::new(tokio::sync::Mutex::new(())),
        };
        lock.lock_owned().await
    }

    async fn session(&self, infra: &Infra) -> Result<Arc<Session>, Stop> {
        self.sessions
            .get(&self.client, &infra.credentials(), self.observer())
            .await
    }
}

#[async_trait]
impl Provider for OctaviaProvider {
    async fn ensure(&self, request: EnsureRequest<'_>) -> Result<EnsureOutcome, ProviderError> {
        let mut infra = Infra::read(request.infra, request.identity)?;
        let unsupported =
            infra.restrict_sources(&request.infra.name_any(), request.source_ranges)?;
        if request.listeners.is_empty() {
            return Err(ProviderError::permanent(
                INVALID_CONFIGURATION,
                "the LoadBalancer has no ports: Octavia needs at least one listener",
            ));
        }
        let _guard = self.lock(&request.identity.uid).await;
        let mut call = Call::new(infra, request.identity, self.clock.now(), &self.waits);
        let result = self
            .ensure_inner(&mut call, request.listeners, request.members)
            .await;
        let progress = done_or_wait(result, || call.relook())?;
        // A problem someone has to act on (credentials, quota, a floating IP in the way) is
        // reported as one, never hidden behind a load balancer that may still be serving.
        let problem =
            matches!(&progress, crate::Progress::Pending { reason: Some(r), .. } if r.is_problem());
        if problem {
            call.status.ready = false;
        }

        Ok(EnsureOutcome {
            notice: None,
            serving: !progress.is_done() && !problem && call.status.ready,
            progress,
            addresses: call.addresses(),
            created: call.created,
            changes: call.changes.clone(),
            status: call.status_map(),
            unsupported,
            watched: false,
        })
    }

    async fn converge_members(
        &self,
        request: MembersRequest<'_>,
    ) -> Result<MembersOutcome, ProviderError> {
        let infra = Infra::read(request.infra, request.identity)?;
        let _guard = self.lock(&request.identity.uid).await;
        let mut call = Call::new(infra, request.identity, self.clock.now(), &self.waits);
        let mut members = Vec::new();
        let result = self
            .converge_members_inner(&mut call, request.listeners, request.members, &mut members)
            .await;
        let progress = done_or_wait(result, || call.relook())?;
        let mut status = Map::new();
        status.insert("memberCount".into(), json!(call.status.member_count));
        if call.status.pending_since != call.infra.status.pending_since {
            status.insert(
                "pendingSince".into(),
                json!(call.status.pending_since.clone()),
            );
        }
        Ok(MembersOutcome {
            progress,
            members,
            changes: call.changes,
            status,
            addresses: None,
        })
    }

    async fn delete(&self, request: DeleteRequest<'_>) -> Result<DeleteOutcome, ProviderError> {
        let Some(infra) = request.infra else {
            return Err(ProviderError::permanent(
                reason::CREDENTIALS_UNAVAILABLE.name,
                format!(
                    "the OctaviaLoadBalancer of LoadBalancer {} is gone, so its credentials are unknown and the Octavia load balancer (tag {}) cannot be deleted. Recreate the OctaviaLoadBalancer to let capi-lb clean up, or delete the load balancer in Octavia and remove the finalizer by hand",
                    request.identity.display(),
                    uid_tag(request.identity)
                ),
            ));
        };
        let infra = Infra::read(infra, request.identity)?;
        let _guard = self.lock(&request.identity.uid).await;
        let now = self.clock.now();
        let mut changes = Vec::new();
        let result = match self.session(&infra).await {
            Ok(session) => {
                self.delete_inner(&session, request.identity, &infra, now, &mut changes)
                    .await
            }
            Err(stop) => Err(stop),
        };
        let wait = relook::key(&request.identity.uid, infra.uid.as_deref());
        let progress = done_or_wait(result, || self.waits.waiting(&wait, now, None))?;
        if progress.is_done() {
            // Nothing of this LoadBalancer is left in the cloud: forget what was cached for it.
            self.forget_cached(&request.identity.uid, &infra);
        }
        Ok(DeleteOutcome { progress, changes })
    }
}
