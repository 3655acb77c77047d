//! Publication of load balancer addresses under a stable DNS name. One implementation serves both
//! publishers: a `LoadBalancer` (its `<name><suffix>` Service) and a Service of `type: LoadBalancer`
//! (its `<svc><suffix>` Service, see `crate::services`).
//!
//! For a [`Publisher`] (who owns the objects and how they are labelled) and a [`Desired`] publication
//! (Service name, ports, addresses, readiness), capi-lb maintains a selectorless headless Service
//! (`port == targetPort`) with a controller owner reference to the publisher, and one
//! `discovery.k8s.io/v1` EndpointSlice per IP family (`<service>-ipv4`, `<service>-ipv6`) listing every
//! address of that family, owned by the Service. Cluster DNS then answers
//! `<service>.<namespace>.svc.<cluster-domain>` with those addresses, however often they change. When
//! there is only a hostname, the Service is an ExternalName Service (a CNAME) instead, once the load
//! balancer is ready (a CNAME cannot be marked not-ready; until then the Service is headless with no
//! endpoints, so DNS answers nothing that does not work yet). Optionally a
//! legacy v1 Endpoints object mirrors the slices for old consumers (labelled so the mirroring
//! controller does not copy it back into slices).
//!
//! The plan ([`plan`]) is pure. [`publish`] applies it: it never touches an object it does not own
//! (a Service without the publisher's controller reference and label, a slice or Endpoints without
//! our labels) unless the publisher may adopt it, writes only when the observed object differs from
//! the plan, updates slices in place, and removes what is no longer planned (a family that
//! disappeared, the Service of an old suffix, everything when publication stops).

use std::collections::BTreeMap;
use std::net::IpAddr;

use capi_lb_api::LoadBalancer;
use capi_lb_api::constants::{
    ANNOTATION_LEGACY_ENDPOINTS, ENDPOINTSLICE_MANAGED_BY_VALUE, FIELD_MANAGER,
    LABEL_ENDPOINTSLICE_MANAGED_BY, LABEL_LB_NAME, LABEL_MANAGED_BY, LABEL_SERVICE_NAME,
    LABEL_SKIP_MIRROR, MANAGED_BY_VALUE, MAX_ENDPOINTS_PER_SLICE,
};
use capi_lb_api::loadbalancer::{AddressType, LoadBalancerAddress};
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointSubset, Endpoints, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::error::{Result, is_not_found, kube_err};
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
    /// Addresses that cannot be published, with the reason (EndpointSlices reject loopback,
    /// link-local, unspecified and multicast addresses).
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
            AddressType::Ip => match a.address.parse::<IpAddr>() {
                Err(_) => out
                    .skipped
                    .push(format!("{} (not an IP address)", a.address)),
                Ok(ip) => {
                    if let Some(reason) = unpublishable(ip) {
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

fn unpublishable(ip: IpAddr) -> Option<&'static str> {
    if ip.is_loopback() {
        return Some("loopback");
    }
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_multicast() {
        return Some("multicast");
    }
    match ip {
        IpAddr::V4(v4) if v4.is_link_local() => Some("link-local"),
        IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80 => Some("link-local"),
        _ => None,
    }
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
    let namespace = Some(publisher.namespace.clone());
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
            namespace: namespace.clone(),
            labels: Some(publisher.labels.clone()),
            owner_references: Some(vec![publisher.owner.clone()]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    };
    let mut slice_labels = publisher.labels.clone();
    slice_labels.insert(LABEL_SERVICE_NAME.into(), service_name.clone());
    slice_labels.insert(
        LABEL_ENDPOINTSLICE_MANAGED_BY.into(),
        ENDPOINTSLICE_MANAGED_BY_VALUE.into(),
    );
    let slice_ports: Vec<EndpointPort> = desired
        .ports
        .iter()
        .map(|p| EndpointPort {
            name: p.name.clone(),
            port: Some(p.port),
            protocol: Some(p.protocol.clone()),
            app_protocol: None,
        })
        .collect();
    let ready = desired.ready;
    let slices = [
        ("IPv4", "ipv4", &classified.ipv4),
        ("IPv6", "ipv6", &classified.ipv6),
    ]
    .into_iter()
    .filter(|(_, _, ips)| !ips.is_empty())
    .map(|(address_type, suffix, ips)| EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!("{service_name}-{suffix}")),
            namespace: namespace.clone(),
            labels: Some(slice_labels.clone()),
            ..Default::default()
        },
        address_type: address_type.into(),
        endpoints: ips
            .iter()
            .map(|ip| Endpoint {
                addresses: vec![ip.clone()],
                conditions: Some(EndpointConditions {
                    ready: Some(ready),
                    serving: Some(ready),
                    terminating: Some(false),
                }),
                ..Default::default()
            })
            .collect(),
        ports: Some(slice_ports.clone()),
    })
    .collect();
    let endpoints = (publisher.legacy_endpoints && has_ips).then(|| {
        let mut labels = publisher.labels.clone();
        labels.insert(LABEL_SKIP_MIRROR.into(), "true".into());
        let addresses: Vec<EndpointAddress> = classified
            .ipv4
            .iter()
            .chain(&classified.ipv6)
            .map(|ip| EndpointAddress {
                ip: ip.clone(),
                ..Default::default()
            })
            .collect();
        let (ready_addresses, not_ready) = if ready {
            (Some(addresses), None)
        } else {
            (None, Some(addresses))
        };
        Endpoints {
            metadata: ObjectMeta {
                name: Some(service_name.clone()),
                namespace: namespace.clone(),
                labels: Some(labels),
                ..Default::default()
            },
            subsets: Some(vec![EndpointSubset {
                addresses: ready_addresses,
                not_ready_addresses: not_ready,
                ports: Some(
                    desired
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
            }]),
        }
    });
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

/// Replace the ports of our Service `existing` with those of `desired` (a JSON merge patch replaces
/// a list whole), guarded by the resourceVersion `existing` was read at. Returns the Service.
async fn replace_ports(
    services: &Api<Service>,
    existing: &Service,
    desired: &Service,
    describe: &str,
) -> Result<Service> {
    let ports = desired.spec.as_ref().and_then(|s| s.ports.clone());
    let patch = json!({
        "metadata": {"resourceVersion": existing.resource_version()},
        "spec": {"ports": ports},
    });
    services
        .patch(
            &existing.name_any(),
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..Default::default()
            },
            &Patch::Merge(&patch),
        )
        .await
        .map_err(kube_err("replace the ports of", describe.to_string()))
}

fn ports_key(service: &Service) -> Vec<(String, i32, String, String)> {
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

fn labels_contain(observed: &ObjectMeta, desired: &ObjectMeta) -> bool {
    let observed = observed.labels.clone().unwrap_or_default();
    desired
        .labels
        .iter()
        .flatten()
        .all(|(k, v)| observed.get(k) == Some(v))
}

fn owner_refs_contain(observed: &ObjectMeta, desired: &ObjectMeta) -> bool {
    let observed = observed.owner_references.clone().unwrap_or_default();
    desired.owner_references.iter().flatten().all(|d| {
        observed
            .iter()
            .any(|o| o.uid == d.uid && o.controller == d.controller)
    })
}

fn service_kind(service: &Service) -> &str {
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
    labels_contain(&observed.metadata, &desired.metadata)
        && owner_refs_contain(&observed.metadata, &desired.metadata)
        && service_kind(observed) == service_kind(desired)
        && (d.cluster_ip.is_none() || o.cluster_ip == d.cluster_ip)
        && o.external_name == d.external_name
        && ports_key(observed) == ports_key(desired)
}

fn endpoints_key(slice: &EndpointSlice) -> Vec<(Vec<String>, bool)> {
    slice
        .endpoints
        .iter()
        .map(|e| {
            (
                e.addresses.clone(),
                e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true),
            )
        })
        .collect()
}

fn slice_ports_key(slice: &EndpointSlice) -> Vec<(String, i32, String)> {
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
}

/// True when `observed` already is what `desired` asks for.
pub fn slice_matches(observed: &EndpointSlice, desired: &EndpointSlice) -> bool {
    labels_contain(&observed.metadata, &desired.metadata)
        && owner_refs_contain(&observed.metadata, &desired.metadata)
        && observed.address_type == desired.address_type
        && endpoints_key(observed) == endpoints_key(desired)
        && slice_ports_key(observed) == slice_ports_key(desired)
}

fn has_label(meta: &ObjectMeta, (key, value): &(String, String)) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(key))
        .is_some_and(|v| v == value)
}

/// A Service this publisher manages: its controller reference and its label.
fn is_our_service(service: &Service, publisher: &Publisher) -> bool {
    is_controlled_by(service, &publisher.owner.uid)
        && has_label(&service.metadata, &publisher.selector)
}

/// A slice capi-lb manages for this publisher (managed-by label and the publisher's label).
fn is_our_slice(slice: &EndpointSlice, publisher: &Publisher) -> bool {
    slice
        .labels()
        .get(LABEL_ENDPOINTSLICE_MANAGED_BY)
        .map(String::as_str)
        == Some(ENDPOINTSLICE_MANAGED_BY_VALUE)
        && has_label(&slice.metadata, &publisher.selector)
}

/// Legacy Endpoints capi-lb manages for this publisher (skip-mirror and the publisher's label).
fn is_our_endpoints(endpoints: &Endpoints, publisher: &Publisher) -> bool {
    endpoints
        .labels()
        .get(LABEL_SKIP_MIRROR)
        .map(String::as_str)
        == Some("true")
        && has_label(&endpoints.metadata, &publisher.selector)
}

/// A foreign object this publisher may take over.
fn adoptable(meta: &ObjectMeta, publisher: &Publisher) -> bool {
    publisher.adopt.as_ref().is_some_and(|wanted| {
        let labels = meta.labels.clone().unwrap_or_default();
        wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
    })
}

/// `203.0.113.1, 203.0.113.2`, with ` (not ready)` after endpoints that are not ready.
fn addresses_of(slice: &EndpointSlice) -> String {
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

async fn delete_exact<K>(api: &Api<K>, obj: &K, what: &str) -> Result<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: obj.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&obj.name_any(), &params).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(kube_err("delete", what.to_string())(e)),
    }
}

/// The EndpointSlices labelled as belonging to Service `service`.
async fn slices_of(slices: &Api<EndpointSlice>, service: &str) -> Result<Vec<EndpointSlice>> {
    Ok(slices
        .list(&ListParams::default().labels(&format!("{LABEL_SERVICE_NAME}={service}")))
        .await
        .map_err(kube_err("list EndpointSlices of", service.to_string()))?
        .items)
}

/// Delete the slices in `listed` that this publisher manages, except those named in `keep`.
async fn prune_slices(
    slices: &Api<EndpointSlice>,
    listed: &[EndpointSlice],
    publisher: &Publisher,
    keep: &[String],
    changes: &mut Vec<String>,
) -> Result<()> {
    for slice in listed {
        let name = slice.name_any();
        if is_our_slice(slice, publisher) && !keep.contains(&name) {
            delete_exact(slices, slice, &format!("EndpointSlice {name}")).await?;
            changes.push(format!("removed EndpointSlice {name}"));
        }
    }
    Ok(())
}

/// Delete our legacy Endpoints named `name`, if any.
async fn prune_endpoints(
    client: &kube::Client,
    publisher: &Publisher,
    name: &str,
    changes: &mut Vec<String>,
) -> Result<()> {
    let api: Api<Endpoints> = Api::namespaced(client.clone(), &publisher.namespace);
    let found = api.get_opt(name).await.map_err(kube_err(
        "get",
        format!("Endpoints {}/{name}", publisher.namespace),
    ))?;
    if let Some(endpoints) = found
        && is_our_endpoints(&endpoints, publisher)
    {
        delete_exact(&api, &endpoints, &format!("Endpoints {name}")).await?;
        changes.push(format!("removed Endpoints {name}"));
    }
    Ok(())
}

/// Remove everything `publisher` published.
pub async fn withdraw(client: &kube::Client, publisher: &Publisher) -> Result<Vec<String>> {
    Ok(withdraw_except(client, publisher, None).await?.0)
}

/// Remove everything `publisher` published except the Service named `keep`, which is returned when
/// it exists and is ours (so the caller does not need to read it again).
async fn withdraw_except(
    client: &kube::Client,
    publisher: &Publisher,
    keep: Option<&str>,
) -> Result<(Vec<String>, Option<Service>)> {
    let namespace = &publisher.namespace;
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let mut changes = Vec::new();
    let mut kept = None;
    let (key, value) = &publisher.selector;
    let listed = services
        .list(&ListParams::default().labels(&format!("{key}={value}")))
        .await
        .map_err(kube_err("list Services of", publisher.describe.clone()))?;
    for service in listed.items {
        let name = service.name_any();
        if !is_our_service(&service, publisher) {
            continue;
        }
        if Some(name.as_str()) == keep {
            kept = Some(service);
            continue;
        }
        let listed_slices = slices_of(&slices, &name).await?;
        prune_slices(&slices, &listed_slices, publisher, &[], &mut changes).await?;
        if service
            .annotations()
            .contains_key(ANNOTATION_LEGACY_ENDPOINTS)
        {
            prune_endpoints(client, publisher, &name, &mut changes).await?;
        }
        delete_exact(&services, &service, &format!("Service {namespace}/{name}")).await?;
        changes.push(format!("removed Service {name}"));
    }
    Ok((changes, kept))
}

/// Take a foreign object over: drop the labels that marked it as the other publisher's (so that
/// publisher, if still running, sees it as not its own), keeping everything else.
async fn strip_adopt_labels<K>(api: &Api<K>, obj: &K, publisher: &Publisher) -> Result<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let labels: serde_json::Map<String, serde_json::Value> = publisher
        .adopt
        .iter()
        .flatten()
        .map(|(k, _)| (k.clone(), serde_json::Value::Null))
        .collect();
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": labels}})),
    )
    .await
    .map_err(kube_err("adopt", obj.name_any()))
}

/// Bring what `publisher` publishes in line with `desired` (`None`: publish nothing).
pub async fn publish(
    client: &kube::Client,
    publisher: &Publisher,
    desired: Option<&Desired>,
) -> Result<Report> {
    let namespace = &publisher.namespace;
    let plan = desired.map(|d| plan(publisher, d));
    let keep = desired.map(|d| d.service_name.clone());
    let (mut changes, ours) = withdraw_except(client, publisher, keep.as_deref()).await?;
    let mut adopted = Vec::new();
    let Some(plan) = plan else {
        return Ok(Report {
            state: Published::Disabled,
            changes,
            adopted,
        });
    };
    let service_name = keep.unwrap_or_default();
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let apply = PatchParams::apply(FIELD_MANAGER).force();

    // The Service: ours was in the list; otherwise look for one someone else made.
    let observed = match ours {
        Some(service) => Some(service),
        None => services.get_opt(&service_name).await.map_err(kube_err(
            "get",
            format!("Service {namespace}/{service_name}"),
        ))?,
    };
    let conflict = |what: String| Report {
        state: Published::Conflict {
            message: format!(
                "{what} already exists and is not managed by capi-lb for {}; it was left untouched. {}",
                publisher.describe, publisher.conflict_hint
            ),
        },
        changes: Vec::new(),
        adopted: Vec::new(),
    };
    let mut adopting = false;
    let mut observed = observed;
    let had_legacy = observed
        .as_ref()
        .is_some_and(|s| s.annotations().contains_key(ANNOTATION_LEGACY_ENDPOINTS));
    if let Some(existing) = &observed
        && !is_our_service(existing, publisher)
    {
        if !adoptable(&existing.metadata, publisher) {
            let mut report = conflict(format!("Service {namespace}/{service_name}"));
            report.changes = changes;
            return Ok(report);
        }
        let stripped = strip_adopt_labels(&services, existing, publisher).await?;
        observed = Some(stripped);
        adopted.push(format!("Service {service_name}"));
        adopting = true;
    }
    let service = match observed {
        Some(existing) if !adopting && service_matches(&existing, &plan.service) => existing,
        Some(existing) => {
            let mut replaced = None;
            if service_kind(&existing) != service_kind(&plan.service) {
                // ClusterIP <-> ExternalName cannot be changed in place cleanly: recreate.
                delete_exact(
                    &services,
                    &existing,
                    &format!("Service {namespace}/{service_name}"),
                )
                .await?;
            } else if ports_key(&existing) != ports_key(&plan.service) {
                // Ports edited by someone else belong to their field manager: an apply would
                // keep them beside ours (or be refused as a duplicate name). Ours is the whole
                // list, so it is replaced outright, guarded by the version read.
                replaced = Some(
                    replace_ports(
                        &services,
                        &existing,
                        &plan.service,
                        &format!("Service {namespace}/{service_name}"),
                    )
                    .await?,
                );
            }
            changes.push(format!("updated Service {service_name}"));
            match replaced {
                // The ports were all that differed: one write.
                Some(service) if !adopting && service_matches(&service, &plan.service) => service,
                _ => services
                    .patch(&service_name, &apply, &Patch::Apply(&plan.service))
                    .await
                    .map_err(kube_err(
                        "apply",
                        format!("Service {namespace}/{service_name}"),
                    ))?,
            }
        }
        None => {
            let applied = services
                .patch(&service_name, &apply, &Patch::Apply(&plan.service))
                .await
                .map_err(kube_err(
                    "apply",
                    format!("Service {namespace}/{service_name}"),
                ))?;
            changes.push(format!("created Service {service_name}"));
            applied
        }
    };

    // The EndpointSlices, owned by the Service.
    let owner = controller_ref(&service);
    let listed = slices_of(&slices, &service_name).await?;
    let mut keep_slices = Vec::new();
    for mut desired in plan.slices {
        let name = desired.name_any();
        desired.metadata.owner_references = owner.clone().map(|r| vec![r]);
        // A slice with our name but not our labels is not in the list: look it up.
        let observed = match listed.iter().find(|s| s.name_any() == name) {
            Some(found) => Some(found.clone()),
            None => slices
                .get_opt(&name)
                .await
                .map_err(kube_err("get", format!("EndpointSlice {namespace}/{name}")))?,
        };
        match observed {
            Some(existing) if !is_our_slice(&existing, publisher) => {
                let mut report = conflict(format!("EndpointSlice {namespace}/{name}"));
                report.changes = changes;
                report.adopted = adopted;
                return Ok(report);
            }
            Some(existing) if slice_matches(&existing, &desired) => {}
            existing => {
                slices
                    .patch(&name, &apply, &Patch::Apply(&desired))
                    .await
                    .map_err(kube_err(
                        "apply",
                        format!("EndpointSlice {namespace}/{name}"),
                    ))?;
                changes.push(match existing {
                    Some(old) => format!(
                        "updated EndpointSlice {name}: {} -> {}",
                        addresses_of(&old),
                        addresses_of(&desired)
                    ),
                    None => format!(
                        "created EndpointSlice {name} with {}",
                        addresses_of(&desired)
                    ),
                });
            }
        }
        keep_slices.push(name);
    }
    prune_slices(&slices, &listed, publisher, &keep_slices, &mut changes).await?;

    // Legacy Endpoints (after the slices, so DNS never goes empty during an adoption). Looked at only
    // when wanted, when we wrote them before (the Service carries a marker, set before they are
    // written and removed after they are gone), or when adopting.
    let marked = service
        .annotations()
        .contains_key(ANNOTATION_LEGACY_ENDPOINTS);
    if publisher.legacy_endpoints && !marked {
        mark_legacy(&services, &publisher.namespace, &service_name, true).await?;
    }
    if publisher.legacy_endpoints || had_legacy || adopting {
        endpoints(
            client,
            publisher,
            &service,
            &service_name,
            plan.endpoints,
            &mut changes,
            &mut adopted,
        )
        .await?;
    }
    if !publisher.legacy_endpoints && marked {
        mark_legacy(&services, &publisher.namespace, &service_name, false).await?;
    }

    let state = if plan.has_address {
        Published::Published {
            service: service_name,
            skipped: plan.skipped,
        }
    } else {
        Published::WaitingForAddress {
            service: service_name,
            skipped: plan.skipped,
        }
    };
    Ok(Report {
        state,
        changes,
        adopted,
    })
}

/// Set or remove the marker annotation that says legacy Endpoints exist for Service `name` (a merge
/// patch: it must go when they go, which an apply of a plan without it would not guarantee).
async fn mark_legacy(services: &Api<Service>, namespace: &str, name: &str, on: bool) -> Result<()> {
    let value = on.then_some("true");
    services
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {ANNOTATION_LEGACY_ENDPOINTS: value}}}),
            ),
        )
        .await
        .map_err(kube_err("annotate", format!("Service {namespace}/{name}")))?;
    Ok(())
}

/// Bring what LoadBalancer `lb` publishes in line with `addresses` (see [`lb_desired`]).
pub async fn publish_lb(
    client: &kube::Client,
    lb: &LoadBalancer,
    addresses: &[LoadBalancerAddress],
    ready: bool,
) -> Result<Report> {
    let Some(publisher) = lb_publisher(lb) else {
        return Err(crate::error::Error::MissingField(
            format!("LoadBalancer {}", lb.name_any()),
            "uid",
        ));
    };
    publish(
        client,
        &publisher,
        lb_desired(lb, addresses, ready).as_ref(),
    )
    .await
}

/// Remove everything LoadBalancer `lb` published.
pub async fn withdraw_lb(client: &kube::Client, lb: &LoadBalancer) -> Result<Vec<String>> {
    match lb_publisher(lb) {
        Some(publisher) => withdraw(client, &publisher).await,
        None => Ok(Vec::new()),
    }
}

fn endpoints_matches(observed: &Endpoints, desired: &Endpoints) -> bool {
    labels_contain(&observed.metadata, &desired.metadata)
        && owner_refs_contain(&observed.metadata, &desired.metadata)
        && observed.subsets == desired.subsets
}

/// Converge the legacy Endpoints named `name`: apply `desired` (owned by `service`), or remove ours
/// (and an adoptable foreign one: it is replaced by the slices) when there is none.
async fn endpoints(
    client: &kube::Client,
    publisher: &Publisher,
    service: &Service,
    name: &str,
    desired: Option<Endpoints>,
    changes: &mut Vec<String>,
    adopted: &mut Vec<String>,
) -> Result<()> {
    let api: Api<Endpoints> = Api::namespaced(client.clone(), &publisher.namespace);
    let observed = api.get_opt(name).await.map_err(kube_err(
        "get",
        format!("Endpoints {}/{name}", publisher.namespace),
    ))?;
    let ours = observed
        .as_ref()
        .is_some_and(|e| is_our_endpoints(e, publisher));
    let foreign_adoptable = observed
        .as_ref()
        .is_some_and(|e| !ours && adoptable(&e.metadata, publisher));
    match (desired, observed) {
        (Some(mut desired), observed) => {
            desired.metadata.owner_references = controller_ref(service).map(|r| vec![r]);
            if let Some(existing) = &observed {
                if foreign_adoptable {
                    strip_adopt_labels(&api, existing, publisher).await?;
                    adopted.push(format!("Endpoints {name}"));
                } else if !ours {
                    // Someone else's Endpoints: left alone (the slices carry the addresses).
                    return Ok(());
                } else if endpoints_matches(existing, &desired) {
                    return Ok(());
                }
            }
            api.patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&desired),
            )
            .await
            .map_err(kube_err(
                "apply",
                format!("Endpoints {}/{name}", publisher.namespace),
            ))?;
            changes.push(format!(
                "{} Endpoints {name}",
                if observed.is_some() {
                    "updated"
                } else {
                    "created"
                }
            ));
        }
        (None, Some(existing)) if ours || foreign_adoptable => {
            delete_exact(&api, &existing, &format!("Endpoints {name}")).await?;
            if foreign_adoptable {
                adopted.push(format!("Endpoints {name} (replaced by EndpointSlices)"));
            }
            changes.push(format!("removed Endpoints {name}"));
        }
        (None, _) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_lb_api::loadbalancer::{InfrastructureRef, LoadBalancerSpec};

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
        let c = classify(&[
            LoadBalancerAddress::ip("203.0.113.1"),
            LoadBalancerAddress::ip("2001:db8::1"),
            LoadBalancerAddress::ip("203.0.113.1"),
            LoadBalancerAddress::ip("127.0.0.1"),
            LoadBalancerAddress::ip("169.254.1.1"),
            LoadBalancerAddress::ip("fe80::1"),
            LoadBalancerAddress::ip("::1"),
            LoadBalancerAddress::ip("0.0.0.0"),
            LoadBalancerAddress::hostname("lb.example.com"),
        ]);
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
