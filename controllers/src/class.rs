//! capi-lb's Service load-balancer class, `loadbalancer.cluster.x-k8s.io/capi-lb`.
//!
//! A Service of `type: LoadBalancer` with that `spec.loadBalancerClass` is realised through a
//! LoadBalancer: the one the Service names in the annotation
//! `loadbalancer.cluster.x-k8s.io/load-balancer-ref` (which gives the provider; a Service that
//! names none is reported, never matched to a LoadBalancer by name). capi-lb binds them
//! by annotating the LoadBalancer `loadbalancer.cluster.x-k8s.io/service: <svc>`; the LoadBalancer
//! then takes its ports from the Service and its members from the Service's ready endpoints (its own
//! `ports`, `targetKind` and `selector` are not used), and the provider's address is written to the
//! Service's `status.loadBalancer.ingress` (IPs when the provider has any: Kamaji rejects
//! hostname-only ingress). The stable name is the LoadBalancer's own `-ext` name, written onto the
//! Service as `loadbalancer.cluster.x-k8s.io/external-endpoint-dns-name`; the `-ext` publisher does
//! not publish these Services a second time. Services of other classes are never touched.
//!
//! Members follow the endpoints' own conditions: a ready endpoint serves, a terminating endpoint
//! that still serves drains (weight 0) until it is gone, so a rolling restart of the backing pods is
//! graceful without any state of capi-lb's.

use std::collections::BTreeMap;

use capi_lb_api::LoadBalancer;
use capi_lb_api::constants::LABEL_SERVICE_NAME;
use capi_lb_api::loadbalancer::{AddressType, LoadBalancerAddress, LoadBalancerPort, Protocol};
use capi_lb_providers::DesiredMember;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch};
use serde_json::{Value, json};

use capi_lb_api::constants::{CAPI_GROUP, MACHINE_KIND};
use ipnet::IpNet;

use crate::error::{Result, kube_err};
use crate::metadata::patch_params;

/// The load-balancer class capi-lb implements.
pub const LOAD_BALANCER_CLASS: &str = "loadbalancer.cluster.x-k8s.io/capi-lb";
/// Annotation on a Service of capi-lb's class naming the LoadBalancer that realises it.
pub const ANNOTATION_SERVICE_LOAD_BALANCER_REF: &str =
    "loadbalancer.cluster.x-k8s.io/load-balancer-ref";
/// Annotation capi-lb puts on a LoadBalancer bound to a Service.
pub const ANNOTATION_SERVICE: &str = "loadbalancer.cluster.x-k8s.io/service";

/// True when `service` is of type LoadBalancer with capi-lb's class.
pub fn is_ours(service: &Service) -> bool {
    service.spec.as_ref().is_some_and(|s| {
        s.type_.as_deref() == Some("LoadBalancer")
            && s.load_balancer_class.as_deref() == Some(LOAD_BALANCER_CLASS)
    })
}

/// The LoadBalancer that realises `service`: the one its `load-balancer-ref` annotation names.
/// There is no default: a LoadBalancer merely named like a Service does not realise it, so that
/// whoever may create LoadBalancers in a namespace cannot claim a Service its author left without a
/// LoadBalancer (and write that Service's ingress with an address of their choosing).
pub fn realised_by(service: &Service) -> Option<String> {
    service
        .annotations()
        .get(ANNOTATION_SERVICE_LOAD_BALANCER_REF)
        .filter(|name| !name.is_empty())
        .cloned()
}

/// A Service a LoadBalancer realises, with its EndpointSlices.
#[derive(Clone, Debug)]
pub struct Binding {
    /// The Service.
    pub service: Service,
    /// Its EndpointSlices.
    pub slices: Vec<EndpointSlice>,
}

/// The Service bound to `lb`, when the LoadBalancer carries the binding annotation and the Service
/// exists, is of capi-lb's class and names this LoadBalancer.
pub async fn binding(client: &kube::Client, lb: &LoadBalancer) -> Result<Option<Binding>> {
    let Some(name) = lb.annotations().get(ANNOTATION_SERVICE) else {
        return Ok(None);
    };
    let namespace = lb.namespace().unwrap_or_default();
    let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
    let Some(service) = services
        .get_opt(name)
        .await
        .map_err(kube_err("get", format!("Service {namespace}/{name}")))?
    else {
        return Ok(None);
    };
    let names_us = realised_by(&service).is_some_and(|n| n == lb.name_any());
    if !is_ours(&service) || !names_us || will_not_realise(lb, name).is_some() {
        return Ok(None);
    }
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &namespace);
    let slices = slices
        .list(&ListParams::default().labels(&format!("{LABEL_SERVICE_NAME}={name}")))
        .await
        .map_err(kube_err(
            "list EndpointSlices of",
            format!("Service {name}"),
        ))?
        .items;
    Ok(Some(Binding { service, slices }))
}

fn listener_name(name: Option<&str>, port: i32) -> String {
    match name {
        Some(n)
            if !n.is_empty()
                && n.len() <= 15
                && n.chars().any(|c| c.is_ascii_lowercase())
                && !n.contains("--")
                && n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') =>
        {
            n.to_string()
        }
        _ => format!("port-{port}"),
    }
}

/// The Service's ports as LoadBalancer ports: `targetPort` resolved from the EndpointSlices when it
/// is a name.
pub fn ports(binding: &Binding) -> Vec<LoadBalancerPort> {
    binding
        .service
        .spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .map(|p| {
            let target = match &p.target_port {
                Some(IntOrString::Int(i)) => *i,
                Some(IntOrString::String(name)) => binding
                    .slices
                    .iter()
                    .flat_map(|s| s.ports.iter().flatten())
                    .find(|sp| sp.name.as_deref() == p.name.as_deref())
                    .and_then(|sp| sp.port)
                    .unwrap_or_else(|| name.parse().unwrap_or(p.port)),
                None => p.port,
            };
            LoadBalancerPort {
                name: listener_name(p.name.as_deref(), p.port),
                port: p.port,
                target_port: Some(target),
                protocol: match p.protocol.as_deref() {
                    Some("UDP") => Protocol::Udp,
                    _ => Protocol::Tcp,
                },
            }
        })
        .collect()
}

/// The LoadBalancer as it applies to its bound Service: the Service's ports and
/// `loadBalancerSourceRanges`, and the Service's EndpointSlices as the target kind (for the
/// status).
pub fn effective(lb: &LoadBalancer, binding: &Binding) -> LoadBalancer {
    let mut lb = lb.clone();
    lb.spec.target_kind = capi_lb_api::loadbalancer::TargetKind {
        api_group: "discovery.k8s.io".into(),
        kind: "EndpointSlice".into(),
    };
    let ports = ports(binding);
    if !ports.is_empty() {
        lb.spec.ports = ports;
    }
    let asked: Vec<String> = binding
        .service
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_source_ranges.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty())
        .collect();
    lb.spec.source_ranges = within(&asked, &lb.spec.source_ranges);
    lb
}

/// The Service's source ranges `asked` within the LoadBalancer's `allowed` (an upper bound: a
/// Service never widens what its LoadBalancer lets connect): each asked range inside an allowed one,
/// and each allowed range inside an asked one. With no allowed ranges, what is asked; with nothing
/// asked, or nothing of it allowed, the allowed ranges. (Ranges that do not parse are kept as asked
/// for the provider to refuse with its message.)
pub fn within(asked: &[String], allowed: &[String]) -> Vec<String> {
    if allowed.is_empty() {
        return asked.to_vec();
    }
    let parse = |r: &String| r.parse::<IpNet>().ok();
    let allowed_nets: Vec<IpNet> = allowed.iter().filter_map(parse).collect();
    let mut out: Vec<String> = Vec::new();
    for range in asked {
        let Some(net) = parse(range) else { continue };
        for a in &allowed_nets {
            let narrower = if a.contains(&net) {
                Some(net)
            } else if net.contains(a) {
                Some(*a)
            } else {
                None
            };
            if let Some(narrower) = narrower.map(|n| n.to_string())
                && !out.contains(&narrower)
            {
                out.push(narrower);
            }
        }
    }
    if out.is_empty() {
        allowed.to_vec()
    } else {
        out
    }
}

/// Why LoadBalancer `lb` will not realise Service `service`, if it will not. A Service of the class
/// names the LoadBalancer it wants; the LoadBalancer must agree, since whoever may create Services
/// in the namespace is not always its author:
///
/// - one that selects Machines explicitly (`spec.selector`) or is a control-plane load balancer
///   (`spec.controlPlane`) never: its Machines are its own;
/// - any other only when its author names the Service in its [`ANNOTATION_SERVICE`] annotation,
///   whatever its targets would be: a LoadBalancer with `spec.clusterName` and no selector selects
///   its Cluster's Machines labelled with its name by default, which a Service must not take from
///   it (the Kamaji flavors name Kamaji's Service in the annotation).
pub fn will_not_realise(lb: &LoadBalancer, service: &str) -> Option<String> {
    let selects = lb.spec.selector.as_ref().is_some_and(|s| {
        s.match_labels.as_ref().is_some_and(|m| !m.is_empty())
            || s.match_expressions.as_ref().is_some_and(|e| !e.is_empty())
    });
    let name = lb.name_any();
    let machines =
        lb.spec.target_kind.api_group == CAPI_GROUP && lb.spec.target_kind.kind == MACHINE_KIND;
    if machines && (selects || lb.spec.control_plane.is_some()) {
        return Some(format!(
            "LoadBalancer {name} selects Machines of its own (spec.controlPlane or spec.selector): a Service never takes it over; create a LoadBalancer for the Service"
        ));
    }
    (lb.annotations().get(ANNOTATION_SERVICE).map(String::as_str) != Some(service)).then(|| {
        format!(
            "LoadBalancer {name} realises Service {service} only when its author names the Service in its {ANNOTATION_SERVICE} annotation (without it, it has targets of its own: by default its Cluster's Machines labelled with its name)"
        )
    })
}

/// The members the Service's endpoints ask for: ready endpoints serve, terminating endpoints that
/// still serve drain; each is named by its target (a pod) or its address.
pub fn members(binding: &Binding) -> Vec<DesiredMember> {
    let mut out: BTreeMap<String, DesiredMember> = BTreeMap::new();
    for slice in &binding.slices {
        for endpoint in &slice.endpoints {
            let Some(address) = endpoint.addresses.first() else {
                continue;
            };
            let conditions = endpoint.conditions.clone().unwrap_or_default();
            let name = endpoint
                .target_ref
                .as_ref()
                .and_then(|t| t.name.clone())
                .unwrap_or_else(|| address.clone());
            let member = if conditions.ready.unwrap_or(true) {
                DesiredMember::serve(name.clone(), address.clone())
            } else if conditions.serving.unwrap_or(false) && conditions.terminating.unwrap_or(false)
            {
                DesiredMember::drain(name.clone())
            } else {
                continue;
            };
            out.insert(name, member);
        }
    }
    out.into_values().collect()
}

/// What to write into the Service's `status.loadBalancer.ingress`: the IPs, or the hostnames when
/// the provider has no IP. Each IP says its `ipMode` (KEP-1860): `Proxy` where the provider's load
/// balancer proxies connections (`proxied`), so that kube-proxy sends in-cluster clients of that IP
/// to the load balancer (its health checks and allowed source ranges apply to them too) instead of
/// straight to the endpoints; `VIP` otherwise, which is also what the apiserver fills in when it is
/// left out (so leaving it out would make the written ingress differ from the stored one forever).
pub fn ingress(addresses: &[LoadBalancerAddress], proxied: bool) -> Value {
    let mode = if proxied { "Proxy" } else { "VIP" };
    let ips: Vec<Value> = addresses
        .iter()
        .filter(|a| a.type_ == AddressType::Ip)
        .map(|a| json!({"ip": a.address, "ipMode": mode}))
        .collect();
    if !ips.is_empty() {
        return Value::Array(ips);
    }
    Value::Array(
        addresses
            .iter()
            .map(|a| json!({"hostname": a.address}))
            .collect(),
    )
}

/// Write the provider's addresses into the bound Service's ingress (`proxied`: see [`ingress`])
/// and the stable name into its DNS-name annotation, each only when it differs. Returns what
/// changed.
pub async fn write_back(
    client: &kube::Client,
    binding: &Binding,
    addresses: &[LoadBalancerAddress],
    proxied: bool,
    stable_host: Option<&str>,
) -> Result<Vec<String>> {
    let namespace = binding.service.namespace().unwrap_or_default();
    let name = binding.service.name_any();
    let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
    let mut changes = Vec::new();
    let wanted = ingress(addresses, proxied);
    let current = serde_json::to_value(&binding.service.status)
        .ok()
        .and_then(|s| s.pointer("/loadBalancer/ingress").cloned())
        .unwrap_or(Value::Array(Vec::new()));
    if current != wanted {
        services
            .patch_status(
                &name,
                &patch_params(),
                &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": wanted}}})),
            )
            .await
            .map_err(kube_err(
                "write ingress of",
                format!("Service {namespace}/{name}"),
            ))?;
        changes.push(format!("Service {name} ingress: {wanted}"));
    }
    let dns = capi_lb_api::constants::ANNOTATION_EXTERNAL_ENDPOINT_DNS_NAME;
    if binding.service.annotations().get(dns).map(String::as_str) != stable_host {
        services
            .patch(
                &name,
                &patch_params(),
                &Patch::Merge(json!({"metadata": {"annotations": {dns: stable_host}}})),
            )
            .await
            .map_err(kube_err("annotate", format!("Service {namespace}/{name}")))?;
    }
    Ok(changes)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn binding(service: Value, slices: Value) -> Binding {
        Binding {
            service: serde_json::from_value(service).unwrap(),
            slices: serde_json::from_value(slices).unwrap(),
        }
    }

    #[test]
    fn ports_resolve_named_target_ports_and_members_follow_endpoint_conditions() {
        let b = binding(
            json!({"metadata": {"name": "tcp"}, "spec": {"type": "LoadBalancer",
                "loadBalancerClass": LOAD_BALANCER_CLASS,
                "ports": [{"name": "kube-apiserver", "port": 6443, "targetPort": "https"},
                          {"port": 8132, "targetPort": 8132}]}}),
            json!([{"metadata": {"name": "tcp-abc"}, "addressType": "IPv4",
            "ports": [{"name": "kube-apiserver", "port": 443}],
            "endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true}, "targetRef": {"name": "pod-a"}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": false, "serving": true, "terminating": true}, "targetRef": {"name": "pod-b"}},
                {"addresses": ["10.0.0.3"], "conditions": {"ready": false}},
            ]}]),
        );
        let ports = ports(&b);
        assert_eq!(ports[0].name, "kube-apiserver");
        assert_eq!(ports[0].target_port, Some(443));
        assert_eq!(ports[1].name, "port-8132");
        assert_eq!(ports[1].target_port, Some(8132));
        let m = members(&b);
        assert_eq!(
            m,
            vec![
                DesiredMember::serve("pod-a", "10.0.0.1"),
                DesiredMember::drain("pod-b")
            ]
        );
        assert!(is_ours(&b.service));
    }

    #[test]
    fn the_load_balancers_source_ranges_bound_the_services() {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // No bound: the Service's.
        assert_eq!(
            within(&strings(&["10.0.0.0/8"]), &[]),
            strings(&["10.0.0.0/8"])
        );
        // Narrower asked ranges stay; a wider one is cut to the allowed one; outside goes.
        assert_eq!(
            within(
                &strings(&["10.1.0.0/16", "0.0.0.0/0", "192.0.2.0/24"]),
                &strings(&["10.0.0.0/8"])
            ),
            strings(&["10.1.0.0/16", "10.0.0.0/8"])
        );
        // Nothing asked, or nothing of it allowed: the LoadBalancer's.
        assert_eq!(
            within(&[], &strings(&["10.0.0.0/8"])),
            strings(&["10.0.0.0/8"])
        );
        assert_eq!(
            within(&strings(&["192.0.2.0/24"]), &strings(&["10.0.0.0/8"])),
            strings(&["10.0.0.0/8"])
        );
    }

    #[test]
    fn a_load_balancer_with_machines_of_its_own_is_never_taken_over() {
        let lb = |spec: Value, annotations: Value| -> LoadBalancer {
            let mut spec = spec;
            spec["infrastructureRef"] = json!({"apiGroup": "infrastructure.cluster.x-k8s.io",
                                               "kind": "InMemoryLoadBalancer", "name": "cp"});
            serde_json::from_value(json!({
                "apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
                "metadata": {"name": "cp", "namespace": "a", "annotations": annotations},
                "spec": spec}))
            .unwrap()
        };
        // The default selector picks Machines too: only when its author names the Service.
        for spec in [json!({}), json!({"clusterName": "demo"})] {
            let why = will_not_realise(&lb(spec.clone(), json!({})), "web").unwrap();
            assert!(why.contains("only when its author names"), "{why}");
            assert!(
                will_not_realise(&lb(spec.clone(), json!({ANNOTATION_SERVICE: "web"})), "web")
                    .is_none()
            );
            assert!(
                will_not_realise(&lb(spec, json!({ANNOTATION_SERVICE: "other"})), "web").is_some()
            );
        }
        // A control-plane LoadBalancer, one selecting Machines: never, even named.
        for spec in [
            json!({"clusterName": "demo", "controlPlane": {}}),
            json!({"selector": {"matchLabels": {"role": "cp"}}}),
        ] {
            let named = lb(spec.clone(), json!({ANNOTATION_SERVICE: "web"}));
            let why = will_not_realise(&named, "web").unwrap();
            assert!(why.contains("Machines of its own"), "{why}");
        }
        // Targets of another kind: only when its author names the Service.
        let other = json!({"selector": {"matchLabels": {"app": "x"}},
                           "targetKind": {"apiGroup": "example.com", "kind": "Appliance"}});
        assert!(will_not_realise(&lb(other.clone(), json!({})), "web").is_some());
        assert!(will_not_realise(&lb(other, json!({ANNOTATION_SERVICE: "web"})), "web").is_none());
    }

    #[test]
    fn ingress_prefers_ips() {
        let both = [
            LoadBalancerAddress::hostname("lb.example.com"),
            LoadBalancerAddress::ip("198.51.100.7"),
        ];
        assert_eq!(
            ingress(&both, false),
            json!([{"ip": "198.51.100.7", "ipMode": "VIP"}])
        );
        assert_eq!(
            ingress(&both, true),
            json!([{"ip": "198.51.100.7", "ipMode": "Proxy"}])
        );
        // A hostname has no ipMode (the apiserver refuses one without an IP).
        assert_eq!(
            ingress(&both[..1], true),
            json!([{"hostname": "lb.example.com"}])
        );
    }
}
