//! What the workload cluster's `default/kubernetes` endpoints should be, how they differ from what
//! is there, and whether the API servers' own endpoint reconciler is writing them back (pure).
//!
//! The objects have the shape the API servers' reconciler gives them, so that Pods and kube-proxy
//! see no difference: the EndpointSlice `kubernetes` (label `kubernetes.io/service-name:
//! kubernetes` and no managed-by label, as the API server writes it) and the v1 Endpoints
//! `kubernetes` (label `endpointslice.kubernetes.io/skip-mirror: "true"`), each with one port
//! named `https`. The API server writes one family; a dual-stack load balancer gets one slice per
//! family: `kubernetes` for the primary one (IPv4 when there is an IPv4 address) and
//! `kubernetes-ipv6` (or `kubernetes-ipv4`) for the other. The v1 Endpoints, which older clients
//! read, hold the primary family.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use capi_lb_api::constants::FIELD_MANAGER;
use k8s_openapi::api::core::v1::{EndpointAddress, EndpointPort, EndpointSubset, Endpoints};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointPort as SlicePort, EndpointSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

/// The Service whose endpoints are kept.
pub const SERVICE: &str = "kubernetes";
/// Its namespace.
pub const NAMESPACE: &str = "default";
/// The name of its port (the API servers' own reconciler uses it too).
pub const PORT_NAME: &str = "https";
/// The label naming a slice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label that keeps kube-controller-manager from mirroring the Endpoints into a slice of its own.
pub const SKIP_MIRROR_LABEL: &str = "endpointslice.kubernetes.io/skip-mirror";
/// Every slice name capi-lb writes (and deletes when its family goes).
pub const SLICE_NAMES: [&str; 3] = [SERVICE, "kubernetes-ipv4", "kubernetes-ipv6"];

/// A foreign write within this long after capi-lb's own is the API servers' reconciler (it runs
/// every 10 s).
pub const FIGHT_WINDOW: Duration = Duration::from_secs(120);
/// While the API servers' reconciler is active, capi-lb tries again this often (one write, to see
/// whether the flag was set meanwhile).
pub const RETRY: Duration = Duration::from_secs(300);

/// The objects to write.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    /// One slice per family, the primary (named `kubernetes`) first.
    pub slices: Vec<EndpointSlice>,
    /// The v1 Endpoints (primary family).
    pub endpoints: Endpoints,
}

/// The addresses that can be endpoints: loopback, link-local, unspecified and multicast addresses
/// are refused by the API server (and mean nothing to a Pod), so they are dropped; sorted, unique.
pub fn usable(ips: &[IpAddr]) -> Vec<IpAddr> {
    let set: BTreeSet<IpAddr> = ips
        .iter()
        .copied()
        .filter(|ip| {
            !(ip.is_loopback()
                || ip.is_unspecified()
                || ip.is_multicast()
                || match ip {
                    IpAddr::V4(v4) => v4.is_link_local(),
                    IpAddr::V6(v6) => v6.is_unicast_link_local(),
                })
        })
        .collect();
    set.into_iter().collect()
}

/// The endpoints of `default/kubernetes` for the load balancer's `ips` and `port`; `None` when
/// no usable address is left (an empty list is never published: Pods would lose their API server).
pub fn desired(ips: &[IpAddr], port: u16) -> Option<Desired> {
    let ips = usable(ips);
    let (v4, v6): (Vec<IpAddr>, Vec<IpAddr>) = ips.iter().partition(|ip| ip.is_ipv4());
    let (primary, secondary, secondary_name) = if v4.is_empty() {
        (v6, Vec::new(), "kubernetes-ipv4")
    } else {
        (v4, v6, "kubernetes-ipv6")
    };
    if primary.is_empty() {
        return None;
    }
    let mut slices = vec![slice(SERVICE, &primary, port)];
    if !secondary.is_empty() {
        slices.push(slice(secondary_name, &secondary, port));
    }
    let endpoints = Endpoints {
        metadata: ObjectMeta {
            name: Some(SERVICE.into()),
            namespace: Some(NAMESPACE.into()),
            labels: Some([(SKIP_MIRROR_LABEL.to_string(), "true".to_string())].into()),
            ..ObjectMeta::default()
        },
        subsets: Some(vec![EndpointSubset {
            addresses: Some(
                primary
                    .iter()
                    .map(|ip| EndpointAddress {
                        ip: ip.to_string(),
                        ..EndpointAddress::default()
                    })
                    .collect(),
            ),
            ports: Some(vec![EndpointPort {
                name: Some(PORT_NAME.into()),
                port: i32::from(port),
                protocol: Some("TCP".into()),
                ..EndpointPort::default()
            }]),
            not_ready_addresses: None,
        }]),
    };
    Some(Desired { slices, endpoints })
}

fn slice(name: &str, ips: &[IpAddr], port: u16) -> EndpointSlice {
    let family = if ips.iter().all(IpAddr::is_ipv4) {
        "IPv4"
    } else {
        "IPv6"
    };
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NAMESPACE.into()),
            labels: Some([(SERVICE_NAME_LABEL.to_string(), SERVICE.to_string())].into()),
            ..ObjectMeta::default()
        },
        address_type: family.into(),
        endpoints: ips
            .iter()
            .map(|ip| Endpoint {
                addresses: vec![ip.to_string()],
                conditions: Some(EndpointConditions {
                    ready: Some(true),
                    ..EndpointConditions::default()
                }),
                ..Endpoint::default()
            })
            .collect(),
        ports: Some(vec![SlicePort {
            name: Some(PORT_NAME.into()),
            port: Some(i32::from(port)),
            protocol: Some("TCP".into()),
            ..SlicePort::default()
        }]),
    }
}

/// One write to bring the workload cluster to [`Desired`].
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Apply this slice (create or update).
    ApplySlice(EndpointSlice),
    /// Delete the slice of this name, then apply the slice (its address type changed, which an
    /// EndpointSlice cannot).
    ReplaceSlice(EndpointSlice),
    /// Delete the slice of this name (its family is gone).
    DeleteSlice(String),
    /// Apply the v1 Endpoints.
    ApplyEndpoints(Endpoints),
}

/// The writes that make `slices` (those of [`SLICE_NAMES`] that exist) and `endpoints` what
/// `desired` says; none when they already are.
pub fn changes(
    desired: &Desired,
    slices: &[EndpointSlice],
    endpoints: Option<&Endpoints>,
) -> Vec<Change> {
    let mut out = Vec::new();
    for want in &desired.slices {
        let name = want.metadata.name.as_deref().unwrap_or_default();
        match slices
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
        {
            None => out.push(Change::ApplySlice(want.clone())),
            Some(have) if have.address_type != want.address_type => {
                out.push(Change::ReplaceSlice(want.clone()));
            }
            Some(have) if !same_slice(have, want) => out.push(Change::ApplySlice(want.clone())),
            Some(_) => {}
        }
    }
    for have in slices {
        let name = have.metadata.name.as_deref().unwrap_or_default();
        let ours = SLICE_NAMES.contains(&name);
        let wanted = desired
            .slices
            .iter()
            .any(|w| w.metadata.name.as_deref() == Some(name));
        if ours && !wanted {
            out.push(Change::DeleteSlice(name.to_string()));
        }
    }
    if !endpoints.is_some_and(|have| same_endpoints(have, &desired.endpoints)) {
        out.push(Change::ApplyEndpoints(desired.endpoints.clone()));
    }
    out
}

fn labelled(meta: &ObjectMeta, key: &str, value: &str) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(key))
        .is_some_and(|v| v == value)
}

/// Ready addresses, and ports as (name, port, protocol), of a slice.
fn slice_view(s: &EndpointSlice) -> (BTreeSet<String>, BTreeSet<(String, i32, String)>) {
    let addresses = s
        .endpoints
        .iter()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .flat_map(|e| e.addresses.iter().cloned())
        .collect();
    let ports = s
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
    (addresses, ports)
}

fn same_slice(have: &EndpointSlice, want: &EndpointSlice) -> bool {
    // Not-ready endpoints are not ours: a slice with any is rewritten.
    let all_ready = have
        .endpoints
        .iter()
        .all(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true));
    all_ready
        && labelled(&have.metadata, SERVICE_NAME_LABEL, SERVICE)
        && slice_view(have) == slice_view(want)
}

/// Ready addresses and ports of Endpoints.
fn endpoints_view(e: &Endpoints) -> (BTreeSet<String>, BTreeSet<(String, i32, String)>, bool) {
    let subsets = e.subsets.iter().flatten();
    let addresses = subsets
        .clone()
        .flat_map(|s| s.addresses.iter().flatten().map(|a| a.ip.clone()))
        .collect();
    let ports = subsets
        .clone()
        .flat_map(|s| s.ports.iter().flatten())
        .map(|p| {
            (
                p.name.clone().unwrap_or_default(),
                p.port,
                p.protocol.clone().unwrap_or_else(|| "TCP".into()),
            )
        })
        .collect();
    let not_ready = subsets.clone().any(|s| {
        s.not_ready_addresses
            .as_ref()
            .is_some_and(|a| !a.is_empty())
    });
    (addresses, ports, not_ready)
}

fn same_endpoints(have: &Endpoints, want: &Endpoints) -> bool {
    labelled(&have.metadata, SKIP_MIRROR_LABEL, "true")
        && endpoints_view(have) == endpoints_view(want)
}

/// Who last wrote any of `objects` (the manager of the newest `managedFields` entry), unless it is
/// capi-lb: the API servers' reconciler shows as `kube-apiserver`.
pub fn foreign_writer<'a>(objects: impl IntoIterator<Item = &'a ObjectMeta>) -> Option<String> {
    let newest = objects
        .into_iter()
        .flat_map(|m| m.managed_fields.iter().flatten())
        .filter(|f| f.time.is_some())
        .max_by_key(|f| f.time.as_ref().map(|t| t.0))?;
    newest_foreign(newest)
}

fn newest_foreign(entry: &ManagedFieldsEntry) -> Option<String> {
    let manager = entry.manager.clone().unwrap_or_default();
    (manager != FIELD_MANAGER).then_some(manager)
}

/// What to do in one look at the workload cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The endpoints are what they should be: nothing to write.
    InSync,
    /// Write the changes.
    Write,
    /// The API servers' own reconciler writes them: write nothing.
    Hold,
}

/// Whether to write, given whether the endpoints differ from the desired ones (`drifted`), who
/// last wrote them when it was not capi-lb (`foreign`), how long ago capi-lb last wrote them
/// (`since_write`) and how long ago it found the API servers' reconciler at work (`fighting_for`).
///
/// A foreign write that undoes capi-lb's within [`FIGHT_WINDOW`] is the API servers' reconciler:
/// capi-lb holds, and tries one write again after [`RETRY`] (the flag may have been set
/// meanwhile). Endpoints that differ without such a sign (the first look, a change of the load
/// balancer's addresses, a one-off edit) are written.
pub fn decide(
    drifted: bool,
    foreign: Option<&str>,
    since_write: Option<Duration>,
    fighting_for: Option<Duration>,
) -> Decision {
    if !drifted {
        return Decision::InSync;
    }
    if fighting_for.is_some_and(|d| d < RETRY) {
        return Decision::Hold;
    }
    if foreign.is_some() && since_write.is_some_and(|d| d < FIGHT_WINDOW) {
        return Decision::Hold;
    }
    Decision::Write
}

/// The addresses of `desired`, for messages (`192.0.2.1, 2001:db8::1 port 6443`).
pub fn describe(desired: &Desired) -> String {
    let ips: Vec<String> = desired
        .slices
        .iter()
        .flat_map(|s| s.endpoints.iter().flat_map(|e| e.addresses.clone()))
        .collect();
    let port = desired
        .slices
        .first()
        .and_then(|s| s.ports.as_ref())
        .and_then(|p| p.first())
        .and_then(|p| p.port)
        .unwrap_or_default();
    format!("{} port {port}", ips.join(", "))
}
