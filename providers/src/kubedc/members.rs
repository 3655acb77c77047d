//! The members as the LoadBalancer Service's endpoints: EndpointSlices, plus v1 Endpoints because
//! kube-dc's controller reads Endpoints. kube-dc has no weights, so a draining member stays in the
//! endpoints until the reconciler leaves it out after the drain time.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use capi_lb_api::constants::{FIELD_MANAGER, LABEL_SERVICE_NAME};
use k8s_openapi::api::core::v1::{Endpoints, ObjectReference, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::{Map, json};

use super::KubeDcProvider;
use super::infra::{Infra, labels, ours};
use super::service::ingress_ips;
use super::step::{POLL, SLOW_POLL, api_error, is_not_found};
use crate::endpoints::{self, EndpointObjects, ServiceEndpoints, endpoints_match, slice_matches};
use crate::error::ProviderError;
use crate::provider::{
    DesiredMember, Listener, LoadBalancerIdentity, MemberIntent, MemberState, MemberStatus,
    MembersOutcome, MembersRequest, Progress,
};

/// A member set: name -> (address, draining).
type Members = BTreeMap<String, (String, bool)>;

impl KubeDcProvider {
    /// `converge_members`: the request's members as the endpoints of the LoadBalancer Service.
    pub(super) async fn converge(
        &self,
        request: MembersRequest<'_>,
    ) -> Result<MembersOutcome, ProviderError> {
        let identity = request.identity;
        let infra = Infra::read(request.infra, identity)?;
        let service_name = infra.service_name();
        let service = self.member_service(&infra, identity).await?;
        let (listed, current) = self
            .current_members(&infra.namespace, &service_name)
            .await?;
        let (members, skipped) = member_set(request.members, &current);
        let changes = member_changes(&service_name, &members, &current);

        let built = member_endpoints(&infra, identity, &service, request.listeners, &members);
        self.apply_slices(&infra, identity, &listed, &built.slices)
            .await?;
        self.prune_slices(&infra, identity, &listed, &built.slices)
            .await?;
        self.apply_endpoints(&infra, identity, &built.endpoints)
            .await?;

        // kube-dc programs OVN from the endpoints once the Service has its address.
        let statuses = member_statuses(&members, !ingress_ips(&service).is_empty());
        let progress = members_progress(&skipped, &statuses, &service_name);
        let mut status = Map::new();
        status.insert("memberCount".into(), json!(statuses.len()));
        Ok(MembersOutcome {
            progress,
            members: statuses,
            changes,
            status,
        })
    }

    /// The LoadBalancer Service the members are endpoints of: an error until it exists and is ours.
    async fn member_service(
        &self,
        infra: &Infra,
        identity: &LoadBalancerIdentity,
    ) -> Result<Service, ProviderError> {
        let service_name = infra.service_name();
        let services = self.services(&infra.namespace);
        let Some(service) = services
            .get_opt(&service_name)
            .await
            .map_err(|e| api_error(&format!("get Service {service_name}"), e))?
            .filter(|s| ours(&s.metadata, identity, infra))
        else {
            return Err(ProviderError::transient(format!(
                "Service {service_name} does not exist yet"
            )));
        };
        Ok(service)
    }

    /// The member slices and Endpoints of Service `service`, as they are: name -> address.
    async fn current_members(
        &self,
        namespace: &str,
        service: &str,
    ) -> Result<(Vec<EndpointSlice>, BTreeMap<String, String>), ProviderError> {
        let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), namespace);
        let listed = slices
            .list(&ListParams::default().labels(&format!("{LABEL_SERVICE_NAME}={service}")))
            .await
            .map_err(|e| api_error("list EndpointSlices", e))?
            .items;
        let mut members = BTreeMap::new();
        for slice in &listed {
            for endpoint in &slice.endpoints {
                if let (Some(target), Some(address)) = (
                    endpoint.target_ref.as_ref().and_then(|t| t.name.clone()),
                    endpoint.addresses.first(),
                ) {
                    members.insert(target, address.clone());
                }
            }
        }
        Ok((listed, members))
    }

    /// Apply each desired slice that differs from the listed one; an error on one not ours.
    async fn apply_slices(
        &self,
        infra: &Infra,
        identity: &LoadBalancerIdentity,
        listed: &[EndpointSlice],
        desired: &[EndpointSlice],
    ) -> Result<(), ProviderError> {
        let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), &infra.namespace);
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        for desired in desired {
            let name = desired.name_any();
            let existing = listed.iter().find(|s| s.name_any() == name);
            if existing.is_some_and(|s| !ours(&s.metadata, identity, infra)) {
                return Err(ProviderError::transient(format!(
                    "EndpointSlice {name} exists and is not managed by capi-lb; it was left untouched"
                )));
            }
            if !existing.is_some_and(|s| slice_matches(s, desired)) {
                slices
                    .patch(&name, &apply, &Patch::Apply(desired))
                    .await
                    .map_err(|e| api_error(&format!("apply EndpointSlice {name}"), e))?;
            }
        }
        Ok(())
    }

    /// Delete the listed slices that are ours and not among the desired ones.
    async fn prune_slices(
        &self,
        infra: &Infra,
        identity: &LoadBalancerIdentity,
        listed: &[EndpointSlice],
        desired: &[EndpointSlice],
    ) -> Result<(), ProviderError> {
        let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), &infra.namespace);
        let keep: BTreeSet<String> = desired.iter().map(|s| s.name_any()).collect();
        for slice in listed {
            let name = slice.name_any();
            if ours(&slice.metadata, identity, infra) && !keep.contains(&name) {
                match slices.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(api_error(&format!("delete EndpointSlice {name}"), e)),
                }
            }
        }
        Ok(())
    }

    /// Apply the v1 Endpoints kube-dc's controller reads, unless they already have these subsets.
    async fn apply_endpoints(
        &self,
        infra: &Infra,
        identity: &LoadBalancerIdentity,
        desired: &Endpoints,
    ) -> Result<(), ProviderError> {
        let service_name = infra.service_name();
        let endpoints_api: Api<Endpoints> = Api::namespaced(self.client.clone(), &infra.namespace);
        let observed = endpoints_api
            .get_opt(&service_name)
            .await
            .map_err(|e| api_error(&format!("get Endpoints {service_name}"), e))?;
        if let Some(existing) = &observed
            && !ours(&existing.metadata, identity, infra)
        {
            return Err(ProviderError::transient(format!(
                "Endpoints {service_name} exist and are not managed by capi-lb; they were left untouched"
            )));
        }
        if !observed
            .as_ref()
            .is_some_and(|e| endpoints_match(e, desired))
        {
            endpoints_api
                .patch(
                    &service_name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(desired),
                )
                .await
                .map_err(|e| api_error(&format!("apply Endpoints {service_name}"), e))?;
        }
        Ok(())
    }
}

/// The member set the request asks for, and the members left out because they are not IPs.
fn member_set(
    desired: &[DesiredMember],
    current: &BTreeMap<String, String>,
) -> (Members, Vec<String>) {
    let mut members = Members::new();
    let mut skipped = Vec::new();
    for desired in desired {
        let existing = current.get(&desired.name);
        match &desired.intent {
            MemberIntent::Serve(address) => {
                if address.parse::<IpAddr>().is_ok() {
                    members.insert(desired.name.clone(), (address.clone(), false));
                } else {
                    skipped.push(format!("{} ({address})", desired.name));
                }
            }
            MemberIntent::Keep => {
                if let Some(address) = existing {
                    members.insert(desired.name.clone(), (address.clone(), false));
                }
            }
            // No weights in kube-dc: a draining member stays until it is left out.
            MemberIntent::Drain => {
                if let Some(address) = existing {
                    members.insert(desired.name.clone(), (address.clone(), true));
                }
            }
        }
    }
    (members, skipped)
}

/// What going from `current` to `members` changes: members added, moved and removed.
fn member_changes(
    service_name: &str,
    members: &Members,
    current: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut changes = Vec::new();
    for (name, (address, _)) in members {
        match current.get(name) {
            None => changes.push(format!(
                "added member {name} ({address}) to Service {service_name}"
            )),
            Some(old) if old != address => changes.push(format!(
                "member {name} of Service {service_name} moved from {old} to {address}"
            )),
            Some(_) => {}
        }
    }
    for name in current.keys().filter(|n| !members.contains_key(*n)) {
        changes.push(format!("removed member {name} from Service {service_name}"));
    }
    changes
}

/// The EndpointSlices and Endpoints of the member Service `service`, owned by it. `members` maps a
/// member's name (its `targetRef`) to its address and whether it drains. Every member is ready: kube-dc
/// has no weights, so a draining member serves until it is left out. The endpoints' ports are the
/// listeners' target ports. Without members, the Endpoints has no subsets (and there is no slice).
fn member_endpoints(
    infra: &Infra,
    identity: &LoadBalancerIdentity,
    service: &Service,
    listeners: &[Listener],
    members: &Members,
) -> EndpointObjects {
    let owner = service.controller_owner_ref(&()).map(|mut o| {
        o.block_owner_deletion = Some(true);
        o
    });
    endpoints::build(&ServiceEndpoints {
        namespace: infra.namespace.clone(),
        service_name: infra.service_name(),
        labels: labels(identity, infra),
        owner_references: owner.into_iter().collect(),
        ports: listeners
            .iter()
            .map(|l| endpoints::Port {
                name: Some(l.name.clone()),
                port: l.target_port,
                protocol: l.protocol.as_str().to_string(),
            })
            .collect(),
        addresses: members
            .iter()
            .map(|(name, (address, _))| endpoints::Address {
                ip: address.clone(),
                ready: true,
                target: Some(target_ref(name)),
            })
            .collect(),
    })
}

/// An endpoint's `targetRef`: the member's name.
fn target_ref(name: &str) -> ObjectReference {
    ObjectReference {
        name: Some(name.to_string()),
        ..Default::default()
    }
}

/// Each member's state: draining, active once kube-dc has `programmed` the Service, else adding.
fn member_statuses(members: &Members, programmed: bool) -> Vec<MemberStatus> {
    members
        .iter()
        .map(|(name, (address, draining))| MemberStatus {
            name: name.clone(),
            address: address.clone(),
            state: if *draining {
                MemberState::Draining
            } else if programmed {
                MemberState::Active
            } else {
                MemberState::Adding
            },
        })
        .collect()
}

/// Pending on members that are not IPs or until kube-dc programs the Service, else done.
fn members_progress(skipped: &[String], statuses: &[MemberStatus], service_name: &str) -> Progress {
    if !skipped.is_empty() {
        Progress::pending(
            format!(
                "kube-dc load balances to IP addresses only; not added: {}",
                skipped.join(", ")
            ),
            SLOW_POLL,
        )
    } else if statuses.iter().any(|m| m.state == MemberState::Adding) {
        Progress::pending(
            format!("waiting for kube-dc to program Service {service_name}"),
            POLL,
        )
    } else {
        Progress::Done
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::provider::tags;

    #[test]
    fn member_endpoints_are_ready_owned_by_the_service_and_point_at_target_ports() {
        let identity = LoadBalancerIdentity {
            namespace: "ns".into(),
            name: "cp".into(),
            uid: "lb-uid".into(),
            cluster_name: None,
        };
        let infra = Infra {
            name: "kdc".into(),
            uid: Some("infra-uid".into()),
            namespace: "ns".into(),
            spec: capi_lb_api::KubeDCLoadBalancerSpec {
                external_network_type: Default::default(),
                eip_name: None,
            },
            owner: None,
        };
        let service = Service {
            metadata: ObjectMeta {
                name: Some("kdc-lb".into()),
                namespace: Some("ns".into()),
                uid: Some("svc-uid".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let listeners = [Listener {
            name: "api".into(),
            port: 6443,
            target_port: 16443,
            protocol: capi_lb_api::loadbalancer::Protocol::Tcp,
        }];
        let members = BTreeMap::from([
            ("b".to_string(), ("2001:db8::2".to_string(), false)),
            ("a".to_string(), ("10.0.0.1".to_string(), true)),
        ]);
        let built = member_endpoints(&infra, &identity, &service, &listeners, &members);
        let names: Vec<_> = built.slices.iter().map(|s| s.name_any()).collect();
        assert_eq!(names, ["kdc-lb-ipv4", "kdc-lb-ipv6"]);
        let owners: Vec<_> = built.endpoints.owner_references().to_vec();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].uid, "svc-uid");
        assert_eq!(owners[0].block_owner_deletion, Some(true));
        for slice in &built.slices {
            assert_eq!(slice.owner_references(), owners.as_slice());
            assert_eq!(slice.labels().get(tags::UID), Some(&"lb-uid".to_string()));
            let ports: Vec<_> = slice.ports.iter().flatten().map(|p| p.port).collect();
            assert_eq!(ports, [Some(16443)]);
        }
        // A draining member is still ready: kube-dc has no weights.
        let subsets = built.endpoints.subsets.clone().unwrap_or_default();
        let addresses: Vec<_> = subsets[0]
            .addresses
            .iter()
            .flatten()
            .map(|a| (a.ip.as_str(), a.target_ref.clone().and_then(|t| t.name)))
            .collect();
        assert_eq!(
            addresses,
            [
                ("10.0.0.1", Some("a".to_string())),
                ("2001:db8::2", Some("b".to_string()))
            ]
        );
        assert_eq!(subsets[0].not_ready_addresses, None);
        assert_eq!(
            subsets[0]
                .ports
                .iter()
                .flatten()
                .map(|p| p.port)
                .collect::<Vec<_>>(),
            [16443]
        );

        let empty = member_endpoints(&infra, &identity, &service, &listeners, &BTreeMap::new());
        assert!(empty.slices.is_empty());
        assert_eq!(empty.endpoints.subsets, Some(Vec::new()));
    }
}
