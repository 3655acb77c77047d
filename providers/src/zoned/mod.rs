//! The zoned provider (`zoned`): one LoadBalancer realised by several load balancers, one per zone
//! (CAPO's multi-AZ proposal: an Octavia load balancer per availability zone, members from their
//! own zone, one DNS name with a record per load balancer). For a LoadBalancer whose
//! `infrastructureRef` names a `ZonedLoadBalancer`:
//!
//! - each zone gets a LoadBalancer of its own, `<name>-<zone>`, made and kept by this provider
//!   ([`plan::child`]): the parent's ports, targets (narrowed to the zone's failure domains and
//!   labels), drain and target settings, the zone's infrastructure object, nothing published. So
//!   every zone's load balancer is provisioned, populated, drained, swapped (make before break)
//!   and deleted by the same engine as any LoadBalancer, through its own provider;
//! - the parent's addresses are those of the zones that serve (Ready, with an active target):
//!   `-ext`, `spec.dns` and the Cluster's endpoint follow them, so a zone whose load balancer is
//!   down leaves the name, never the last one ([`plan::published`]);
//! - the parent's members are its targets as their zone's LoadBalancer reports them.
//!
//! The zones' LoadBalancers are labelled with the parent's UID and annotated with its name, so
//! capi-lb's watch of them brings the parent back on every change, and owned by the parent.

pub mod plan;
pub mod reason;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use capi_lb_api::constants::{FIELD_MANAGER, GROUP, INFRASTRUCTURE_GROUP, VERSION};
use capi_lb_api::zoned::{ZoneStatus, ZonedLoadBalancerStatus};
use capi_lb_api::{LoadBalancer, ZonedLoadBalancer};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use serde_json::Map;

use crate::entry::{Entry, OwnedKind, no_records};
use crate::error::{INVALID_CONFIGURATION, ProviderError, read_infrastructure};
use crate::lbservice::api_error;
use crate::provider::{
    DeleteOutcome, DeleteRequest, EnsureOutcome, EnsureRequest, LoadBalancerIdentity,
    MembersOutcome, MembersRequest, Notice, Progress, Provider, tags,
};

/// The zoned provider's catalog entry.
pub const ENTRY: Entry = Entry {
    name: "zoned",
    title: "zoned provider (one load balancer per zone)",
    shipped: true,
    docs: "docs/providers/zoned.md",
    infrastructure: || ApiResource::erase::<ZonedLoadBalancer>(&()),
    crd: <ZonedLoadBalancer as kube::CustomResourceExt>::crd,
    build: |dependencies| Arc::new(ZonedProvider::new(dependencies.client.clone())),
    // Each zone's LoadBalancer checks its own members (its provider's health monitor, or its
    // own target probes): the parent does not probe them again.
    checks_members: true,
    proxies: false,
    owned_kinds: &[OwnedKind {
        group: GROUP,
        version: VERSION,
        kind: "LoadBalancer",
        plural: "loadbalancers",
        missing: "LoadBalancers are not installed: the zones' LoadBalancers are not watched",
    }],
    calls: &[
        (
            INFRASTRUCTURE_GROUP,
            "zonedloadbalancers",
            &["get", "patch"],
        ),
        (
            INFRASTRUCTURE_GROUP,
            "zonedloadbalancers/status",
            &["patch"],
        ),
        // The parent (its spec), and the zones' LoadBalancers it makes, updates and deletes.
        (
            GROUP,
            "loadbalancers",
            &["get", "list", "create", "patch", "delete"],
        ),
    ],
    reasons: reason::ALL,
    records: no_records,
};

/// How soon to look again while waiting: every change of a zone's LoadBalancer brings the parent
/// back at once (the watch of the owned kind), so this is only a safety net.
const POLL: Duration = Duration::from_secs(600);
/// How soon to look again while the zones' LoadBalancers are being deleted.
const DELETING: Duration = Duration::from_secs(5);

/// The zoned provider.
#[derive(Clone)]
pub struct ZonedProvider {
    client: kube::Client,
}

impl std::fmt::Debug for ZonedProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZonedProvider").finish_non_exhaustive()
    }
}

/// The `ZonedLoadBalancer` of a request, with its status (which the schema check leaves out).
fn read(infra: &DynamicObject) -> Result<ZonedLoadBalancer, ProviderError> {
    let mut parsed: ZonedLoadBalancer = read_infrastructure(infra)?;
    parsed.status = infra
        .data
        .get("status")
        .and_then(|s| serde_json::from_value(s.clone()).ok());
    Ok(parsed)
}

impl ZonedProvider {
    /// A provider that makes the zones' LoadBalancers through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    fn api(&self, namespace: &str) -> Api<LoadBalancer> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// The zones' LoadBalancers made for `identity`.
    async fn children(
        &self,
        identity: &LoadBalancerIdentity,
    ) -> Result<Vec<LoadBalancer>, ProviderError> {
        let selector = format!("{}={}", tags::UID, identity.uid);
        let mut children = self
            .api(&identity.namespace)
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| api_error("list the zones' LoadBalancers", e))?
            .items;
        children.retain(|c| plan::is_ours(c, identity));
        Ok(children)
    }

    /// Make or update `zone`'s LoadBalancer: its standing, and whether it could be made (false:
    /// the zone is refused, its standing says why).
    async fn zone(
        &self,
        identity: &LoadBalancerIdentity,
        desired: Result<LoadBalancer, String>,
        name: &str,
        zone: &str,
        children: &[LoadBalancer],
        changes: &mut Vec<String>,
    ) -> Result<(ZoneStatus, bool), ProviderError> {
        let desired = match desired {
            Ok(desired) => desired,
            Err(problem) => return Ok((plan::standing(zone, name, None, Some(&problem)), false)),
        };
        let found = children.iter().find(|c| c.name_any() == name);
        if let Some(found) = found
            && plan::up_to_date(found, &desired)
        {
            return Ok((plan::standing(zone, name, Some(found), None), true));
        }
        let api = self.api(&identity.namespace);
        let taken = || {
            format!(
                "LoadBalancer {name} exists and is not {}'s zone: capi-lb leaves it alone; rename the zone or that LoadBalancer",
                identity.name
            )
        };
        // No check-then-write: a new zone's LoadBalancer is created (refused if someone made one of
        // that name meanwhile), and one of ours is applied at the resourceVersion it was seen at
        // (refused if it changed meanwhile, and looked at again in the next pass).
        // Said without a write when it is plainly there (a pass that writes is made again).
        if found.is_none()
            && api
                .get_opt(name)
                .await
                .map_err(|e| api_error(&format!("get LoadBalancer {name}"), e))?
                .is_some()
        {
            return Ok((plan::standing(zone, name, None, Some(&taken())), false));
        }
        let applied = match found {
            None => match api
                .create(
                    &PostParams {
                        field_manager: Some(FIELD_MANAGER.to_string()),
                        ..PostParams::default()
                    },
                    &desired,
                )
                .await
            {
                Ok(created) => created,
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    return Ok((plan::standing(zone, name, None, Some(&taken())), false));
                }
                Err(e) => return Err(api_error(&format!("create LoadBalancer {name}"), e)),
            },
            Some(found) => {
                let mut desired = desired.clone();
                desired.metadata.resource_version = found.metadata.resource_version.clone();
                api.patch(
                    name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&desired),
                )
                .await
                .map_err(|e| api_error(&format!("apply LoadBalancer {name}"), e))?
            }
        };
        changes.push(format!(
            "{} LoadBalancer {name} for zone {zone}",
            if found.is_some() {
                "updated"
            } else {
                "created"
            }
        ));
        Ok((plan::standing(zone, name, Some(&applied), None), true))
    }

    /// Delete the zones' LoadBalancers `gone` (their finalizers release their own load balancers).
    async fn delete_children<'a>(
        &self,
        identity: &LoadBalancerIdentity,
        gone: impl Iterator<Item = &'a LoadBalancer>,
        changes: &mut Vec<String>,
    ) -> Result<(), ProviderError> {
        let api = self.api(&identity.namespace);
        for child in gone.filter(|c| c.metadata.deletion_timestamp.is_none()) {
            let name = child.name_any();
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => changes.push(format!("deleted LoadBalancer {name}")),
                Err(e) if crate::lbservice::is_not_found(&e) => {}
                Err(e) => return Err(api_error(&format!("delete LoadBalancer {name}"), e)),
            }
        }
        Ok(())
    }
}

/// What the LoadBalancer's `InfrastructureReady` says about its zones, once it has addresses.
/// `refused` names the zones whose LoadBalancer could not be made.
fn notice(zones: &[ZoneStatus], refused: &BTreeSet<String>) -> Option<Notice> {
    let named = |pick: &dyn Fn(&ZoneStatus) -> bool| {
        zones
            .iter()
            .filter(|z| pick(z))
            .map(|z| {
                format!(
                    "zone {}: {}",
                    z.name,
                    z.message.as_deref().unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
    };
    let (reason, picked, then) = if zones.iter().all(|z| !z.ready) {
        (
            reason::NO_ZONE_SERVING,
            named(&|_| true),
            "no zone serves: the name keeps the last addresses that did",
        )
    } else if !refused.is_empty() {
        (
            reason::ZONE_REFUSED,
            named(&|z| refused.contains(&z.name)),
            "out of the name until that is fixed",
        )
    } else if zones.iter().any(|z| !z.ready && z.provisioned) {
        (
            reason::ZONE_DOWN,
            named(&|z| !z.ready && z.provisioned),
            "out of the name until its load balancer is Ready again",
        )
    } else if zones.iter().any(|z| !z.ready) {
        (
            reason::ZONES_PROVISIONING,
            named(&|z| !z.ready),
            "in the name once its load balancer is Ready",
        )
    } else if zones.iter().any(|z| !z.serving) {
        (
            reason::ZONE_WITHOUT_TARGETS,
            named(&|z| !z.serving),
            "in the name once a target of the zone is active",
        )
    } else {
        return None;
    };
    Some(Notice {
        reason,
        message: format!("{}; {then}", picked.join("; ")),
    })
}

#[async_trait]
impl Provider for ZonedProvider {
    async fn ensure(&self, request: EnsureRequest<'_>) -> Result<EnsureOutcome, ProviderError> {
        let infra = read(request.infra)?;
        let identity = request.identity;
        let parent = request.loadbalancer;
        let selector: LabelSelector = parent
            .effective_selector()
            .map_err(|e| ProviderError::permanent(INVALID_CONFIGURATION, e.to_string()))?
            .into();
        let children = self.children(identity).await?;
        let mut changes = Vec::new();
        let mut zones = Vec::new();
        let mut refused = BTreeSet::new();
        for zone in &infra.spec.zones {
            let name = plan::child_name(&identity.name, &zone.name)
                .map_err(|e| ProviderError::permanent(INVALID_CONFIGURATION, e))?;
            let desired = plan::child(parent, identity, selector.clone(), zone);
            let (standing, made) = self
                .zone(
                    identity,
                    desired,
                    &name,
                    &zone.name,
                    &children,
                    &mut changes,
                )
                .await?;
            if !made {
                refused.insert(zone.name.clone());
            }
            zones.push(standing);
        }
        let kept: BTreeSet<&str> = zones.iter().map(|z| z.load_balancer.as_str()).collect();
        self.delete_children(
            identity,
            children
                .iter()
                .filter(|c| !kept.contains(c.name_any().as_str())),
            &mut changes,
        )
        .await?;
        let before = infra.status.unwrap_or_default();
        for zone in &mut zones {
            zone.provisioned = zone.ready
                || before
                    .zones
                    .iter()
                    .any(|z| z.load_balancer == zone.load_balancer && z.provisioned);
        }
        let before = before.addresses;
        let addresses = plan::published(&zones, &before);
        let progress = if addresses.is_empty() {
            Progress::pending_because(
                if refused.len() == zones.len() {
                    reason::ZONE_REFUSED
                } else {
                    reason::ZONES_PROVISIONING
                },
                format!(
                    "waiting for a zone's load balancer: {}",
                    zones
                        .iter()
                        .map(|z| format!(
                            "zone {}: {}",
                            z.name,
                            z.message.as_deref().unwrap_or("Ready")
                        ))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                POLL,
            )
        } else {
            Progress::Done
        };
        let status = ZonedLoadBalancerStatus {
            zone_count: i32::try_from(zones.len()).unwrap_or(i32::MAX),
            serving_zones: i32::try_from(zones.iter().filter(|z| z.serving).count())
                .unwrap_or(i32::MAX),
            addresses: addresses.clone(),
            zones: zones.clone(),
        };
        let status = match serde_json::to_value(status) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => Map::new(),
        };
        Ok(EnsureOutcome {
            notice: if progress.is_done() {
                notice(&zones, &refused)
            } else {
                None
            },
            progress,
            addresses,
            serving: false,
            created: false,
            changes,
            status,
            unsupported: Vec::new(),
            // The zones' LoadBalancers are watched; each looks at its own cloud for drift.
            watched: true,
        })
    }

    async fn converge_members(
        &self,
        request: MembersRequest<'_>,
    ) -> Result<MembersOutcome, ProviderError> {
        let infra = read(request.infra)?;
        let children = self.children(request.identity).await?;
        let (members, nowhere) = plan::members(request.members, &children);
        let progress = if !nowhere.is_empty()
            && plan::all_settled(&children, infra.spec.zones.len())
        {
            Progress::pending_because(
                reason::TARGETS_IN_NO_ZONE,
                format!(
                    "{} are selected but in no zone (their failure domain or labels match no zone of ZonedLoadBalancer {}): they never serve; add their zone or deselect them",
                    nowhere.join(", "),
                    infra.name_any()
                ),
                POLL,
            )
        } else {
            Progress::Done
        };
        Ok(MembersOutcome {
            progress,
            members,
            changes: Vec::new(),
            status: Map::new(),
            addresses: None,
        })
    }

    async fn delete(&self, request: DeleteRequest<'_>) -> Result<DeleteOutcome, ProviderError> {
        let children = self.children(request.identity).await?;
        if children.is_empty() {
            return Ok(DeleteOutcome {
                progress: Progress::Done,
                changes: Vec::new(),
            });
        }
        let mut changes = Vec::new();
        self.delete_children(request.identity, children.iter(), &mut changes)
            .await?;
        Ok(DeleteOutcome {
            progress: Progress::pending(
                format!(
                    "waiting for the zones' LoadBalancers to release their load balancers: {}",
                    children
                        .iter()
                        .map(ResourceExt::name_any)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                DELETING,
            ),
            changes,
        })
    }
}
