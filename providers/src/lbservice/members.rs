//! The members as the endpoints of the load balancer's selectorless Service: one EndpointSlice per
//! IP family (and, for consumers that still read them, v1 Endpoints), each endpoint naming its
//! member in `targetRef`. A member that drains is published as the provider's implementation needs
//! it: still ready where the implementation has no other way to keep existing connections (kube-dc),
//! or serving and terminating but not ready (kube-proxy and the Service implementations stop sending
//! it new connections while others are ready); it leaves when the reconciler leaves it out.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use capi_lb_api::constants::{FIELD_MANAGER, LABEL_SERVICE_NAME};
use k8s_openapi::api::core::v1::{Endpoints, ObjectReference, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};

use serde_json::{Map, json};

use super::{Ingress, api_error, is_not_found, labelled_for, labels, member_service};
use crate::endpoints::{self, EndpointObjects, ServiceEndpoints, endpoints_match, slice_matches};
use crate::error::ProviderError;
use crate::provider::{
    DesiredMember, Listener, LoadBalancerIdentity, MemberIntent, MemberState, MemberStatus,
    MembersOutcome, MembersRequest, Progress,
};

/// A member set: name -> (address, draining).
pub type Members = BTreeMap<String, (String, bool)>;

/// Where a load balancer's members are published, and how.
#[derive(Clone, Copy)]
pub struct MemberEndpoints<'a> {
    /// Client of the cluster the Service is in.
    pub client: &'a kube::Client,
    /// The Service: the endpoint objects are named after it and owned by it.
    pub service: &'a Service,
    /// The LoadBalancer the members are for.
    pub identity: &'a LoadBalancerIdentity,
    /// UID of the infrastructure object the Service was made for.
    pub infra_uid: Option<&'a str>,
    /// How a draining member is published.
    pub draining: endpoints::State,
    /// Whether v1 Endpoints are written besides the EndpointSlices.
    pub legacy_endpoints: bool,
}

/// What [`MemberEndpoints::converge`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct Converged {
    /// The members now published, by name.
    pub members: Members,
    /// What changed: members added, moved and removed.
    pub changes: Vec<String>,
    /// Members left out because their address is not an IP: `name (address)`.
    pub skipped: Vec<String>,
}

impl MemberEndpoints<'_> {
    fn namespace(&self) -> String {
        self.service.namespace().unwrap_or_default()
    }

    fn slices(&self) -> Api<EndpointSlice> {
        Api::namespaced(self.client.clone(), &self.namespace())
    }

    /// Ours: labelled for this LoadBalancer and owned by its Service (which is known to be ours).
    fn owns(&self, object: &impl Resource) -> bool {
        let service = self.service.meta().uid.as_deref();
        labelled_for(object.meta(), self.identity, self.infra_uid)
            && object
                .meta()
                .owner_references
                .iter()
                .flatten()
                .any(|o| Some(o.uid.as_str()) == service)
    }

    /// Publish `desired` (with the `listeners`' target ports) as the Service's endpoints: apply what
    /// differs, delete the slices of families that have no member left. Writes nothing when the
    /// endpoints already are that.
    pub async fn converge(
        &self,
        listeners: &[Listener],
        desired: &[DesiredMember],
    ) -> Result<Converged, ProviderError> {
        let (listed, current) = self.current().await?;
        let (members, skipped) = member_set(desired, &current);
        let changes = member_changes(&self.service.name_any(), &members, &current);
        let built = self.build(listeners, &members);
        self.apply_slices(&listed, &built.slices).await?;
        self.prune_slices(&listed, &built.slices).await?;
        if self.legacy_endpoints {
            self.apply_endpoints(&built.endpoints).await?;
        }
        Ok(Converged {
            members,
            changes,
            skipped,
        })
    }

    /// The Service's EndpointSlices as they are, and the members in them: name -> address.
    async fn current(
        &self,
    ) -> Result<(Vec<EndpointSlice>, BTreeMap<String, String>), ProviderError> {
        let service = self.service.name_any();
        let listed = self
            .slices()
            .list(&ListParams::default().labels(&format!("{LABEL_SERVICE_NAME}={service}")))
            .await
            .map_err(|e| api_error("list EndpointSlices", e))?
            .items;
        let mut members = BTreeMap::new();
        for slice in listed.iter().filter(|s| self.owns(*s)) {
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

    /// The EndpointSlices and Endpoints of `members`, owned by the Service. The endpoints' ports
    /// are the listeners' target ports. Without members, the Endpoints has no subsets (and there is
    /// no slice).
    pub fn build(&self, listeners: &[Listener], members: &Members) -> EndpointObjects {
        let owner = self.service.controller_owner_ref(&()).map(|mut o| {
            o.block_owner_deletion = Some(true);
            o
        });
        endpoints::build(&ServiceEndpoints {
            namespace: self.namespace(),
            service_name: self.service.name_any(),
            labels: labels(self.identity, self.infra_uid),
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
                .map(|(name, (address, draining))| endpoints::Address {
                    ip: address.clone(),
                    state: if *draining {
                        self.draining
                    } else {
                        endpoints::State::Ready
                    },
                    target: Some(ObjectReference {
                        name: Some(name.clone()),
                        ..Default::default()
                    }),
                })
                .collect(),
        })
    }

    /// Apply each desired slice that differs from the listed one; an error on one not ours.
    async fn apply_slices(
        &self,
        listed: &[EndpointSlice],
        desired: &[EndpointSlice],
    ) -> Result<(), ProviderError> {
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        for desired in desired {
            let name = desired.name_any();
            let existing = listed.iter().find(|s| s.name_any() == name);
            if existing.is_some_and(|s| !self.owns(s)) {
                return Err(ProviderError::transient(format!(
                    "EndpointSlice {name} exists and is not managed by capi-lb; it was left untouched"
                )));
            }
            if !existing.is_some_and(|s| slice_matches(s, desired)) {
                self.slices()
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
        listed: &[EndpointSlice],
        desired: &[EndpointSlice],
    ) -> Result<(), ProviderError> {
        let keep: BTreeSet<String> = desired.iter().map(|s| s.name_any()).collect();
        for slice in listed {
            let name = slice.name_any();
            if self.owns(slice) && !keep.contains(&name) {
                match self.slices().delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(api_error(&format!("delete EndpointSlice {name}"), e)),
                }
            }
        }
        Ok(())
    }

    /// Apply the v1 Endpoints, unless they already have these subsets; an error on ones not ours.
    async fn apply_endpoints(&self, desired: &Endpoints) -> Result<(), ProviderError> {
        let name = self.service.name_any();
        let api: Api<Endpoints> = Api::namespaced(self.client.clone(), &self.namespace());
        let observed = api
            .get_opt(&name)
            .await
            .map_err(|e| api_error(&format!("get Endpoints {name}"), e))?;
        if let Some(existing) = &observed
            && !self.owns(existing)
        {
            return Err(ProviderError::transient(format!(
                "Endpoints {name} exist and are not managed by capi-lb; they were left untouched"
            )));
        }
        if !observed
            .as_ref()
            .is_some_and(|e| endpoints_match(e, desired))
        {
            api.patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(desired),
            )
            .await
            .map_err(|e| api_error(&format!("apply Endpoints {name}"), e))?;
        }
        Ok(())
    }
}

/// `converge_members` of a provider whose members are its Service's endpoints: find the Service
/// (an error until it exists and is ours), publish the request's members, and report them: active
/// once the Service has an address from its implementation, adding before, and pending (with the
/// provider's words) on members without an IP or while adding.
#[derive(Clone)]
pub struct MemberPublication<'a> {
    /// Client of the cluster the Service is in.
    pub client: &'a kube::Client,
    /// Namespace of the Service.
    pub namespace: &'a str,
    /// Name of the Service.
    pub service_name: String,
    /// UID of the infrastructure object the Service was made for.
    pub infra_uid: Option<&'a str>,
    /// How a draining member is published.
    pub draining: endpoints::State,
    /// Whether v1 Endpoints are written besides the EndpointSlices.
    pub legacy_endpoints: bool,
    /// What members that are not IPs are left out for, e.g. "kube-dc load balances to IP
    /// addresses only".
    pub ip_only: &'a str,
    /// What adding members wait for.
    pub waiting: String,
    /// How often to look again while members are adding.
    pub poll: Duration,
    /// How often to look again while members are left out.
    pub slow_poll: Duration,
}

impl MemberPublication<'_> {
    /// Publish `request`'s members and say how far they are.
    pub async fn converge(
        self,
        request: MembersRequest<'_>,
    ) -> Result<MembersOutcome, ProviderError> {
        let service = member_service(
            self.client,
            self.namespace,
            &self.service_name,
            request.identity,
            self.infra_uid,
        )
        .await?;
        let converged = MemberEndpoints {
            client: self.client,
            service: &service,
            identity: request.identity,
            infra_uid: self.infra_uid,
            draining: self.draining,
            legacy_endpoints: self.legacy_endpoints,
        }
        .converge(request.listeners, request.members)
        .await?;
        // The implementation programs the members once the Service has its address.
        let statuses = member_statuses(&converged.members, !Ingress::of(&service).is_empty());
        let progress = if !converged.skipped.is_empty() {
            Progress::pending(
                format!(
                    "{}; not added: {}",
                    self.ip_only,
                    converged.skipped.join(", ")
                ),
                self.slow_poll,
            )
        } else if statuses.iter().any(|m| m.state == MemberState::Adding) {
            Progress::pending(self.waiting, self.poll)
        } else {
            Progress::Done
        };
        let mut status = Map::new();
        status.insert("memberCount".into(), json!(statuses.len()));
        Ok(MembersOutcome {
            progress,
            members: statuses,
            changes: converged.changes,
            status,
            addresses: None,
        })
    }
}

/// The member set the request asks for, and the members left out because they are not IPs. A
/// `Keep` or `Drain` member that is not published is not added.
pub fn member_set(
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
pub fn member_changes(
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

/// Each member's state: draining, active once the implementation has `programmed` the Service,
/// else adding.
pub fn member_statuses(members: &Members, programmed: bool) -> Vec<MemberStatus> {
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

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::lbservice::testing::identity;
    use crate::provider::tags;

    fn service() -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("kdc-lb".into()),
                namespace: Some("ns".into()),
                uid: Some("svc-uid".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn listeners() -> [Listener; 1] {
        [Listener {
            name: "api".into(),
            port: 6443,
            target_port: 16443,
            protocol: capi_lb_api::loadbalancer::Protocol::Tcp,
        }]
    }

    /// A client that is never called (building makes no request).
    fn client() -> kube::Client {
        let service = tower::service_fn(|_: http::Request<kube::client::Body>| async {
            Err::<http::Response<kube::client::Body>, std::io::Error>(std::io::Error::other(
                "no API in this test",
            ))
        });
        kube::Client::new(service, "default")
    }

    #[tokio::test]
    async fn member_endpoints_are_owned_by_the_service_point_at_target_ports_and_drain_as_told() {
        let (client, service, identity) = (client(), service(), identity());
        let members = BTreeMap::from([
            ("b".to_string(), ("2001:db8::2".to_string(), false)),
            ("a".to_string(), ("10.0.0.1".to_string(), true)),
        ]);
        let publish = |draining| MemberEndpoints {
            client: &client,
            service: &service,
            identity: &identity,
            infra_uid: Some("infra-uid"),
            draining,
            legacy_endpoints: true,
        };
        // kube-dc: no weights, a draining member stays ready.
        let built = publish(endpoints::State::Ready).build(&listeners(), &members);
        let names: Vec<_> = built.slices.iter().map(|s| s.name_any()).collect();
        assert_eq!(names, ["kdc-lb-ipv4", "kdc-lb-ipv6"]);
        let owners: Vec<_> = built.endpoints.owner_references().to_vec();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].uid, "svc-uid");
        assert_eq!(owners[0].block_owner_deletion, Some(true));
        for slice in &built.slices {
            assert_eq!(slice.owner_references(), owners.as_slice());
            assert_eq!(slice.labels().get(tags::UID), Some(&"lb-uid".to_string()));
            assert_eq!(
                slice.labels().get(tags::INFRASTRUCTURE_UID),
                Some(&"infra-uid".to_string())
            );
            let ports: Vec<_> = slice.ports.iter().flatten().map(|p| p.port).collect();
            assert_eq!(ports, [Some(16443)]);
        }
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

        // A Service implementation: the draining member is serving and terminating, not ready.
        let built = publish(endpoints::State::Draining).build(&listeners(), &members);
        let a = &built.slices[0].endpoints[0];
        let conditions = a.conditions.clone().unwrap_or_default();
        assert_eq!(
            (conditions.ready, conditions.serving, conditions.terminating),
            (Some(false), Some(true), Some(true))
        );
        let b = &built.slices[1].endpoints[0];
        assert_eq!(b.conditions.as_ref().and_then(|c| c.ready), Some(true));

        let empty = publish(endpoints::State::Ready).build(&listeners(), &BTreeMap::new());
        assert!(empty.slices.is_empty());
        assert_eq!(empty.endpoints.subsets, Some(Vec::new()));
    }

    #[test]
    fn the_member_set_serves_ips_keeps_and_drains_only_published_members() {
        let current = BTreeMap::from([
            ("kept".to_string(), "10.0.0.1".to_string()),
            ("drained".to_string(), "10.0.0.2".to_string()),
            ("gone".to_string(), "10.0.0.3".to_string()),
        ]);
        let desired = [
            DesiredMember::serve("new", "10.0.0.4"),
            DesiredMember::serve("named", "node.example.com"),
            DesiredMember::keep("kept"),
            DesiredMember::keep("never-published"),
            DesiredMember::drain("drained"),
            DesiredMember::drain("never-published-either"),
        ];
        let (members, skipped) = member_set(&desired, &current);
        assert_eq!(
            members,
            BTreeMap::from([
                ("drained".to_string(), ("10.0.0.2".to_string(), true)),
                ("kept".to_string(), ("10.0.0.1".to_string(), false)),
                ("new".to_string(), ("10.0.0.4".to_string(), false)),
            ])
        );
        assert_eq!(skipped, ["named (node.example.com)"]);
        assert_eq!(
            member_changes("svc", &members, &current),
            [
                "added member new (10.0.0.4) to Service svc",
                "removed member gone from Service svc"
            ]
        );
        let states: Vec<_> = member_statuses(&members, false)
            .into_iter()
            .map(|m| m.state)
            .collect();
        assert_eq!(
            states,
            [
                MemberState::Draining,
                MemberState::Adding,
                MemberState::Adding
            ]
        );
        assert!(
            member_statuses(&members, true)
                .iter()
                .all(|m| m.state != MemberState::Adding)
        );
    }
}
