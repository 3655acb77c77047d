//! The workload cluster's `default/kubernetes` endpoints kept on the load balancer
//! (`spec.workloadEndpoints`): Pods reach their API servers through the Service
//! `default/kubernetes`, whose endpoints the API servers write with their `--advertise-address`
//! unless they run with `--endpoint-reconciler-type=none`; then capi-lb writes them, with the load
//! balancer's current addresses and port, wherever the load balancer moves.
//!
//! Nothing here runs inside a reconcile. A reconcile tells [`Workloads`] what a LoadBalancer's
//! workload cluster should see ([`Workloads::want`], or [`Workloads::forget`]) and reads its last
//! [`Finding`]; the task ([`Workloads::run`]) looks at each workload cluster when its wanted
//! endpoints change and every [`PERIOD`] (a few reads: the slices, the Endpoints), writes only
//! what differs (server-side apply), looks again [`VERIFY`] after a write to see whether the API
//! servers wrote theirs back (see [`plan::decide`]), and asks for a reconcile of the LoadBalancer
//! when its finding changes, so the `WorkloadEndpoints` condition (and its Event) follows.
//!
//! A hostname among the load balancer's addresses is resolved here too, never in a reconcile
//! ([`hostnames`], with [`resolver`]): A and AAAA, again when the answer's TTL runs out (clamped to
//! [`hostnames::TTL_FLOOR`]..=[`hostnames::TTL_CAP`]; such a look asks DNS and goes on to the
//! workload cluster only when the answer changed or its own time came). A lookup that fails keeps
//! the last answer and says so (`WorkloadHostnameUnresolved`); without any answer nothing is
//! written. Resolved addresses pass the address policy like every published address
//! (`AddressRefused`: nothing is written).
//!
//! One client per workload cluster, made from Cluster API's Secret `<clusterName>-kubeconfig`
//! (key `value`, read with the management cluster's client, under `--credentials-secret-label` like any
//! credentials) and kept while the Secret's resourceVersion is the same; it is bounded like the
//! kube-dc provider's remote client (the one door to tenant servers,
//! [`capi_lb_providers::untrusted::kube`]) and dropped with the
//! LoadBalancer's entry.

pub mod hostnames;
pub mod plan;
pub mod resolver;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use capi_lb_api::conditions::Reason;
use capi_lb_api::constants::{FIELD_MANAGER, reason as r};
use capi_lb_api::loadbalancer::LoadBalancerAddress;
use capi_lb_providers::entry::CredentialsPolicy;
use capi_lb_providers::untrusted::Limits;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Endpoints, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use tokio::sync::mpsc;

use hostnames::{Hostnames, Resolved};
use plan::{Change, Decision};

/// How long one look at a workload cluster may take in all (hostnames resolved, a few reads and
/// writes, each request within the client's own limits): a job of the LoadBalancer's namespace on
/// the shared scheduler ([`crate::jobs`]), stopped at this deadline.
pub const DEADLINE: Duration = Duration::from_secs(30);
/// How often a workload cluster's endpoints are looked at while nothing changes.
pub const PERIOD: Duration = Duration::from_secs(60);
/// How soon after a write they are looked at again (the API servers' reconciler runs every 10 s).
pub const VERIFY: Duration = Duration::from_secs(15);
/// How soon a workload cluster that did not answer is tried again.
pub const UNREACHABLE_RETRY: Duration = Duration::from_secs(30);
/// The bounds of a workload cluster's client: it reads a few small objects.
pub const BOUNDS: Limits = capi_lb_providers::untrusted::WORKLOAD;
/// The key of Cluster API's kubeconfig Secret.
pub const KUBECONFIG_KEY: &str = "value";

/// What a reconcile wants a LoadBalancer's workload cluster to see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// The LoadBalancer's namespace (the Secret's too).
    pub namespace: String,
    /// The LoadBalancer's name.
    pub name: String,
    /// The Secret with the workload cluster's kubeconfig (`<clusterName>-kubeconfig`).
    pub secret: String,
    /// The provider that reported the addresses (the address policy may allow it only some).
    pub provider: String,
    /// The load balancer's ready addresses (IPs, and hostnames to resolve).
    pub addresses: Vec<LoadBalancerAddress>,
    /// The port Pods connect to: the load balancer's listening port.
    pub port: u16,
}

/// What the last look at a workload cluster found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// `default/kubernetes`'s endpoints are the load balancer's.
    pub synced: bool,
    /// The condition reason.
    pub reason: Reason,
    /// What was found (stable while nothing changes: no times).
    pub message: String,
}

/// The state kept between looks at one workload cluster.
#[derive(Clone, Default)]
struct State {
    /// The client, and the resourceVersion of the Secret it was made from.
    client: Option<(String, kube::Client)>,
    /// When capi-lb last wrote the endpoints.
    written: Option<Instant>,
    /// Since when the API servers' reconciler is known to write them.
    fighting: Option<Instant>,
    /// Each hostname's last answer.
    names: BTreeMap<String, hostnames::Named>,
    /// What the last full look looked at, and when the next one is due.
    looked: Option<(Looked, Instant)>,
}

/// What a full look depends on: a look that finds the same before its time (one a hostname's TTL
/// asked for) does not go to the workload cluster.
#[derive(Clone, PartialEq, Eq)]
struct Looked {
    wanted: Wanted,
    resolved: Resolved,
}

struct Entry {
    wanted: Wanted,
    due: Instant,
    running: bool,
    finding: Option<Finding>,
    state: State,
}

/// The workload clusters of every LoadBalancer that asks for it.
pub struct Workloads {
    client: kube::Client,
    jobs: Arc<crate::jobs::Jobs>,
    policy: CredentialsPolicy,
    entries: Mutex<HashMap<String, Entry>>,
    changed: mpsc::UnboundedSender<(String, String)>,
    wake: tokio::sync::Notify,
    hostnames: Option<Hostnames>,
}

impl std::fmt::Debug for Workloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workloads").finish_non_exhaustive()
    }
}

impl Workloads {
    /// Reading kubeconfig Secrets with `client` (only those `policy` admits), resolving hostnames
    /// and checking their addresses with `hostnames` (none: a hostname-only load balancer is
    /// reported, not published); the receiver gets `(namespace, name)` of each LoadBalancer whose
    /// finding changed.
    pub fn new(
        client: kube::Client,
        jobs: Arc<crate::jobs::Jobs>,
        policy: CredentialsPolicy,
        hostnames: Option<Hostnames>,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<(String, String)>) {
        let (changed, receiver) = mpsc::unbounded_channel();
        let workloads = Arc::new(Self {
            client,
            jobs,
            policy,
            entries: Mutex::new(HashMap::new()),
            changed,
            wake: tokio::sync::Notify::new(),
            hostnames,
        });
        (workloads, receiver)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keep the workload cluster of the LoadBalancer with UID `uid` as `wanted` says (a change is
    /// looked at now; an unchanged one keeps its schedule).
    pub fn want(&self, uid: &str, wanted: Wanted) {
        let mut entries = self.lock();
        match entries.get_mut(uid) {
            Some(entry) if entry.wanted == wanted => return,
            Some(entry) => {
                entry.wanted = wanted;
                entry.due = Instant::now();
            }
            None => {
                entries.insert(
                    uid.to_string(),
                    Entry {
                        wanted,
                        due: Instant::now(),
                        running: false,
                        finding: None,
                        state: State::default(),
                    },
                );
            }
        }
        drop(entries);
        self.wake.notify_one();
    }

    /// Whether the LoadBalancer with UID `uid` has an entry (it was Ready once since capi-lb
    /// started).
    pub fn wants(&self, uid: &str) -> bool {
        self.lock().contains_key(uid)
    }

    /// Stop looking at the workload cluster of the LoadBalancer with UID `uid`; its client goes.
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// The last finding for the LoadBalancer with UID `uid` (`None` before its first look).
    pub fn finding(&self, uid: &str) -> Option<Finding> {
        self.lock().get(uid).and_then(|e| e.finding.clone())
    }

    /// Look at what is due, until `shutdown`: each look a job of its LoadBalancer's namespace.
    pub async fn run(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            let now = Instant::now();
            let (due, next) = {
                let mut entries = self.lock();
                let mut due = Vec::new();
                let mut next = now + PERIOD;
                for (uid, entry) in entries.iter_mut() {
                    if entry.running {
                        continue;
                    }
                    if entry.due <= now {
                        entry.running = true;
                        due.push((uid.clone(), entry.wanted.clone(), entry.state.clone()));
                    } else {
                        next = next.min(entry.due);
                    }
                }
                (due, next)
            };
            for (uid, wanted, state) in due {
                let (looker, recorder) = (self.clone(), self.clone());
                let looked = wanted.clone();
                let namespace = wanted.namespace.clone();
                self.jobs.spawn(
                    "workload",
                    &namespace,
                    DEADLINE,
                    async move { looker.look(&looked, state).await },
                    move |result| match result {
                        Ok((finding, state, after)) => {
                            recorder.record(&uid, &wanted, finding, Some(state), after);
                        }
                        Err(stopped) => {
                            let finding = problem(
                                r::WORKLOAD_CLUSTER_UNREACHABLE,
                                format!(
                                    "the look at the workload cluster of Secret {}/{} was stopped: {stopped}; its default/kubernetes endpoints stay as they are",
                                    wanted.namespace, wanted.secret
                                ),
                            );
                            recorder.record(&uid, &wanted, Some(finding), None, UNREACHABLE_RETRY);
                        }
                    },
                );
            }
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep_until(next.into()) => {}
                () = self.wake.notified() => {}
            }
        }
    }

    /// Keep what a look found (unless the entry was forgotten; `None`: what it found before),
    /// schedule the next one, and ask for a reconcile when the finding changed.
    fn record(
        &self,
        uid: &str,
        looked: &Wanted,
        finding: Option<Finding>,
        state: Option<State>,
        after: Duration,
    ) {
        let mut entries = self.lock();
        let Some(entry) = entries.get_mut(uid) else {
            return;
        };
        entry.running = false;
        // A look stopped at its deadline keeps what was known before it.
        if let Some(state) = state {
            entry.state = state;
        }
        if entry.wanted != *looked {
            // Changed while it was looked at: look at what is wanted now.
            entry.due = Instant::now();
            drop(entries);
            self.wake.notify_one();
            return;
        }
        entry.due = Instant::now() + after;
        if let Some(finding) = finding
            && entry.finding.as_ref() != Some(&finding)
        {
            entry.finding = Some(finding);
            let _ = self
                .changed
                .send((looked.namespace.clone(), looked.name.clone()));
        }
        // The task sleeps until the next due time it knew of: this one is new.
        drop(entries);
        self.wake.notify_one();
    }

    /// One look at `wanted`'s workload cluster: the finding (`None`: the same as before), the
    /// state to keep and when to look again. Hostnames whose answer expired are looked up first.
    async fn look(&self, wanted: &Wanted, mut state: State) -> (Option<Finding>, State, Duration) {
        let names = hostnames::hostnames(&wanted.addresses);
        if let Some(h) = &self.hostnames {
            hostnames::refresh(&h.resolve, &names, &mut state.names, Instant::now()).await;
        }
        let resolved = hostnames::resolved(&wanted.addresses, &state.names);
        let now = Instant::now();
        let dns = hostnames::next_refresh(&state.names);
        let until_dns =
            |after: Duration| dns.map_or(after, |t| after.min(t.saturating_duration_since(now)));
        let key = Looked {
            wanted: wanted.clone(),
            resolved,
        };
        if let Some((last, next)) = &state.looked
            && *last == key
            && *next > now
        {
            let after = until_dns(next.saturating_duration_since(now));
            return (None, state, after);
        }
        let (finding, after) = self.look_at(wanted, &key.resolved, &mut state).await;
        state.looked = Some((key, now + after));
        (Some(finding), state, until_dns(after))
    }

    /// A full look: the addresses checked, the workload cluster read and written.
    async fn look_at(
        &self,
        wanted: &Wanted,
        resolved: &Resolved,
        state: &mut State,
    ) -> (Finding, Duration) {
        if let Some(h) = &self.hostnames
            && !resolved.answered.is_empty()
        {
            let refused = (h.refuse)(&wanted.namespace, &wanted.provider, &resolved.answered);
            if !refused.is_empty() {
                return (
                    problem(
                        r::ADDRESS_REFUSED,
                        format!(
                            "the load balancer's hostname resolves to addresses the platform's address policy refuses: {} ({}); nothing is written, the workload cluster's default/kubernetes endpoints stay as they are",
                            refused.join(", "),
                            resolved
                                .resolved
                                .iter()
                                .chain(&resolved.failed)
                                .cloned()
                                .collect::<Vec<_>>()
                                .join("; ")
                        ),
                    ),
                    PERIOD,
                );
            }
        }
        let Some(desired) = plan::desired(&resolved.ips, wanted.port) else {
            return (self.nothing_usable(wanted, resolved), PERIOD);
        };
        let client = match self.client_for(wanted, state).await {
            Ok(client) => client,
            Err(message) => {
                state.client = None;
                return (
                    problem(r::WORKLOAD_KUBECONFIG_INVALID, message),
                    UNREACHABLE_RETRY,
                );
            }
        };
        let (finding, after) = match sync(&client, &desired, state).await {
            Ok(found) => found,
            Err(e) => (
                problem(
                    r::WORKLOAD_CLUSTER_UNREACHABLE,
                    format!(
                        "the workload cluster of Secret {}/{} did not answer as it should: {}; its default/kubernetes endpoints stay as they are",
                        wanted.namespace,
                        wanted.secret,
                        capi_lb_providers::untrusted::quote(&e.to_string())
                    ),
                ),
                UNREACHABLE_RETRY,
            ),
        };
        (with_hostnames(finding, resolved, &desired), after)
    }

    /// The finding when no address a Pod can use is left (nothing is written).
    fn nothing_usable(&self, wanted: &Wanted, resolved: &Resolved) -> Finding {
        let names = hostnames::hostnames(&wanted.addresses);
        if self.hostnames.is_none() && !names.is_empty() {
            return problem(
                r::WORKLOAD_ENDPOINTS_PENDING,
                format!(
                    "the load balancer has only a hostname ({}), which this capi-lb does not resolve: nothing is written",
                    names.join(", ")
                ),
            );
        }
        if !resolved.failed.is_empty() {
            return problem(
                r::WORKLOAD_HOSTNAME_UNRESOLVED,
                format!(
                    "{}; nothing is written (default/kubernetes never gets an empty list)",
                    resolved.failed.join("; ")
                ),
            );
        }
        problem(
            r::WORKLOAD_ENDPOINTS_PENDING,
            format!(
                "the load balancer has no address a Pod can use (loopback and link-local addresses are not endpoints): [{}]",
                hostnames::join(&resolved.ips)
            ),
        )
    }

    /// The client of `wanted`'s workload cluster: the one kept while its Secret is unchanged.
    async fn client_for(&self, wanted: &Wanted, state: &mut State) -> Result<kube::Client, String> {
        let at = format!(
            "Secret {}/{} key {KUBECONFIG_KEY}",
            wanted.namespace, wanted.secret
        );
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &wanted.namespace);
        let secret = secrets
            .get_opt(&wanted.secret)
            .await
            .map_err(|e| format!("reading Secret {}/{}: {e}", wanted.namespace, wanted.secret))?
            .ok_or_else(|| {
                format!(
                    "Secret {}/{} with the workload cluster's kubeconfig (written by Cluster API) does not exist",
                    wanted.namespace, wanted.secret
                )
            })?;
        if let Some(message) = self.policy.refuses(&secret) {
            return Err(message);
        }
        let version = secret.resource_version().unwrap_or_default();
        if let Some((kept, client)) = &state.client
            && *kept == version
        {
            return Ok(client.clone());
        }
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get(KUBECONFIG_KEY))
            .map(|b| b.0.clone())
            .ok_or_else(|| format!("{at} does not exist"))?;
        let text = String::from_utf8(bytes).map_err(|_| format!("{at}: not UTF-8 text"))?;
        let client = capi_lb_providers::untrusted::kube::client(&text, &at, BOUNDS).await?;
        state.client = Some((version, client.clone()));
        Ok(client)
    }
}

fn problem(reason: Reason, message: String) -> Finding {
    Finding {
        synced: false,
        reason,
        message,
    }
}

/// `finding` with what the hostnames' lookups say: a failed one turns a synced finding into
/// `WorkloadHostnameUnresolved` (the endpoints hold its last answer); answered ones are named.
fn with_hostnames(finding: Finding, resolved: &Resolved, desired: &plan::Desired) -> Finding {
    if !resolved.failed.is_empty() {
        if finding.synced {
            return problem(
                r::WORKLOAD_HOSTNAME_UNRESOLVED,
                format!(
                    "{}; the workload cluster's default/kubernetes EndpointSlices and Endpoints are {}",
                    resolved.failed.join("; "),
                    plan::describe(desired)
                ),
            );
        }
        return Finding {
            message: format!("{}; also: {}", finding.message, resolved.failed.join("; ")),
            ..finding
        };
    }
    if resolved.resolved.is_empty() {
        return finding;
    }
    Finding {
        message: format!("{} ({})", finding.message, resolved.resolved.join("; ")),
        ..finding
    }
}

/// Read the endpoints, decide, write what differs.
async fn sync(
    client: &kube::Client,
    desired: &plan::Desired,
    state: &mut State,
) -> Result<(Finding, Duration), kube::Error> {
    let slices_api: Api<EndpointSlice> = Api::namespaced(client.clone(), plan::NAMESPACE);
    let endpoints_api: Api<Endpoints> = Api::namespaced(client.clone(), plan::NAMESPACE);
    let selector = format!("{}={}", plan::SERVICE_NAME_LABEL, plan::SERVICE);
    let slices: Vec<EndpointSlice> = slices_api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter(|s| plan::SLICE_NAMES.contains(&s.name_any().as_str()))
        .collect();
    let endpoints = endpoints_api.get_opt(plan::SERVICE).await?;
    let changes = plan::changes(desired, &slices, endpoints.as_ref());
    let foreign = plan::foreign_writer(
        slices
            .iter()
            .map(|s| s.meta())
            .chain(endpoints.as_ref().map(|e| e.meta())),
    );
    let now = Instant::now();
    let decision = plan::decide(
        !changes.is_empty(),
        foreign.as_deref(),
        state.written.map(|t| now - t),
        state.fighting.map(|t| now - t),
    );
    let what = plan::describe(desired);
    match decision {
        Decision::InSync => {
            state.fighting = None;
            Ok((
                Finding {
                    synced: true,
                    reason: r::WORKLOAD_ENDPOINTS_SYNCED,
                    message: format!(
                        "the workload cluster's default/kubernetes EndpointSlices and Endpoints are the load balancer's: {what}"
                    ),
                },
                PERIOD,
            ))
        }
        Decision::Hold => {
            // A new revert (after a retry) starts the wait for the next retry again.
            if state.fighting.is_none_or(|t| now - t >= plan::RETRY) {
                state.fighting = Some(now);
            }
            let servers = api_servers(client).await;
            Ok((
                problem(
                    r::API_SERVER_RECONCILER_ACTIVE,
                    format!(
                        "the workload cluster's API servers write default/kubernetes's endpoints themselves ({} wrote them back over capi-lb's{servers}): run every kube-apiserver with --endpoint-reconciler-type=none; capi-lb writes nothing meanwhile and tries again every {} s",
                        foreign.as_deref().unwrap_or("another writer"),
                        plan::RETRY.as_secs()
                    ),
                ),
                PERIOD,
            ))
        }
        Decision::Write => {
            for change in &changes {
                apply(&slices_api, &endpoints_api, change).await?;
            }
            state.written = Some(now);
            tracing::info!(endpoints = %what, changes = changes.len(), "wrote the workload cluster's default/kubernetes endpoints");
            // The finding is what was written; the next look (soon) checks that it stays.
            let fighting = state.fighting.is_some();
            Ok((
                if fighting {
                    problem(
                        r::API_SERVER_RECONCILER_ACTIVE,
                        format!(
                            "the workload cluster's API servers wrote default/kubernetes's endpoints themselves: run every kube-apiserver with --endpoint-reconciler-type=none; capi-lb wrote them once more to see whether they stay ({what})"
                        ),
                    )
                } else {
                    Finding {
                        synced: true,
                        reason: r::WORKLOAD_ENDPOINTS_SYNCED,
                        message: format!(
                            "the workload cluster's default/kubernetes EndpointSlices and Endpoints are the load balancer's: {what}"
                        ),
                    }
                },
                VERIFY,
            ))
        }
    }
}

/// `; N API servers hold identity Leases in kube-system` (or nothing when they cannot be read).
async fn api_servers(client: &kube::Client) -> String {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let params = ListParams::default().labels("apiserver.kubernetes.io/identity=kube-apiserver");
    match leases.list(&params).await {
        Ok(list) => format!(
            "; {} API server(s) hold identity Leases in kube-system",
            list.items.len()
        ),
        Err(_) => String::new(),
    }
}

async fn apply(
    slices: &Api<EndpointSlice>,
    endpoints: &Api<Endpoints>,
    change: &Change,
) -> Result<(), kube::Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match change {
        Change::ApplySlice(slice) => {
            slices
                .patch(&slice.name_any(), &params, &Patch::Apply(typed(slice)))
                .await?;
        }
        Change::ReplaceSlice(slice) => {
            delete_slice(slices, &slice.name_any()).await?;
            slices
                .patch(&slice.name_any(), &params, &Patch::Apply(typed(slice)))
                .await?;
        }
        Change::DeleteSlice(name) => delete_slice(slices, name).await?,
        Change::ApplyEndpoints(e) => {
            endpoints
                .patch(plan::SERVICE, &params, &Patch::Apply(typed(e)))
                .await?;
        }
    }
    Ok(())
}

async fn delete_slice(slices: &Api<EndpointSlice>, name: &str) -> Result<(), kube::Error> {
    match slices.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// An object with its apiVersion and kind, as server-side apply wants.
fn typed<K>(object: &K) -> serde_json::Value
where
    K: Resource<DynamicType = ()> + serde::Serialize,
{
    let mut value = serde_json::to_value(object).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), K::api_version(&()).into());
        map.insert("kind".into(), K::kind(&()).into());
    }
    value
}
