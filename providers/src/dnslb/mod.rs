//! The DNS provider (`dns`): a load balancer made of DNS records only (Story 3b of the Cluster API
//! load-balancer proposal). For a LoadBalancer whose `infrastructureRef` names a `DNSLoadBalancer`:
//!
//! - its addresses are the records: the addresses of the targets the reconciler asks to serve (the
//!   healthy, active ones), kept in the `DNSLoadBalancer`'s status, which a restarted controller
//!   starts from ([`records`] decides the next set, pure);
//! - the reconciler publishes them under `spec.hostname` at `spec.ttlSeconds` through the
//!   LoadBalancer's own ExternalDNS `DNSEndpoint` (with the name policy and the rule that a name
//!   has one owner, like `spec.dns`), and on `<name>-ext`; the provider writes no DNS itself;
//! - a record counts as in DNS once ExternalDNS observed the `DNSEndpoint` generation that has it
//!   (its `status.observedGeneration`): a member is `Active` from then, and a target taken out
//!   starts draining only once ExternalDNS took the records without it. The reconciler then holds
//!   its deletion hooks for the TTL plus `drainSeconds` ([`Entry::records`]);
//! - the set never goes empty once it had a record (`LastRecordsKept`).
//!
//! Nothing exists outside the cluster, so deletion has nothing to do: the `DNSEndpoint` goes with
//! the LoadBalancer's publication.

pub mod reason;
pub mod records;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use capi_lb_api::DNSLoadBalancer;
use capi_lb_api::constants::INFRASTRUCTURE_GROUP;
use capi_lb_api::dnslb::{DNSLoadBalancerStatus, DNSRecord};
use capi_lb_api::externaldns::DNSEndpoint;
use capi_lb_api::loadbalancer::LoadBalancerAddress;
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject};
use serde_json::{Map, json};

use crate::entry::{Entry, RecordSet};
use crate::error::{ProviderError, read_infrastructure};
use crate::provider::{
    DeleteOutcome, DeleteRequest, EnsureOutcome, EnsureRequest, MembersOutcome, MembersRequest,
    Progress, Provider,
};

/// The DNS provider's catalog entry.
pub const ENTRY: Entry = Entry {
    name: "dns",
    title: "DNS provider (a name whose records are the targets)",
    shipped: true,
    docs: "docs/providers/dns.md",
    infrastructure: || ApiResource::erase::<DNSLoadBalancer>(&()),
    crd: <DNSLoadBalancer as kube::CustomResourceExt>::crd,
    build: |dependencies| Arc::new(DnsProvider::new(dependencies.client.clone())),
    // Nothing probes the targets but capi-lb: its target probes decide the records.
    checks_members: false,
    proxies: false,
    owned_kinds: &[],
    calls: &[
        (INFRASTRUCTURE_GROUP, "dnsloadbalancers", &["get", "patch"]),
        (INFRASTRUCTURE_GROUP, "dnsloadbalancers/status", &["patch"]),
        // The LoadBalancer's DNSEndpoint, read for what ExternalDNS took.
        ("externaldns.k8s.io", "dnsendpoints", &["get"]),
    ],
    reasons: reason::ALL,
    records: record_set,
};

/// How soon to look again on a problem (the last records kept, a target with a DNS name only):
/// only a change of the targets helps, and that brings the reconcile back at once. Waiting for
/// ExternalDNS needs no polling at all: its status write on the `DNSEndpoint` brings it back.
const POLL: Duration = Duration::from_secs(600);

/// [`Entry::records`]: the name and TTL of a `DNSLoadBalancer`.
fn record_set(infra: &DynamicObject) -> Option<RecordSet> {
    let parsed: DNSLoadBalancer = read_infrastructure(infra).ok()?;
    let seconds = |s: i64| Duration::from_secs(u64::try_from(s).unwrap_or(0));
    let ttl = seconds(parsed.spec.ttl_seconds);
    let published = status_of(infra)
        .and_then(|s| s.published_ttl_seconds)
        .map(seconds)
        .unwrap_or_default();
    Some(RecordSet {
        hostname: parsed.spec.hostname,
        ttl,
        cached_for: ttl.max(published),
    })
}

/// The DNS provider.
#[derive(Clone)]
pub struct DnsProvider {
    client: kube::Client,
}

impl std::fmt::Debug for DnsProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DnsProvider").finish_non_exhaustive()
    }
}

/// What ExternalDNS last took for the name: the addresses and the TTL of its records.
struct Taken {
    addresses: BTreeSet<String>,
    ttl: Option<i64>,
}

impl DnsProvider {
    /// A provider that reads the LoadBalancers' `DNSEndpoint`s through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    /// What ExternalDNS took for `hostname` of the `DNSEndpoint` `namespace/name`: its records
    /// when it observed their generation, else what `status` recorded it took before.
    async fn taken(
        &self,
        namespace: &str,
        name: &str,
        hostname: &str,
        status: &DNSLoadBalancerStatus,
    ) -> Result<Taken, ProviderError> {
        let before = Taken {
            addresses: status.published_addresses.iter().cloned().collect(),
            ttl: status.published_ttl_seconds,
        };
        let api: Api<DNSEndpoint> = Api::namespaced(self.client.clone(), namespace);
        let endpoint = match api.get_opt(name).await {
            Ok(found) => found,
            // ExternalDNS's CRD is not installed: the LoadBalancer's DNSPublished says so.
            Err(kube::Error::Api(e)) if e.code == 404 => None,
            Err(e) => {
                return Err(ProviderError::transient(format!(
                    "reading DNSEndpoint {namespace}/{name}: {e}"
                )));
            }
        };
        let Some(endpoint) = endpoint else {
            return Ok(before);
        };
        let generation = endpoint.metadata.generation;
        let observed = endpoint.status.as_ref().and_then(|s| s.observed_generation);
        if generation.is_none() || observed < generation {
            return Ok(before);
        }
        let mut out = Taken {
            addresses: BTreeSet::new(),
            ttl: before.ttl,
        };
        for record in endpoint.spec.endpoints.iter().filter(|e| {
            e.dns_name
                .trim_end_matches('.')
                .eq_ignore_ascii_case(hostname)
                && matches!(e.record_type.as_str(), "A" | "AAAA")
        }) {
            out.addresses.extend(record.targets.iter().cloned());
            out.ttl = record.record_ttl.or(out.ttl);
        }
        Ok(out)
    }
}

/// The `DNSLoadBalancer` of a request, with its status (which the schema check leaves out).
fn read(infra: &DynamicObject) -> Result<DNSLoadBalancer, ProviderError> {
    let mut parsed: DNSLoadBalancer = read_infrastructure(infra)?;
    parsed.status = status_of(infra);
    Ok(parsed)
}

/// The status of a `DNSLoadBalancer`, as capi-lb wrote it (`None`: none, or unreadable).
fn status_of(infra: &DynamicObject) -> Option<DNSLoadBalancerStatus> {
    infra
        .data
        .get("status")
        .and_then(|s| serde_json::from_value(s.clone()).ok())
}

/// The records as the load balancer's addresses.
fn addresses(records: &[DNSRecord]) -> Vec<LoadBalancerAddress> {
    records
        .iter()
        .map(|r| LoadBalancerAddress::ip(r.address.clone()))
        .collect()
}

#[async_trait]
impl Provider for DnsProvider {
    async fn ensure(&self, request: EnsureRequest<'_>) -> Result<EnsureOutcome, ProviderError> {
        let infra = read(request.infra)?;
        let status = infra.status.unwrap_or_default();
        let unsupported = if request.source_ranges.is_empty() {
            Vec::new()
        } else {
            vec![
                "spec.sourceRanges: a DNS name cannot restrict who connects to the addresses it resolves to".to_string(),
            ]
        };
        Ok(EnsureOutcome {
            notice: None,
            progress: Progress::Done,
            addresses: addresses(&status.records),
            serving: false,
            created: false,
            changes: Vec::new(),
            status: Map::new(),
            unsupported,
            // The records are the LoadBalancer's DNSEndpoint, which capi-lb watches; the zone
            // itself is ExternalDNS's to keep.
            watched: true,
        })
    }

    async fn converge_members(
        &self,
        request: MembersRequest<'_>,
    ) -> Result<MembersOutcome, ProviderError> {
        let infra = read(request.infra)?;
        let status = infra.status.unwrap_or_default();
        let identity = request.identity;
        let taken = self
            .taken(
                &identity.namespace,
                &identity.name,
                &infra.spec.hostname,
                &status,
            )
            .await?;
        let decision = records::decide(
            &status.records,
            &status.draining,
            request.members,
            &taken.addresses,
        );
        let mut changes = Vec::new();
        let describe = |records: &[DNSRecord]| {
            records
                .iter()
                .map(|r| format!("{} ({})", r.address, r.target))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if decision.records != status.records {
            changes.push(format!(
                "records of {} are now [{}]",
                infra.spec.hostname,
                describe(&decision.records)
            ));
        }
        let published = decision.published(&taken.addresses);
        let waiting = if !decision.kept_last.is_empty() {
            Some(format!(
                "every target would leave the records of {}: {} kept, so that the name resolves to something; they leave once another target serves",
                infra.spec.hostname,
                decision.kept_last.join(", ")
            ))
        } else if !published {
            Some(format!(
                "ExternalDNS has not taken the records of {} yet",
                infra.spec.hostname
            ))
        } else {
            None
        };
        let progress = if !decision.kept_last.is_empty() {
            Progress::pending_because(
                reason::LAST_RECORDS_KEPT,
                waiting.clone().unwrap_or_default(),
                POLL,
            )
        } else if !decision.not_ip.is_empty() {
            Progress::pending_because(
                reason::TARGET_ADDRESS_NOT_IP,
                format!(
                    "{} of {} only have a DNS name as their address; a record of a name is an IP address: give the targets an IP address of a type spec.targetAddressTypes selects",
                    decision.not_ip.join(", "),
                    infra.spec.hostname
                ),
                POLL,
            )
        } else {
            Progress::Done
        };
        let status = DNSLoadBalancerStatus {
            ready: published && !decision.records.is_empty(),
            record_count: i32::try_from(decision.records.len()).unwrap_or(i32::MAX),
            records: decision.records.clone(),
            draining: decision.draining.clone(),
            published_addresses: taken.addresses.iter().cloned().collect(),
            published_ttl_seconds: taken.ttl,
            waiting_for: waiting,
        };
        let status = match serde_json::to_value(status) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => Map::new(),
        };
        // Fields the status had and the new one leaves out are cleared.
        let mut status = status;
        for key in ["publishedTtlSeconds", "waitingFor"] {
            status.entry(key).or_insert(json!(null));
        }
        Ok(MembersOutcome {
            progress,
            members: decision.members,
            changes,
            status,
            addresses: Some(addresses(&decision.records)),
        })
    }

    async fn delete(&self, _request: DeleteRequest<'_>) -> Result<DeleteOutcome, ProviderError> {
        // Nothing outside the cluster: the DNSEndpoint is withdrawn with the LoadBalancer's
        // publication (and is owned by the LoadBalancer).
        Ok(DeleteOutcome {
            progress: Progress::Done,
            changes: Vec::new(),
        })
    }
}
