//! The in-memory provider. Its "cloud" is an [`InMemoryCloud`] held in process memory: load
//! balancers with ownership tags, addresses allocated from the `InMemoryLoadBalancer`'s pools, listeners
//! and members with states. It behaves like a real provider where it matters for the controller:
//! provisioning, member addition and deletion take `provisioningDelaySeconds` (answered as
//! [`Progress::Pending`], never by blocking), resources are found again by their ownership tags after a
//! controller restart, a load balancer tagged for another owner is never adopted, and failures can be
//! injected per operation. The cloud is cheap to clone and shared, so a test can restart the
//! controller and keep the cloud; [`InMemoryCloud::load`] and [`InMemoryCloud::save`] keep it in a
//! file, so that it outlives the process too (`capi-lb run --inmemory-state`, for demos and the
//! warm-restart benchmark).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use capi_lb_api::InMemoryLoadBalancer;
use capi_lb_api::constants::INFRASTRUCTURE_GROUP;
use capi_lb_api::inmemory::{
    FailureType, InMemoryLoadBalancerSpec, InjectedFailure, ProviderOperation,
};
use capi_lb_api::loadbalancer::{AddressType, LoadBalancerAddress};
use ipnet::IpNet;
use jiff::Timestamp;
use kube::core::{ApiResource, DynamicObject};
use serde_json::{Map, Value, json};

use crate::clock::{after, until};
use crate::entry::Entry;

mod cloud;
use crate::error::{INVALID_CONFIGURATION, ProviderError, read_infrastructure};
use crate::provider::{
    DeleteOutcome, DeleteRequest, EnsureOutcome, EnsureRequest, MemberIntent, MemberState,
    MemberStatus, MembersOutcome, MembersRequest, Progress, Provider,
};
use cloud::CloudState;
pub use cloud::{CloudLoadBalancer, CloudMember, InMemoryCloud};

/// The in-memory provider's catalog entry. It builds the provider over a new cloud; a simulation
/// or `capi-lb run --inmemory-state` puts one over a cloud that outlives it instead
/// (`ProviderRegistry::replace` with [`InMemoryProvider::new`]).
pub const ENTRY: Entry = Entry {
    name: "inmemory",
    title: "in-memory provider",
    shipped: false,
    docs: "docs/providers/inmemory.md",
    infrastructure: || ApiResource::erase::<InMemoryLoadBalancer>(&()),
    crd: <InMemoryLoadBalancer as kube::CustomResourceExt>::crd,
    build: |dependencies| {
        Arc::new(InMemoryProvider::new(InMemoryCloud::new(
            dependencies.clock.clone(),
        )))
    },
    checks_members: false,
    proxies: false,
    owned_kinds: &[],
    calls: &[
        (
            INFRASTRUCTURE_GROUP,
            "inmemoryloadbalancers",
            &["get", "patch"],
        ),
        (
            INFRASTRUCTURE_GROUP,
            "inmemoryloadbalancers/status",
            &["patch"],
        ),
    ],
    reasons: &[],
    records: crate::entry::no_records,
};

/// Reason of an injected permanent failure.
pub const INJECTED_FAILURE: &str = "InjectedFailure";
/// Reason when an address pool has no free address.
pub const POOL_EXHAUSTED: &str = "AddressPoolExhausted";

/// The in-memory provider.
#[derive(Clone, Debug)]
pub struct InMemoryProvider {
    cloud: InMemoryCloud,
}

impl InMemoryProvider {
    /// A provider backed by `cloud`.
    pub fn new(cloud: InMemoryCloud) -> Self {
        Self { cloud }
    }

    /// The cloud behind this provider.
    pub fn cloud(&self) -> &InMemoryCloud {
        &self.cloud
    }

    /// Start a call that needs the infrastructure spec: read it, count the call, and return the
    /// injected failure configured for `op` if one is due.
    fn begin(
        &self,
        infra: &DynamicObject,
        op: ProviderOperation,
    ) -> Result<
        (
            InMemoryLoadBalancerSpec,
            Timestamp,
            MutexGuard<'_, CloudState>,
        ),
        ProviderError,
    > {
        let spec = parse_spec(infra)?;
        let now = self.cloud.clock.now();
        let mut state = self.cloud.lock();
        state.calls += 1;
        self.injected_failure(&mut state, &infra_uid(infra), op, &spec.failures)?;
        Ok((spec, now, state))
    }

    /// Return the first injected failure configured for `op` that is still due.
    fn injected_failure(
        &self,
        state: &mut CloudState,
        infra_uid: &str,
        op: ProviderOperation,
        failures: &[InjectedFailure],
    ) -> Result<(), ProviderError> {
        for (index, failure) in failures.iter().enumerate() {
            if failure.operation != op {
                continue;
            }
            let message = failure
                .message
                .clone()
                .unwrap_or_else(|| format!("injected {:?} failure of {op:?}", failure.type_));
            match failure.type_ {
                FailureType::Permanent => {
                    return Err(ProviderError::permanent(INJECTED_FAILURE, message));
                }
                FailureType::Transient => {
                    let returned = state
                        .failures_returned
                        .entry((infra_uid.to_string(), index))
                        .or_insert(0);
                    if *returned < failure.times {
                        *returned += 1;
                        return Err(ProviderError::transient(message));
                    }
                }
            }
        }
        Ok(())
    }
}

fn parse_spec(infra: &DynamicObject) -> Result<InMemoryLoadBalancerSpec, ProviderError> {
    read_infrastructure::<InMemoryLoadBalancer>(infra).map(|o| o.spec)
}

fn infra_uid(infra: &DynamicObject) -> String {
    infra.metadata.uid.clone().unwrap_or_default()
}

fn delay_of(spec: &InMemoryLoadBalancerSpec) -> Duration {
    Duration::from_secs(u64::from(spec.provisioning_delay_seconds))
}

/// Addresses in use by every load balancer except `except`.
fn used_addresses(state: &CloudState, except: Option<&str>) -> BTreeSet<IpAddr> {
    state
        .load_balancers
        .values()
        .filter(|lb| Some(lb.id.as_str()) != except)
        .flat_map(|lb| lb.addresses.iter())
        .filter(|a| a.type_ == AddressType::Ip)
        .filter_map(|a| a.address.parse().ok())
        .collect()
}

/// The addresses a load balancer should have under `spec`: one per pool (keeping a current address
/// that is still inside its pool), then the hostname.
fn plan_addresses(
    spec: &InMemoryLoadBalancerSpec,
    current: &[LoadBalancerAddress],
    used: &BTreeSet<IpAddr>,
) -> Result<Vec<LoadBalancerAddress>, ProviderError> {
    let mut out = Vec::new();
    for pool in &spec.address_pools {
        let net: IpNet = pool.parse().map_err(|e| {
            ProviderError::permanent(INVALID_CONFIGURATION, format!("address pool {pool}: {e}"))
        })?;
        let kept = current
            .iter()
            .filter(|a| a.type_ == AddressType::Ip)
            .filter_map(|a| a.address.parse::<IpAddr>().ok())
            .find(|ip| net.contains(ip));
        let ip = match kept {
            Some(ip) => ip,
            // The network address is never a host (for IPv6 it is the subnet-router anycast),
            // except in a pool of one or two addresses (a /32, /31, /128 or /127: RFC 3021,
            // RFC 6164), where every address is one.
            None => net
                .hosts()
                .find(|ip| {
                    (net.max_prefix_len() - net.prefix_len() <= 1 || *ip != net.network())
                        && !used.contains(ip)
                })
                .ok_or_else(|| {
                    ProviderError::permanent(
                        POOL_EXHAUSTED,
                        format!("address pool {pool} has no free address"),
                    )
                })?,
        };
        out.push(LoadBalancerAddress::ip(ip.to_string()));
    }
    if let Some(hostname) = &spec.hostname {
        out.push(LoadBalancerAddress::hostname(hostname.clone()));
    }
    Ok(out)
}

fn describe_addresses(addresses: &[LoadBalancerAddress]) -> String {
    let list: Vec<&str> = addresses.iter().map(|a| a.address.as_str()).collect();
    if list.is_empty() {
        "none".to_string()
    } else {
        list.join(", ")
    }
}

fn members_of(lb: &CloudLoadBalancer) -> Vec<MemberStatus> {
    lb.members
        .iter()
        .map(|(name, m)| MemberStatus {
            name: name.clone(),
            address: m.address.clone(),
            state: m.state,
        })
        .collect()
}

/// Which sources a load balancer accepts, for changes.
fn describe_sources(ranges: &[String]) -> String {
    if ranges.is_empty() {
        "every source".into()
    } else {
        format!("sources {}", ranges.join(", "))
    }
}

/// The infrastructure object's status for this load balancer (or for none).
fn status_of(lb: Option<&CloudLoadBalancer>, now: Timestamp) -> Map<String, Value> {
    let value = match lb {
        Some(lb) => json!({
            "ready": now >= lb.ready_at,
            "loadBalancerId": lb.id,
            "addresses": lb.addresses,
            "ports": lb.listeners.iter().map(|l| l.port).collect::<Vec<_>>(),
            "members": lb.members.iter().map(|(name, m)| json!({
                "name": name, "address": m.address, "state": m.state.as_str(),
            })).collect::<Vec<_>>(),
            "memberCount": lb.members.len(),
        }),
        None => json!({
            "ready": false, "loadBalancerId": null, "addresses": [], "ports": [],
            "members": [], "memberCount": 0,
        }),
    };
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn pending(message: impl Into<String>, retry_after: Duration) -> Progress {
    Progress::pending(message, retry_after)
}

#[async_trait]
impl Provider for InMemoryProvider {
    async fn ensure(&self, request: EnsureRequest<'_>) -> Result<EnsureOutcome, ProviderError> {
        let (spec, now, mut state) = self.begin(request.infra, ProviderOperation::Ensure)?;
        let delay = delay_of(&spec);
        let mut changes = Vec::new();
        let existing = state
            .load_balancers
            .values()
            .find(|lb| request.identity.owns_for(&lb.tags, Some(request.infra)))
            .map(|lb| lb.id.clone());
        let created = existing.is_none();
        let id = match existing {
            Some(id) => {
                let used = used_addresses(&state, Some(&id));
                let Some(lb) = state.load_balancers.get_mut(&id) else {
                    return Err(ProviderError::transient("load balancer vanished"));
                };
                if let Some(since) = lb.deleting_since {
                    let done = after(since, lb.delay);
                    return Ok(EnsureOutcome {
                        notice: None,
                        progress: pending(
                            format!("load balancer {} is still being deleted", lb.id),
                            until(now, done),
                        ),
                        addresses: Vec::new(),
                        serving: false,
                        created: false,
                        changes,
                        status: status_of(None, now),
                        unsupported: Vec::new(),
                        watched: false,
                    });
                }
                let addresses = plan_addresses(&spec, &lb.addresses, &used)?;
                if addresses != lb.addresses {
                    changes.push(format!(
                        "load balancer {} addresses changed from {} to {}",
                        lb.id,
                        describe_addresses(&lb.addresses),
                        describe_addresses(&addresses)
                    ));
                    lb.addresses = addresses;
                }
                if lb.listeners != request.listeners {
                    changes.push(format!(
                        "load balancer {} listeners set to ports {:?}",
                        lb.id,
                        request.listeners.iter().map(|l| l.port).collect::<Vec<_>>()
                    ));
                    lb.listeners = request.listeners.to_vec();
                }
                if lb.source_ranges != request.source_ranges {
                    changes.push(format!(
                        "load balancer {} accepts {}",
                        lb.id,
                        describe_sources(request.source_ranges)
                    ));
                    lb.source_ranges = request.source_ranges.to_vec();
                }
                lb.delay = delay;
                id
            }
            None => {
                let used = used_addresses(&state, None);
                let addresses = plan_addresses(&spec, &[], &used)?;
                state.next_id += 1;
                let id = format!("imlb-{:04}", state.next_id);
                changes.push(format!(
                    "created load balancer {id} for {} with addresses {}",
                    request.identity.display(),
                    describe_addresses(&addresses)
                ));
                state.load_balancers.insert(
                    id.clone(),
                    CloudLoadBalancer {
                        id: id.clone(),
                        tags: request.identity.tags_for(request.infra),
                        addresses,
                        listeners: request.listeners.to_vec(),
                        source_ranges: request.source_ranges.to_vec(),
                        members: BTreeMap::new(),
                        ready_at: after(now, delay),
                        delay,
                        deleting_since: None,
                    },
                );
                id
            }
        };
        let lb = state.load_balancers.get(&id);
        let progress = match lb {
            Some(lb) if now >= lb.ready_at => Progress::Done,
            Some(lb) => pending(
                format!("load balancer {id} is provisioning"),
                until(now, lb.ready_at),
            ),
            None => return Err(ProviderError::transient("load balancer vanished")),
        };
        Ok(EnsureOutcome {
            notice: None,
            progress,
            addresses: lb.map(|lb| lb.addresses.clone()).unwrap_or_default(),
            serving: false,
            created,
            changes,
            status: status_of(lb, now),
            unsupported: Vec::new(),
            // An in-memory cloud is looked at like a real one (it can lose a load balancer too).
            watched: false,
        })
    }

    async fn converge_members(
        &self,
        request: MembersRequest<'_>,
    ) -> Result<MembersOutcome, ProviderError> {
        let (spec, now, mut state) = self.begin(request.infra, ProviderOperation::Members)?;
        let delay = delay_of(&spec);
        let Some(lb) = state
            .load_balancers
            .values_mut()
            .find(|lb| request.identity.owns_for(&lb.tags, Some(request.infra)))
        else {
            return Err(ProviderError::transient(format!(
                "no load balancer for {} yet",
                request.identity.display()
            )));
        };
        let mut changes = Vec::new();
        let desired_names: BTreeSet<&str> =
            request.members.iter().map(|m| m.name.as_str()).collect();
        let removed: Vec<String> = lb
            .members
            .keys()
            .filter(|name| !desired_names.contains(name.as_str()))
            .cloned()
            .collect();
        for name in removed {
            lb.members.remove(&name);
            changes.push(format!("removed member {name} from {}", lb.id));
        }
        let joining_state = if delay.is_zero() {
            MemberState::Active
        } else {
            MemberState::Adding
        };
        for desired in request.members {
            let existing = lb.members.get_mut(&desired.name);
            match (&desired.intent, existing) {
                (MemberIntent::Serve(address), None) => {
                    lb.members.insert(
                        desired.name.clone(),
                        CloudMember {
                            address: address.clone(),
                            state: joining_state,
                            active_at: after(now, delay),
                        },
                    );
                    changes.push(format!(
                        "added member {} ({address}) to {}",
                        desired.name, lb.id
                    ));
                }
                (MemberIntent::Serve(address), Some(member)) => {
                    if &member.address != address {
                        changes.push(format!(
                            "member {} of {} moved from {} to {address}",
                            desired.name, lb.id, member.address
                        ));
                        member.address = address.clone();
                        member.state = joining_state;
                        member.active_at = after(now, delay);
                    } else if member.state == MemberState::Draining {
                        member.state = MemberState::Active;
                        changes.push(format!(
                            "member {} of {} takes new connections again",
                            desired.name, lb.id
                        ));
                    }
                }
                (MemberIntent::Drain, Some(member)) if member.state != MemberState::Draining => {
                    member.state = MemberState::Draining;
                    changes.push(format!("draining member {} of {}", desired.name, lb.id));
                }
                // Keep leaves a member as it is; neither Keep nor Drain creates one.
                (MemberIntent::Drain | MemberIntent::Keep, _) => {}
            }
        }
        let mut next: Option<Duration> = None;
        for (name, member) in lb.members.iter_mut() {
            if member.state == MemberState::Adding {
                if now >= member.active_at {
                    member.state = MemberState::Active;
                    changes.push(format!("member {name} of {} is active", lb.id));
                } else {
                    let wait = until(now, member.active_at);
                    next = Some(next.map_or(wait, |n| n.min(wait)));
                }
            }
        }
        let progress = match next {
            Some(wait) => pending(format!("members of {} are being added", lb.id), wait),
            None => Progress::Done,
        };
        let members = members_of(lb);
        let status = status_of(Some(lb), now);
        Ok(MembersOutcome {
            progress,
            members,
            changes,
            status,
            addresses: None,
        })
    }

    async fn delete(&self, request: DeleteRequest<'_>) -> Result<DeleteOutcome, ProviderError> {
        let now = self.cloud.clock.now();
        let mut state = self.cloud.lock();
        state.calls += 1;
        if let Some(infra) = request.infra {
            // An invalid infrastructure object must not block deletion: only injected failures of a
            // readable spec apply.
            if let Ok(spec) = parse_spec(infra) {
                self.injected_failure(
                    &mut state,
                    &infra_uid(infra),
                    ProviderOperation::Delete,
                    &spec.failures,
                )?;
            }
        }
        let Some(lb) = state
            .load_balancers
            .values_mut()
            .find(|lb| request.identity.owns_for(&lb.tags, request.infra))
        else {
            return Ok(DeleteOutcome {
                progress: Progress::Done,
                changes: Vec::new(),
            });
        };
        let mut changes = Vec::new();
        let since = match lb.deleting_since {
            Some(since) => since,
            None => {
                lb.deleting_since = Some(now);
                changes.push(format!("deleting load balancer {}", lb.id));
                now
            }
        };
        let done_at = after(since, lb.delay);
        if now >= done_at {
            let id = lb.id.clone();
            state.load_balancers.remove(&id);
            changes.push(format!("deleted load balancer {id}"));
            Ok(DeleteOutcome {
                progress: Progress::Done,
                changes,
            })
        } else {
            Ok(DeleteOutcome {
                progress: pending(
                    format!("load balancer {} is being deleted", lb.id),
                    until(now, done_at),
                ),
                changes,
            })
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::clock::{SharedClock, SystemClock};

    #[test]
    fn a_saved_cloud_loads_with_its_load_balancers_and_next_id() {
        let clock: SharedClock = Arc::new(SystemClock);
        let dir = std::env::temp_dir().join(format!("capi-lb-inmemory-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cloud.json");
        let _ = std::fs::remove_file(&path);
        // No file: an empty cloud.
        assert!(
            InMemoryCloud::load(clock.clone(), &path)
                .unwrap()
                .load_balancers()
                .is_empty()
        );

        let cloud = InMemoryCloud::new(clock.clone());
        let id = cloud.insert_foreign(BTreeMap::from([("owner".into(), "x".into())]), "10.0.0.1");
        assert!(cloud.insert_member(&id, "m0", "10.1.0.1"));
        let before = cloud.fingerprint();
        assert_eq!(before, cloud.fingerprint(), "no change, same fingerprint");
        cloud.save(&path).unwrap();

        let loaded = InMemoryCloud::load(clock, &path).unwrap();
        assert_eq!(loaded.load_balancers(), cloud.load_balancers());
        // IDs continue where the saved cloud stopped.
        assert_eq!(loaded.fingerprint(), before);
        let next = loaded.insert_foreign(BTreeMap::new(), "10.0.0.2");
        assert_ne!(next, id);
        assert_ne!(
            loaded.fingerprint(),
            before,
            "a change, another fingerprint"
        );
        std::fs::write(&path, b"{not json").unwrap();
        assert!(InMemoryCloud::load(Arc::new(SystemClock), &path).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
