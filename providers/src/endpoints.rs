//! The endpoint objects of a selectorless Service, built from one description: its EndpointSlices,
//! one per IP family (`<service>-ipv4`, `<service>-ipv6`), and the legacy v1 `Endpoints` some
//! consumers still read (kube-dc's controller, for one).
//!
//! Pure: no I/O. Whoever publishes a Service's endpoints (the `-ext` Service of a LoadBalancer, the
//! kube-dc provider's member endpoints) describes them as a [`ServiceEndpoints`] and applies what
//! [`build`] returns, unless [`slice_matches`] / [`endpoints_match`] say the stored object already
//! is that (so an unchanged publication writes nothing); what differs between the publishers
//! (owner references, ports, readiness, target references) is part of the description.
//!
//! What is built:
//! - each EndpointSlice carries the description's labels plus `kubernetes.io/service-name` and
//!   `endpointslice.kubernetes.io/managed-by` (so the EndpointSlice controller leaves it alone), the
//!   owner references, one endpoint per address of its family (in the order given, its conditions
//!   from the address's [`State`]) and every port. A family without addresses has no slice;
//! - the `Endpoints` is named after the Service and carries the labels plus
//!   `endpointslice.kubernetes.io/skip-mirror=true` (so it is not mirrored into a third slice) and
//!   the owner references; its single subset lists the ready addresses under `addresses` and the
//!   others under `notReadyAddresses`, all in the order given, with every port. Without any address it
//!   has no subset at all (`subsets: []`): it is built either way, and whoever does not want an empty
//!   `Endpoints` does not apply it.
//!
//! Addresses are published as written. One that is not an IP address has no family, so it is in no
//! slice; it is still listed in the `Endpoints` (callers leave out what they do not want published).

use std::collections::BTreeMap;
use std::net::IpAddr;

use capi_lb_api::constants::{
    ENDPOINTSLICE_MANAGED_BY_VALUE, LABEL_ENDPOINTSLICE_MANAGED_BY, LABEL_SERVICE_NAME,
    LABEL_SKIP_MIRROR,
};
use k8s_openapi::api::core::v1::{EndpointAddress, EndpointSubset, Endpoints, ObjectReference};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// What a Service's endpoints are: everything [`build`] needs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServiceEndpoints {
    /// Namespace of the Service, and of every object built.
    pub namespace: String,
    /// Name of the Service the endpoints belong to: the `Endpoints`' name and the slices' prefix.
    pub service_name: String,
    /// Labels on every object built (the slices and the `Endpoints` add their own to them).
    pub labels: BTreeMap<String, String>,
    /// Owner references of every object built; none leaves `ownerReferences` unset.
    pub owner_references: Vec<OwnerReference>,
    /// The ports every address serves, in order.
    pub ports: Vec<Port>,
    /// The addresses behind the Service, in order.
    pub addresses: Vec<Address>,
}

/// One port of the endpoints (the port traffic is sent to, i.e. the Service's target port).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    /// Name, matching the Service port's (may be unset for a single-port Service).
    pub name: Option<String>,
    /// Port number.
    pub port: i32,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
}

/// One address behind the Service.
#[derive(Clone, Debug, PartialEq)]
pub struct Address {
    /// The IP address, as it is to be published.
    pub ip: String,
    /// Ready, not ready or draining.
    pub state: State,
    /// What the address is (`targetRef` of the endpoint and of the `Endpoints` address).
    pub target: Option<ObjectReference>,
}

/// The state of one address, as the endpoint's conditions say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Takes traffic: `ready` and `serving` in the slice, under `addresses` in the `Endpoints`.
    Ready,
    /// Takes no traffic: neither `ready` nor `serving`, under `notReadyAddresses`.
    NotReady,
    /// Draining: `terminating` and still `serving` but not `ready`, so proxies send it no new
    /// connections while others are ready (and fall back to it only when none is); under
    /// `notReadyAddresses`.
    Draining,
}

impl State {
    /// Ready when `ready`, otherwise not ready.
    pub fn ready_if(ready: bool) -> Self {
        if ready { State::Ready } else { State::NotReady }
    }

    /// The endpoint conditions of this state.
    fn conditions(self) -> EndpointConditions {
        EndpointConditions {
            ready: Some(self == State::Ready),
            serving: Some(self != State::NotReady),
            terminating: Some(self == State::Draining),
        }
    }
}

/// The objects [`build`] makes.
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointObjects {
    /// One EndpointSlice per IP family that has addresses: IPv4 first, then IPv6.
    pub slices: Vec<EndpointSlice>,
    /// The legacy v1 Endpoints.
    pub endpoints: Endpoints,
}

/// An IP family: one EndpointSlice each.
struct Family {
    /// The slice's `addressType`.
    address_type: &'static str,
    /// The slice's name is the Service's with `-<suffix>`.
    suffix: &'static str,
    /// Whether an address is of this family.
    contains: fn(&IpAddr) -> bool,
}

/// The IP families, in the order of the slices.
const FAMILIES: [Family; 2] = [
    Family {
        address_type: "IPv4",
        suffix: "ipv4",
        contains: IpAddr::is_ipv4,
    },
    Family {
        address_type: "IPv6",
        suffix: "ipv6",
        contains: IpAddr::is_ipv6,
    },
];

/// The EndpointSlices and the `Endpoints` of `description`.
pub fn build(description: &ServiceEndpoints) -> EndpointObjects {
    EndpointObjects {
        slices: slices(description),
        endpoints: endpoints(description),
    }
}

fn metadata(
    description: &ServiceEndpoints,
    name: String,
    extra_labels: &[(&str, &str)],
) -> ObjectMeta {
    let mut labels = description.labels.clone();
    for (key, value) in extra_labels {
        labels.insert((*key).to_string(), (*value).to_string());
    }
    ObjectMeta {
        name: Some(name),
        namespace: Some(description.namespace.clone()),
        labels: Some(labels),
        owner_references: (!description.owner_references.is_empty())
            .then(|| description.owner_references.clone()),
        ..Default::default()
    }
}

fn slices(description: &ServiceEndpoints) -> Vec<EndpointSlice> {
    let service = description.service_name.as_str();
    let ports: Vec<k8s_openapi::api::discovery::v1::EndpointPort> = description
        .ports
        .iter()
        .map(|p| k8s_openapi::api::discovery::v1::EndpointPort {
            name: p.name.clone(),
            port: Some(p.port),
            protocol: Some(p.protocol.clone()),
            app_protocol: None,
        })
        .collect();
    FAMILIES
        .into_iter()
        .filter_map(|family| {
            let endpoints: Vec<Endpoint> = description
                .addresses
                .iter()
                .filter(|a| {
                    a.ip.parse::<IpAddr>()
                        .is_ok_and(|ip| (family.contains)(&ip))
                })
                .map(|a| Endpoint {
                    addresses: vec![a.ip.clone()],
                    conditions: Some(a.state.conditions()),
                    target_ref: a.target.clone(),
                    ..Default::default()
                })
                .collect();
            (!endpoints.is_empty()).then(|| EndpointSlice {
                metadata: metadata(
                    description,
                    format!("{service}-{}", family.suffix),
                    &[
                        (LABEL_SERVICE_NAME, service),
                        (
                            LABEL_ENDPOINTSLICE_MANAGED_BY,
                            ENDPOINTSLICE_MANAGED_BY_VALUE,
                        ),
                    ],
                ),
                address_type: family.address_type.into(),
                endpoints,
                ports: Some(ports.clone()),
            })
        })
        .collect()
}

fn endpoints(description: &ServiceEndpoints) -> Endpoints {
    let (ready, not_ready): (Vec<&Address>, Vec<&Address>) = description
        .addresses
        .iter()
        .partition(|a| a.state == State::Ready);
    let listed = |addresses: Vec<&Address>| {
        (!addresses.is_empty()).then(|| {
            addresses
                .into_iter()
                .map(|a| EndpointAddress {
                    ip: a.ip.clone(),
                    target_ref: a.target.clone(),
                    ..Default::default()
                })
                .collect::<Vec<_>>()
        })
    };
    let subsets = if description.addresses.is_empty() {
        Vec::new()
    } else {
        vec![EndpointSubset {
            addresses: listed(ready),
            not_ready_addresses: listed(not_ready),
            ports: Some(
                description
                    .ports
                    .iter()
                    .map(|p| k8s_openapi::api::core::v1::EndpointPort {
                        name: p.name.clone(),
                        port: p.port,
                        protocol: Some(p.protocol.clone()),
                        app_protocol: None,
                    })
                    .collect(),
            ),
        }]
    };
    Endpoints {
        metadata: metadata(
            description,
            description.service_name.clone(),
            &[(LABEL_SKIP_MIRROR, "true")],
        ),
        subsets: Some(subsets),
    }
}

/// True when `observed` carries every label and owner reference of `desired` (others may add more).
pub fn metadata_contains(observed: &ObjectMeta, desired: &ObjectMeta) -> bool {
    let labels = observed.labels.clone().unwrap_or_default();
    let owners = observed.owner_references.clone().unwrap_or_default();
    desired
        .labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
        && desired.owner_references.iter().flatten().all(|d| {
            owners
                .iter()
                .any(|o| o.uid == d.uid && o.controller == d.controller)
        })
}

/// An endpoint's `ready`, `serving` and `terminating`, with the API's meaning of unset ones (ready
/// unless said otherwise, serving as ready, not terminating).
type Conditions = (bool, bool, bool);

fn conditions(conditions: Option<&EndpointConditions>) -> Conditions {
    let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
    (
        ready,
        conditions.and_then(|c| c.serving).unwrap_or(ready),
        conditions.and_then(|c| c.terminating).unwrap_or(false),
    )
}

/// True when the observed EndpointSlice already is what `desired` asks for: its labels and owner
/// references, address type, endpoints (addresses, conditions and target, in order) and ports (in
/// any order, with the API's defaults).
pub fn slice_matches(observed: &EndpointSlice, desired: &EndpointSlice) -> bool {
    let endpoints =
        |slice: &EndpointSlice| -> Vec<(Vec<String>, Conditions, Option<ObjectReference>)> {
            slice
                .endpoints
                .iter()
                .map(|e| {
                    (
                        e.addresses.clone(),
                        conditions(e.conditions.as_ref()),
                        e.target_ref.clone(),
                    )
                })
                .collect()
        };
    let ports = |slice: &EndpointSlice| -> Vec<(String, i32, String)> {
        let mut ports: Vec<_> = slice
            .ports
            .iter()
            .flatten()
            .map(|p| {
                (
                    p.name.clone().unwrap_or_default(),
                    p.port.unwrap_or_default(),
                    p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                )
            })
            .collect();
        ports.sort();
        ports
    };
    metadata_contains(&observed.metadata, &desired.metadata)
        && observed.address_type == desired.address_type
        && endpoints(observed) == endpoints(desired)
        && ports(observed) == ports(desired)
}

/// True when the observed `Endpoints` already are what `desired` asks for: labels, owner references
/// and subsets (an empty subset list reads back from the API as none).
pub fn endpoints_match(observed: &Endpoints, desired: &Endpoints) -> bool {
    metadata_contains(&observed.metadata, &desired.metadata)
        && observed.subsets.as_deref().unwrap_or_default()
            == desired.subsets.as_deref().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: "Service".into(),
            name: "web".into(),
            uid: "uid-1".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    fn target(name: &str) -> ObjectReference {
        ObjectReference {
            name: Some(name.into()),
            ..Default::default()
        }
    }

    fn address(ip: &str, ready: bool) -> Address {
        Address {
            ip: ip.into(),
            state: State::ready_if(ready),
            target: None,
        }
    }

    fn description(addresses: Vec<Address>) -> ServiceEndpoints {
        ServiceEndpoints {
            namespace: "ns".into(),
            service_name: "web".into(),
            labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
            owner_references: Vec::new(),
            ports: vec![
                Port {
                    name: Some("https".into()),
                    port: 443,
                    protocol: "TCP".into(),
                },
                Port {
                    name: Some("dns".into()),
                    port: 53,
                    protocol: "UDP".into(),
                },
            ],
            addresses,
        }
    }

    fn ips(slice: &EndpointSlice) -> Vec<&str> {
        slice
            .endpoints
            .iter()
            .flat_map(|e| e.addresses.iter().map(String::as_str))
            .collect()
    }

    fn subset_ips(addresses: &Option<Vec<EndpointAddress>>) -> Option<Vec<&str>> {
        addresses
            .as_ref()
            .map(|a| a.iter().map(|a| a.ip.as_str()).collect())
    }

    #[test]
    fn addresses_are_split_by_family_in_order_into_named_slices() {
        let built = build(&description(vec![
            address("2001:db8::1", true),
            address("203.0.113.1", true),
            address("2001:db8::2", true),
            address("203.0.113.2", true),
        ]));
        let names: Vec<_> = built
            .slices
            .iter()
            .map(|s| (s.metadata.name.as_deref(), s.address_type.as_str()))
            .collect();
        assert_eq!(
            names,
            [(Some("web-ipv4"), "IPv4"), (Some("web-ipv6"), "IPv6")]
        );
        assert_eq!(ips(&built.slices[0]), ["203.0.113.1", "203.0.113.2"]);
        assert_eq!(ips(&built.slices[1]), ["2001:db8::1", "2001:db8::2"]);
        for slice in &built.slices {
            assert_eq!(slice.metadata.namespace.as_deref(), Some("ns"));
            let ports: Vec<_> = slice
                .ports
                .iter()
                .flatten()
                .map(|p| (p.name.as_deref(), p.port, p.protocol.as_deref()))
                .collect();
            assert_eq!(
                ports,
                [
                    (Some("https"), Some(443), Some("TCP")),
                    (Some("dns"), Some(53), Some("UDP"))
                ]
            );
        }
        // The Endpoints keeps the given order across families.
        let subsets = built.endpoints.subsets.clone().unwrap_or_default();
        assert_eq!(subsets.len(), 1);
        assert_eq!(
            subset_ips(&subsets[0].addresses),
            Some(vec![
                "2001:db8::1",
                "203.0.113.1",
                "2001:db8::2",
                "203.0.113.2"
            ])
        );
        assert_eq!(subsets[0].not_ready_addresses, None);
    }

    #[test]
    fn a_single_family_has_a_single_slice() {
        let v6 = build(&description(vec![address("2001:db8::7", true)]));
        assert_eq!(v6.slices.len(), 1);
        assert_eq!(v6.slices[0].metadata.name.as_deref(), Some("web-ipv6"));
        assert_eq!(v6.slices[0].address_type, "IPv6");
        let v4 = build(&description(vec![address("198.51.100.9", true)]));
        assert_eq!(v4.slices.len(), 1);
        assert_eq!(v4.slices[0].metadata.name.as_deref(), Some("web-ipv4"));
    }

    #[test]
    fn labels_mark_slices_for_the_service_and_endpoints_as_not_mirrored() {
        let built = build(&description(vec![address("203.0.113.1", true)]));
        let slice_labels = built.slices[0].metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            slice_labels,
            BTreeMap::from([
                ("app".to_string(), "web".to_string()),
                (LABEL_SERVICE_NAME.to_string(), "web".to_string()),
                (
                    LABEL_ENDPOINTSLICE_MANAGED_BY.to_string(),
                    ENDPOINTSLICE_MANAGED_BY_VALUE.to_string()
                ),
            ])
        );
        let endpoints_labels = built.endpoints.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            endpoints_labels,
            BTreeMap::from([
                ("app".to_string(), "web".to_string()),
                (LABEL_SKIP_MIRROR.to_string(), "true".to_string()),
            ])
        );
        assert_eq!(built.endpoints.metadata.name.as_deref(), Some("web"));
        assert_eq!(built.endpoints.metadata.namespace.as_deref(), Some("ns"));
    }

    #[test]
    fn a_draining_address_is_serving_and_terminating_but_not_ready() {
        let mut described = description(vec![address("203.0.113.1", true)]);
        described.addresses.push(Address {
            ip: "203.0.113.2".into(),
            state: State::Draining,
            target: None,
        });
        let built = build(&described);
        let conditions: Vec<_> = built.slices[0]
            .endpoints
            .iter()
            .map(|e| e.conditions.clone())
            .collect();
        assert_eq!(
            conditions,
            [
                Some(EndpointConditions {
                    ready: Some(true),
                    serving: Some(true),
                    terminating: Some(false),
                }),
                Some(EndpointConditions {
                    ready: Some(false),
                    serving: Some(true),
                    terminating: Some(true),
                })
            ]
        );
        let subsets = built.endpoints.subsets.clone().unwrap_or_default();
        assert_eq!(
            subset_ips(&subsets[0].not_ready_addresses),
            Some(vec!["203.0.113.2"])
        );
    }

    #[test]
    fn readiness_sets_conditions_and_sorts_endpoints_addresses() {
        let built = build(&description(vec![
            address("203.0.113.1", true),
            address("203.0.113.2", false),
            address("203.0.113.3", true),
        ]));
        let conditions: Vec<_> = built.slices[0]
            .endpoints
            .iter()
            .map(|e| e.conditions.clone())
            .collect();
        let condition = |ready| {
            Some(EndpointConditions {
                ready: Some(ready),
                serving: Some(ready),
                terminating: Some(false),
            })
        };
        assert_eq!(
            conditions,
            [condition(true), condition(false), condition(true)]
        );
        let subsets = built.endpoints.subsets.clone().unwrap_or_default();
        assert_eq!(
            subset_ips(&subsets[0].addresses),
            Some(vec!["203.0.113.1", "203.0.113.3"])
        );
        assert_eq!(
            subset_ips(&subsets[0].not_ready_addresses),
            Some(vec!["203.0.113.2"])
        );

        // None ready: no `addresses` at all, everything is not ready.
        let built = build(&description(vec![
            address("203.0.113.1", false),
            address("2001:db8::1", false),
        ]));
        let subsets = built.endpoints.subsets.clone().unwrap_or_default();
        assert_eq!(subsets[0].addresses, None);
        assert_eq!(
            subset_ips(&subsets[0].not_ready_addresses),
            Some(vec!["203.0.113.1", "2001:db8::1"])
        );
        let ports: Vec<_> = subsets[0]
            .ports
            .iter()
            .flatten()
            .map(|p| (p.name.as_deref(), p.port, p.protocol.as_deref()))
            .collect();
        assert_eq!(
            ports,
            [
                (Some("https"), 443, Some("TCP")),
                (Some("dns"), 53, Some("UDP"))
            ]
        );
    }

    #[test]
    fn target_references_are_on_slice_endpoints_and_endpoints_addresses() {
        let mut with_target = address("203.0.113.1", true);
        with_target.target = Some(target("machine-a"));
        let built = build(&description(vec![
            with_target,
            address("203.0.113.2", true),
        ]));
        let slice_targets: Vec<_> = built.slices[0]
            .endpoints
            .iter()
            .map(|e| e.target_ref.clone())
            .collect();
        assert_eq!(slice_targets, [Some(target("machine-a")), None]);
        let subsets = built.endpoints.subsets.clone().unwrap_or_default();
        let endpoints_targets: Vec<_> = subsets[0]
            .addresses
            .iter()
            .flatten()
            .map(|a| a.target_ref.clone())
            .collect();
        assert_eq!(endpoints_targets, [Some(target("machine-a")), None]);
    }

    #[test]
    fn owner_references_are_on_every_object_or_unset() {
        let mut owned = description(vec![
            address("203.0.113.1", true),
            address("2001:db8::1", true),
        ]);
        owned.owner_references = vec![owner()];
        let built = build(&owned);
        assert_eq!(built.slices.len(), 2);
        for slice in &built.slices {
            assert_eq!(slice.metadata.owner_references, Some(vec![owner()]));
        }
        assert_eq!(
            built.endpoints.metadata.owner_references,
            Some(vec![owner()])
        );

        let built = build(&description(vec![address("203.0.113.1", true)]));
        assert_eq!(built.slices[0].metadata.owner_references, None);
        assert_eq!(built.endpoints.metadata.owner_references, None);
    }

    #[test]
    fn no_addresses_means_no_slices_and_an_endpoints_without_subsets() {
        let built = build(&description(Vec::new()));
        assert!(built.slices.is_empty());
        assert_eq!(built.endpoints.subsets, Some(Vec::new()));
        assert_eq!(built.endpoints.metadata.name.as_deref(), Some("web"));
    }

    #[test]
    fn an_address_that_is_not_an_ip_is_in_no_slice_but_in_the_endpoints() {
        let built = build(&description(vec![
            address("lb.example.com", true),
            address("203.0.113.1", true),
        ]));
        assert_eq!(built.slices.len(), 1);
        assert_eq!(ips(&built.slices[0]), ["203.0.113.1"]);
        let subsets = built.endpoints.subsets.clone().unwrap_or_default();
        assert_eq!(
            subset_ips(&subsets[0].addresses),
            Some(vec!["lb.example.com", "203.0.113.1"])
        );
    }

    #[test]
    fn addresses_are_published_as_written() {
        let built = build(&description(vec![address("2001:DB8::1", true)]));
        assert_eq!(ips(&built.slices[0]), ["2001:DB8::1"]);
    }

    #[test]
    fn what_was_built_matches_itself_and_not_a_changed_target_or_readiness() {
        let mut described = description(vec![address("203.0.113.1", true)]);
        described.owner_references = vec![owner()];
        let built = build(&described);
        let slice = &built.slices[0];
        assert!(slice_matches(slice, slice));
        // The API adds labels and owners of its own: still a match.
        let mut observed = slice.clone();
        observed
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("extra".into(), "x".into());
        assert!(slice_matches(&observed, slice));
        let mut retargeted = slice.clone();
        retargeted.endpoints[0].target_ref = Some(ObjectReference {
            name: Some("other".into()),
            ..Default::default()
        });
        assert!(!slice_matches(&retargeted, slice));
        let not_ready = build(&description(vec![address("203.0.113.1", false)]));
        assert!(!slice_matches(&not_ready.slices[0], slice));
        let mut draining = description(vec![address("203.0.113.1", false)]);
        draining.addresses[0].state = State::Draining;
        let draining = build(&draining);
        assert!(!slice_matches(&draining.slices[0], &not_ready.slices[0]));
        assert!(!slice_matches(&not_ready.slices[0], &draining.slices[0]));
        // Unset conditions mean ready and serving, not terminating.
        let mut unset = slice.clone();
        unset.endpoints[0].conditions = None;
        assert!(slice_matches(&unset, slice));
        let mut unowned = slice.clone();
        unowned.metadata.owner_references = None;
        assert!(!slice_matches(&unowned, slice));

        // An empty subset list reads back from the API as none.
        let empty = build(&description(Vec::new())).endpoints;
        let mut read_back = empty.clone();
        read_back.subsets = None;
        assert!(endpoints_match(&read_back, &empty));
        assert!(!endpoints_match(&read_back, &built.endpoints));
    }
}
