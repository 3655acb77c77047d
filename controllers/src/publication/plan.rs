//! The pure part of publication: which addresses can be published, what the `-ext` Service and its
//! EndpointSlices (and legacy Endpoints) should be, and whether an observed object already matches.
//! No I/O; [`super`] reads the world and writes the difference.

use std::collections::BTreeMap;
use std::net::IpAddr;

use capi_lb_api::LoadBalancer;
use capi_lb_api::constants::{
    ENDPOINTSLICE_MANAGED_BY_VALUE, LABEL_ENDPOINTSLICE_MANAGED_BY, LABEL_LB_NAME,
    LABEL_MANAGED_BY, LABEL_SKIP_MIRROR, MANAGED_BY_VALUE, MAX_ENDPOINTS_PER_SLICE,
};
use capi_lb_api::loadbalancer::{AddressType, LoadBalancerAddress};
use capi_lb_providers::endpoints::{self, ServiceEndpoints};
pub use capi_lb_providers::endpoints::{endpoints_match, slice_matches};
use k8s_openapi::api::core::v1::{Endpoints, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use crate::metadata::is_controlled_by;

/// Addresses sorted into what can be published.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Classified {
    /// IPv4 addresses, in provider order, without duplicates.
    pub ipv4: Vec<String>,
    /// IPv6 addresses, in provider order, without duplicates.
    pub ipv6: Vec<String>,
    /// DNS names.
    pub hostnames: Vec<String>,
    /// Addresses that cannot be published, with the reason (the address policy's built-in
    /// refusals: EndpointSlices reject loopback, link-local, unspecified and multicast addresses).
    pub skipped: Vec<String>,
}

/// Sort provider addresses into IPv4, IPv6, hostnames and unpublishable ones.
pub fn classify(addresses: &[LoadBalancerAddress]) -> Classified {
    let mut out = Classified::default();
    for a in addresses {
        match a.type_ {
            AddressType::Hostname => {
                if !out.hostnames.contains(&a.address) {
                    out.hostnames.push(a.address.clone());
                }
            }
            AddressType::Ip => match a.address.parse::<IpAddr>().map(|ip| ip.to_canonical()) {
                Err(_) => out
                    .skipped
                    .push(format!("{} (not an IP address)", a.address)),
                Ok(ip) => {
                    if let Some(reason) = crate::policy::builtin(ip) {
                        out.skipped.push(format!("{ip} ({reason})"));
                        continue;
                    }
                    let list = if ip.is_ipv4() {
                        &mut out.ipv4
                    } else {
                        &mut out.ipv6
                    };
                    let text = ip.to_string();
                    if !list.contains(&text) {
                        list.push(text);
                    }
                }
            },
        }
    }
    for list in [&mut out.ipv4, &mut out.ipv6] {
        if list.len() > MAX_ENDPOINTS_PER_SLICE {
            for ip in list.drain(MAX_ENDPOINTS_PER_SLICE..) {
                out.skipped.push(format!(
                    "{ip} (more than {MAX_ENDPOINTS_PER_SLICE} addresses)"
                ));
            }
        }
    }
    out
}

/// Who publishes: the owner of the published objects and how they are marked.
#[derive(Clone, Debug, PartialEq)]
pub struct Publisher {
    /// Namespace of the publisher and of everything published.
    pub namespace: String,
    /// `Kind name` of the publisher, for messages.
    pub describe: String,
    /// Controller owner reference put on the published Service.
    pub owner: OwnerReference,
    /// Labels put on every published object.
    pub labels: BTreeMap<String, String>,
    /// The label (one of `labels`) that finds this publisher's objects.
    pub selector: (String, String),
    /// What to do about a name conflict, appended to the message.
    pub conflict_hint: String,
    /// Labels that mark a foreign Service (and Endpoints) this publisher may take over (kube-dc's
    /// `-ext` publisher); `None` never adopts.
    pub adopt: Option<BTreeMap<String, String>>,
    /// Also maintain a legacy v1 Endpoints object.
    pub legacy_endpoints: bool,
}

/// One published port (`port == targetPort`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublishedPort {
    /// Port name (the source's; may be empty for a single-port Service).
    pub name: Option<String>,
    /// Port.
    pub port: i32,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
}

/// What to publish.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    /// Name of the published Service.
    pub service_name: String,
    /// Its ports.
    pub ports: Vec<PublishedPort>,
    /// Addresses to publish.
    pub addresses: Vec<LoadBalancerAddress>,
    /// Endpoints are marked ready (resolvable) only when true.
    pub ready: bool,
}

/// What publication should look like.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The Service to apply.
    pub service: Service,
    /// The EndpointSlices to apply (owner reference to the Service added at apply time).
    pub slices: Vec<EndpointSlice>,
    /// The legacy Endpoints to apply, when wanted and there are IPs (owner reference added at apply
    /// time).
    pub endpoints: Option<Endpoints>,
    /// Addresses that were left out, with reasons.
    pub skipped: Vec<String>,
    /// True when there is at least one published address (slices or an ExternalName).
    pub has_address: bool,
}

/// Labels on every object a LoadBalancer publishes.
pub fn managed_labels(lb_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY_VALUE.to_string()),
        (LABEL_LB_NAME.to_string(), lb_name.to_string()),
    ])
}

/// A controller owner reference to `owner`.
pub fn controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> Option<OwnerReference> {
    let mut r = owner.controller_owner_ref(&())?;
    r.block_owner_deletion = Some(true);
    Some(r)
}

/// The publisher for LoadBalancer `lb`.
pub fn lb_publisher(lb: &LoadBalancer) -> Option<Publisher> {
    let name = lb.name_any();
    Some(Publisher {
        namespace: lb.namespace().unwrap_or_default(),
        describe: format!("LoadBalancer {name}"),
        owner: controller_ref(lb)?,
        labels: managed_labels(&name),
        selector: (LABEL_LB_NAME.to_string(), name),
        conflict_hint: "Delete or rename it, or set spec.publication.suffix".into(),
        adopt: None,
        legacy_endpoints: false,
    })
}

/// What LoadBalancer `lb` publishes for `addresses`, or `None` when publication is disabled.
/// Endpoints are ready only when `ready`, i.e. once the load balancer is provisioned.
pub fn lb_desired(
    lb: &LoadBalancer,
    addresses: &[LoadBalancerAddress],
    ready: bool,
) -> Option<Desired> {
    Some(Desired {
        service_name: lb.published_service_name()?,
        ports: lb
            .spec
            .ports
            .iter()
            .map(|p| PublishedPort {
                name: Some(p.name.clone()),
                port: p.port,
                protocol: p.protocol.as_str().to_string(),
            })
            .collect(),
        addresses: addresses.to_vec(),
        ready,
    })
}

/// The publication plan of `desired` by `publisher`.
pub fn plan(publisher: &Publisher, desired: &Desired) -> Plan {
    let service_name = &desired.service_name;
    let classified = classify(&desired.addresses);
    let ports: Vec<ServicePort> = desired
        .ports
        .iter()
        .map(|p| ServicePort {
            name: p.name.clone(),
            port: p.port,
            target_port: Some(IntOrString::Int(p.port)),
            protocol: Some(p.protocol.clone()),
            ..Default::default()
        })
        .collect();
    let has_ips = !(classified.ipv4.is_empty() && classified.ipv6.is_empty());
    // A CNAME cannot be marked not-ready the way an endpoint can: until the load balancer is
    // provisioned, a hostname-only one is published as a headless Service without endpoints (DNS
    // answers nothing), and becomes the ExternalName once it is ready.
    let hostname = (!has_ips)
        .then(|| classified.hostnames.first().cloned())
        .flatten();
    let external_name = hostname.clone().filter(|_| desired.ready);
    let spec = match &external_name {
        Some(host) => ServiceSpec {
            type_: Some("ExternalName".into()),
            external_name: Some(host.clone()),
            ports: Some(ports),
            ..Default::default()
        },
        None => ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: Some("None".into()),
            ports: Some(ports),
            ..Default::default()
        },
    };
    let service = Service {
        metadata: ObjectMeta {
            name: Some(service_name.clone()),
            namespace: Some(publisher.namespace.clone()),
            labels: Some(publisher.labels.clone()),
            owner_references: Some(vec![publisher.owner.clone()]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    };
    // The IPv4 addresses, then the IPv6 ones: the slices are split by family anyway, and the legacy
    // Endpoints list them in this order. The slices carry no owner reference here: it is added at
    // apply time.
    let objects = endpoints::build(&ServiceEndpoints {
        namespace: publisher.namespace.clone(),
        service_name: service_name.clone(),
        labels: publisher.labels.clone(),
        owner_references: Vec::new(),
        ports: desired
            .ports
            .iter()
            .map(|p| endpoints::Port {
                name: p.name.clone(),
                port: p.port,
                protocol: p.protocol.clone(),
            })
            .collect(),
        addresses: classified
            .ipv4
            .iter()
            .chain(&classified.ipv6)
            .map(|ip| endpoints::Address {
                ip: ip.clone(),
                state: endpoints::State::ready_if(desired.ready),
                target: None,
            })
            .collect(),
    });
    let slices = objects.slices;
    let endpoints = (publisher.legacy_endpoints && has_ips).then_some(objects.endpoints);
    Plan {
        service,
        slices,
        endpoints,
        skipped: classified.skipped,
        has_address: has_ips || hostname.is_some(),
    }
}

/// How publication ended up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Published {
    /// Publication is disabled; nothing is published.
    Disabled,
    /// The Service exists; there is no publishable address yet.
    WaitingForAddress {
        /// Service name.
        service: String,
        /// Addresses that could not be published.
        skipped: Vec<String>,
    },
    /// The Service and its EndpointSlices (or the ExternalName) are up to date.
    Published {
        /// Service name.
        service: String,
        /// Addresses that could not be published.
        skipped: Vec<String>,
    },
    /// An object with our name exists and is not ours; nothing was touched.
    Conflict {
        /// What is in the way and what to do.
        message: String,
    },
}

/// Result of [`publish`]: the state and what was changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The resulting state.
    pub state: Published,
    /// Human-readable changes made (empty when nothing was written).
    pub changes: Vec<String>,
    /// Objects taken over from another publisher (adoption), for an Event.
    pub adopted: Vec<String>,
}

pub(super) fn ports_key(service: &Service) -> Vec<(String, i32, String, String)> {
    let mut ports: Vec<_> = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .map(|p| {
            let target = match &p.target_port {
                Some(IntOrString::Int(i)) => i.to_string(),
                Some(IntOrString::String(s)) => s.clone(),
                None => p.port.to_string(),
            };
            (
                p.name.clone().unwrap_or_default(),
                p.port,
                target,
                p.protocol.clone().unwrap_or_else(|| "TCP".into()),
            )
        })
        .collect();
    ports.sort();
    ports
}

pub(super) fn service_kind(service: &Service) -> &str {
    service
        .spec
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("ClusterIP")
}

/// True when `observed` already is what `desired` asks for (fields capi-lb manages only; the
/// apiserver's defaults are ignored).
pub fn service_matches(observed: &Service, desired: &Service) -> bool {
    let (Some(o), Some(d)) = (observed.spec.as_ref(), desired.spec.as_ref()) else {
        return false;
    };
    endpoints::metadata_contains(&observed.metadata, &desired.metadata)
        && service_kind(observed) == service_kind(desired)
        && (d.cluster_ip.is_none() || o.cluster_ip == d.cluster_ip)
        && o.external_name == d.external_name
        && ports_key(observed) == ports_key(desired)
}

pub(super) fn has_label(meta: &ObjectMeta, (key, value): &(String, String)) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(key))
        .is_some_and(|v| v == value)
}

/// A Service this publisher manages: its controller reference and its label.
pub(super) fn is_our_service(service: &Service, publisher: &Publisher) -> bool {
    is_controlled_by(service, &publisher.owner.uid)
        && has_label(&service.metadata, &publisher.selector)
}

/// A slice capi-lb manages for this publisher (managed-by label and the publisher's label).
pub(super) fn is_our_slice(slice: &EndpointSlice, publisher: &Publisher) -> bool {
    slice
        .labels()
        .get(LABEL_ENDPOINTSLICE_MANAGED_BY)
        .map(String::as_str)
        == Some(ENDPOINTSLICE_MANAGED_BY_VALUE)
        && has_label(&slice.metadata, &publisher.selector)
}

/// Legacy Endpoints capi-lb manages for this publisher (skip-mirror and the publisher's label).
pub(super) fn is_our_endpoints(endpoints: &Endpoints, publisher: &Publisher) -> bool {
    endpoints
        .labels()
        .get(LABEL_SKIP_MIRROR)
        .map(String::as_str)
        == Some("true")
        && has_label(&endpoints.metadata, &publisher.selector)
}

/// A foreign object this publisher may take over.
pub(super) fn adoptable(meta: &ObjectMeta, publisher: &Publisher) -> bool {
    publisher.adopt.as_ref().is_some_and(|wanted| {
        let labels = meta.labels.clone().unwrap_or_default();
        wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
    })
}

/// `203.0.113.1, 203.0.113.2`, with ` (not ready)` after endpoints that are not ready.
pub(super) fn addresses_of(slice: &EndpointSlice) -> String {
    let ips: Vec<String> = slice
        .endpoints
        .iter()
        .flat_map(|e| {
            let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
            e.addresses.iter().map(move |a| {
                if ready {
                    a.clone()
                } else {
                    format!("{a} (not ready)")
                }
            })
        })
        .collect();
    ips.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_lb_api::constants::{LABEL_ENDPOINTSLICE_MANAGED_BY, LABEL_SERVICE_NAME};
    use capi_lb_api::loadbalancer::{InfrastructureRef, LoadBalancerSpec};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn lb() -> LoadBalancer {
        let mut lb = LoadBalancer::new(
            "cp",
            LoadBalancerSpec::with_infrastructure(InfrastructureRef {
                api_group: "infrastructure.cluster.x-k8s.io".into(),
                kind: "InMemoryLoadBalancer".into(),
                name: "cp".into(),
            }),
        );
        lb.metadata.namespace = Some("default".into());
        lb.metadata.uid = Some("uid-cp".into());
        lb
    }

    fn lb_plan(lb: &LoadBalancer, addresses: &[LoadBalancerAddress], ready: bool) -> Option<Plan> {
        let desired = lb_desired(lb, addresses, ready)?;
        Some(plan(&lb_publisher(lb).unwrap(), &desired))
    }

    #[test]
    fn classifies_families_and_refuses_unpublishable_addresses() {
        let addresses = [
            LoadBalancerAddress::ip("203.0.113.1"),
            LoadBalancerAddress::ip("2001:db8::1"),
            LoadBalancerAddress::ip("203.0.113.1"),
            LoadBalancerAddress::ip("127.0.0.1"),
            LoadBalancerAddress::ip("169.254.1.1"),
            LoadBalancerAddress::ip("fe80::1"),
            LoadBalancerAddress::ip("::1"),
            LoadBalancerAddress::ip("0.0.0.0"),
            LoadBalancerAddress::hostname("lb.example.com"),
        ];
        let c = classify(&addresses);
        assert_eq!(c.ipv4, vec!["203.0.113.1"]);
        assert_eq!(c.ipv6, vec!["2001:db8::1"]);
        assert_eq!(c.hostnames, vec!["lb.example.com"]);
        assert_eq!(c.skipped.len(), 5, "{:?}", c.skipped);
    }

    #[test]
    fn plans_a_headless_service_and_one_slice_per_family() {
        let p = lb_plan(
            &lb(),
            &[
                LoadBalancerAddress::ip("203.0.113.1"),
                LoadBalancerAddress::ip("2001:db8::1"),
            ],
            true,
        )
        .unwrap();
        let spec = p.service.spec.as_ref().unwrap();
        assert_eq!(p.service.metadata.name.as_deref(), Some("cp-ext"));
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert!(spec.selector.is_none(), "selectorless");
        let port = &spec.ports.as_ref().unwrap()[0];
        assert_eq!(port.target_port, Some(IntOrString::Int(port.port)));
        let owner = &p.service.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("LoadBalancer", Some(true))
        );
        let names: Vec<_> = p.slices.iter().map(|s| s.name_any()).collect();
        assert_eq!(names, ["cp-ext-ipv4", "cp-ext-ipv6"]);
        let labels = p.slices[0].labels();
        assert_eq!(labels[LABEL_SERVICE_NAME], "cp-ext");
        assert_eq!(
            labels[LABEL_ENDPOINTSLICE_MANAGED_BY],
            "capi-lb.loadbalancer.cluster.x-k8s.io"
        );
        assert!(!labels[LABEL_ENDPOINTSLICE_MANAGED_BY].contains('/'));
        assert_eq!(p.slices[1].address_type, "IPv6");
        assert!(p.has_address);
    }

    #[test]
    fn plans_an_external_name_for_a_hostname_only_provider() {
        let p = lb_plan(
            &lb(),
            &[LoadBalancerAddress::hostname("lb.example.com")],
            true,
        )
        .unwrap();
        let spec = p.service.spec.as_ref().unwrap();
        assert_eq!(spec.type_.as_deref(), Some("ExternalName"));
        assert_eq!(spec.external_name.as_deref(), Some("lb.example.com"));
        assert!(spec.cluster_ip.is_none());
        assert!(p.slices.is_empty());
        // Not provisioned yet: no CNAME (it cannot be marked not-ready), a headless Service with
        // no endpoints, so DNS answers nothing until the load balancer works.
        let p = lb_plan(
            &lb(),
            &[LoadBalancerAddress::hostname("lb.example.com")],
            false,
        )
        .unwrap();
        let spec = p.service.spec.as_ref().unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert!(spec.external_name.is_none());
        assert!(p.slices.is_empty() && p.has_address);
        // IPs win over a hostname.
        let p = lb_plan(
            &lb(),
            &[
                LoadBalancerAddress::hostname("lb.example.com"),
                LoadBalancerAddress::ip("203.0.113.9"),
            ],
            true,
        )
        .unwrap();
        assert_eq!(p.service.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    }

    #[test]
    fn no_plan_when_publication_is_disabled_and_no_slices_without_addresses() {
        let mut disabled = lb();
        disabled.spec.publication.enabled = false;
        assert!(lb_plan(&disabled, &[LoadBalancerAddress::ip("203.0.113.1")], true).is_none());
        let p = lb_plan(&lb(), &[], true).unwrap();
        assert!(p.slices.is_empty() && !p.has_address);
    }

    #[test]
    fn matching_ignores_apiserver_defaults_but_sees_real_changes() {
        let p = lb_plan(&lb(), &[LoadBalancerAddress::ip("203.0.113.1")], true).unwrap();
        let mut observed = p.service.clone();
        let spec = observed.spec.as_mut().unwrap();
        spec.session_affinity = Some("None".into());
        spec.ip_families = Some(vec!["IPv4".into()]);
        observed
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("extra".into(), "x".into());
        assert!(service_matches(&observed, &p.service));
        observed.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 443;
        assert!(!service_matches(&observed, &p.service));

        let mut slice = p.slices[0].clone();
        assert!(slice_matches(&slice, &p.slices[0]));
        let not_ready = lb_plan(&lb(), &[LoadBalancerAddress::ip("203.0.113.1")], false).unwrap();
        assert!(
            !slice_matches(&not_ready.slices[0], &p.slices[0]),
            "readiness is part of the slice"
        );
        slice.endpoints[0].addresses = vec!["203.0.113.2".into()];
        assert!(!slice_matches(&slice, &p.slices[0]));
    }
}
