//! The Service controller's decisions, pure: whether and what to publish for a Service, the DNS
//! names it asks for, the labels and publisher of its `-ext` objects, and what the publisher's cache
//! keeps of a Service.

use std::collections::BTreeMap;

use capi_lb_api::constants::{
    ANNOTATION_DNS_TTL, ANNOTATION_EXTERNAL_ENDPOINT, ANNOTATION_EXTERNAL_ENDPOINT_DNS_NAME,
    ANNOTATION_EXTERNAL_ENDPOINT_SUFFIX, ANNOTATION_HOSTNAMES, ENDPOINT_TYPE_EXTERNAL,
    KUBE_DC_LABEL_MANAGED_BY, KUBE_DC_LABEL_SOURCE_SERVICE, KUBE_DC_MANAGED_BY_VALUE,
    LABEL_ENDPOINT_TYPE, LABEL_EXTERNAL_MANAGED_BY, LABEL_MANAGED_BY, LABEL_SOURCE_SERVICE,
    MANAGED_BY_VALUE,
};
use capi_lb_api::loadbalancer::LoadBalancerAddress;
use capi_lb_api::naming::is_dns_label;
use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use kube::{Resource, ResourceExt};

use crate::class;
use crate::context::{ExternalEndpoints, Policy};
use crate::publication::dns;
use crate::publication::{Desired, PublishedPort, Publisher};

/// What to do with one Service.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Publish this.
    Publish(Desired),
    /// Publish nothing (remove what was published); the reason, for the Event.
    Withdraw(String),
    /// Something is wrong with the Service's annotations or name: report it, change nothing.
    Invalid(String),
    /// Not a LoadBalancer Service and nothing was ever published for it: no API call at all.
    Ignore,
}

pub(super) fn is_load_balancer(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
}

/// What the Service publisher's cache keeps of `service`: no `managedFields`, and of a Service
/// that is not of type LoadBalancer only its metadata and type (all a reconcile reads of it: it
/// withdraws what was published for it, or removes an orphaned `-ext` Service). A cluster has
/// many more of those than LoadBalancers, this publisher's own `-ext` Services among them.
pub fn cached_view(service: &mut Service) {
    service.metadata.managed_fields = None;
    if !is_load_balancer(service) {
        service.spec = service.spec.take().map(|spec| ServiceSpec {
            type_: spec.type_,
            ..ServiceSpec::default()
        });
        service.status = None;
    }
}

/// The ingress addresses of `service`: IPs, and hostnames where an entry has no IP.
pub fn ingress_addresses(service: &Service) -> Vec<LoadBalancerAddress> {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| match (&i.ip, &i.hostname) {
            (Some(ip), _) if !ip.is_empty() => Some(LoadBalancerAddress::ip(ip.clone())),
            (_, Some(host)) if !host.is_empty() => {
                Some(LoadBalancerAddress::hostname(host.clone()))
            }
            _ => None,
        })
        .collect()
}

/// What to do with `service` under `config`.
pub fn decide(service: &Service, config: &ExternalEndpoints) -> Decision {
    // Services of capi-lb's own class are published by the LoadBalancer that realises them.
    if class::is_ours(service) {
        return Decision::Ignore;
    }
    let name = service.name_any();
    let annotations = service.annotations();
    let published_before = annotations.contains_key(ANNOTATION_EXTERNAL_ENDPOINT_DNS_NAME);
    if !is_load_balancer(service) {
        return if published_before {
            Decision::Withdraw("the Service is no longer of type LoadBalancer".into())
        } else {
            Decision::Ignore
        };
    }
    if service.meta().deletion_timestamp.is_some() {
        return Decision::Withdraw("the Service is being deleted".into());
    }
    let opted_in = match annotations
        .get(ANNOTATION_EXTERNAL_ENDPOINT)
        .map(String::as_str)
    {
        Some("true") => true,
        Some("false") => false,
        None => config.policy == Policy::All,
        Some(other) => {
            return Decision::Invalid(format!(
                "annotation {ANNOTATION_EXTERNAL_ENDPOINT} must be \"true\" or \"false\", not {other:?}; nothing was changed"
            ));
        }
    };
    if !opted_in {
        return Decision::Withdraw(match config.policy {
            Policy::All => {
                format!("the Service opted out ({ANNOTATION_EXTERNAL_ENDPOINT}: \"false\")")
            }
            Policy::Annotated => format!(
                "only Services annotated {ANNOTATION_EXTERNAL_ENDPOINT}: \"true\" get an external endpoint"
            ),
        });
    }
    let suffix = match suffix(service, config) {
        Ok(suffix) => suffix,
        Err(message) => return Decision::Invalid(message),
    };
    let service_name = format!("{name}{suffix}");
    if !is_dns_label(&service_name) {
        return Decision::Invalid(format!(
            "the external endpoint name {service_name} is not a DNS label of at most 63 characters; set a shorter suffix with {ANNOTATION_EXTERNAL_ENDPOINT_SUFFIX}; nothing was changed"
        ));
    }
    let addresses = ingress_addresses(service);
    if addresses.is_empty() {
        return Decision::Withdraw(
            "the Service has no address in status.loadBalancer.ingress".into(),
        );
    }
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .map(|p| PublishedPort {
            name: p.name.clone().filter(|n| !n.is_empty()),
            port: p.port,
            protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
        })
        .collect();
    Decision::Publish(Desired {
        service_name,
        ports,
        addresses,
        ready: true,
    })
}

/// The suffix of `service`'s `-ext` endpoint: its annotation, or the configured one; `Err` with
/// the message when the annotation is not a valid suffix.
fn suffix(service: &Service, config: &ExternalEndpoints) -> std::result::Result<String, String> {
    match service
        .annotations()
        .get(ANNOTATION_EXTERNAL_ENDPOINT_SUFFIX)
    {
        Some(s) => {
            let ok = !s.is_empty()
                && s.len() < 63
                && s.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
            if ok {
                Ok(s.clone())
            } else {
                Err(format!(
                    "annotation {ANNOTATION_EXTERNAL_ENDPOINT_SUFFIX} {s:?} is not a valid suffix (lowercase letters, digits and -); nothing was changed"
                ))
            }
        }
        None => Ok(config.suffix.clone()),
    }
}

/// Labels on every object the `-ext` publisher creates for Service `source`.
pub fn labels(source: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY_VALUE.to_string()),
        (
            LABEL_EXTERNAL_MANAGED_BY.to_string(),
            MANAGED_BY_VALUE.to_string(),
        ),
        (LABEL_SOURCE_SERVICE.to_string(), source.to_string()),
        (
            LABEL_ENDPOINT_TYPE.to_string(),
            ENDPOINT_TYPE_EXTERNAL.to_string(),
        ),
    ])
}

/// The publisher for Service `source` (whose controller reference is `owner`).
pub(super) fn publisher(
    namespace: &str,
    source: &str,
    owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    config: &ExternalEndpoints,
) -> Publisher {
    Publisher {
        namespace: namespace.to_string(),
        describe: format!("Service {source}"),
        owner,
        labels: labels(source),
        selector: (LABEL_SOURCE_SERVICE.to_string(), source.to_string()),
        conflict_hint: format!(
            "Delete it, or choose another suffix with the {ANNOTATION_EXTERNAL_ENDPOINT_SUFFIX} annotation"
        ),
        adopt: config.adopt_kube_dc.then(|| {
            BTreeMap::from([
                (
                    KUBE_DC_LABEL_MANAGED_BY.to_string(),
                    KUBE_DC_MANAGED_BY_VALUE.to_string(),
                ),
                (KUBE_DC_LABEL_SOURCE_SERVICE.to_string(), source.to_string()),
            ])
        }),
        legacy_endpoints: config.legacy_endpoints,
    }
}

/// Whether `service` is an `-ext` Service this publisher created: its source's name.
pub(super) fn source_of(service: &Service) -> Option<String> {
    let labels = service.labels();
    (labels.get(LABEL_EXTERNAL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_VALUE)
        && labels.get(LABEL_ENDPOINT_TYPE).map(String::as_str) == Some(ENDPOINT_TYPE_EXTERNAL))
    .then(|| labels.get(LABEL_SOURCE_SERVICE).cloned())
    .flatten()
}

/// The DNS names a Service asks for with [`ANNOTATION_HOSTNAMES`] (and [`ANNOTATION_DNS_TTL`]):
/// `None` when it asks for none or is not (or no longer) a LoadBalancer; `Err` with what is wrong
/// with the annotations.
pub fn dns_wanted(service: &Service) -> std::result::Result<Option<dns::Wanted>, String> {
    let annotations = service.annotations();
    let Some(listed) = annotations.get(ANNOTATION_HOSTNAMES) else {
        return Ok(None);
    };
    if !is_load_balancer(service) || service.meta().deletion_timestamp.is_some() {
        return Ok(None);
    }
    let names = dns::unique(listed.split(','));
    if names.is_empty() {
        return Ok(None);
    }
    if names.len() > MAX_HOSTNAMES {
        return Err(format!(
            "annotation {ANNOTATION_HOSTNAMES} names {} DNS names, at most {MAX_HOSTNAMES} are published; nothing was changed",
            names.len()
        ));
    }
    let ttl = match annotations.get(ANNOTATION_DNS_TTL) {
        None => None,
        Some(v) => match v.trim().parse::<i64>() {
            Ok(ttl) if (1..=604_800).contains(&ttl) => Some(ttl),
            _ => {
                return Err(format!(
                    "annotation {ANNOTATION_DNS_TTL} must be a number of seconds from 1 to 604800, not {v:?}; nothing was changed"
                ));
            }
        },
    };
    Ok(Some(dns::Wanted {
        names,
        options: dns::RecordOptions {
            ttl,
            ..Default::default()
        },
        refused: Vec::new(),
    }))
}

/// At most this many names per Service (as in a LoadBalancer's `spec.dns.hostnames`).
const MAX_HOSTNAMES: usize = 8;

/// The name of the `DNSEndpoint` of `service`: like its `-ext` endpoint (with the configured
/// suffix while its suffix annotation is invalid, which is reported on its own).
pub(super) fn dns_endpoint_name(service: &Service, config: &ExternalEndpoints) -> String {
    let suffix = suffix(service, config).unwrap_or_else(|_| config.suffix.clone());
    format!("{}{suffix}", service.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use serde_json::json;

    fn service(spec: Value, status: Value, annotations: Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "etcd-lb", "namespace": "tenant", "uid": "u1", "annotations": annotations},
            "spec": spec,
            "status": status,
        }))
        .unwrap()
    }

    fn lb_service(ingress: Value, annotations: Value) -> Service {
        service(
            json!({"type": "LoadBalancer", "ports": [{"name": "etcd", "port": 2379, "protocol": "TCP"}]}),
            json!({"loadBalancer": {"ingress": ingress}}),
            annotations,
        )
    }

    fn config() -> ExternalEndpoints {
        ExternalEndpoints::default()
    }

    #[test]
    fn the_cache_keeps_a_load_balancer_whole_and_of_another_service_its_metadata_and_type() {
        let mut lb = lb_service(json!([{"ip": "203.0.113.7"}]), json!({"a": "b"}));
        lb.metadata.managed_fields = Some(vec![Default::default()]);
        let mut kept = lb.clone();
        cached_view(&mut kept);
        lb.metadata.managed_fields = None;
        assert_eq!(kept, lb);

        let published =
            json!({ANNOTATION_EXTERNAL_ENDPOINT_DNS_NAME: "etcd-lb-ext.tenant.svc.cluster.local"});
        let full = service(
            json!({"type": "ClusterIP", "clusterIP": "10.0.0.9", "ports": [{"port": 2379}]}),
            json!({"loadBalancer": {}}),
            published,
        );
        let mut kept = full.clone();
        cached_view(&mut kept);
        assert_eq!(kept.metadata, full.metadata);
        assert_eq!(
            kept.spec.as_ref().unwrap().type_.as_deref(),
            Some("ClusterIP")
        );
        assert_eq!(kept.spec.as_ref().unwrap().ports, None);
        assert_eq!(kept.status, None);
        // What reconciles decide on is the same.
        assert_eq!(decide(&kept, &config()), decide(&full, &config()));
        assert!(matches!(decide(&kept, &config()), Decision::Withdraw(_)));
        assert_eq!(source_of(&kept), source_of(&full));
        assert_eq!(dns_wanted(&kept), dns_wanted(&full));
    }

    #[test]
    fn a_load_balancer_service_with_addresses_is_published() {
        let s = lb_service(
            json!([{"ip": "198.51.100.7"}, {"hostname": "lb.example.com"}]),
            json!({}),
        );
        let Decision::Publish(d) = decide(&s, &config()) else {
            panic!("expected a publication")
        };
        assert_eq!(d.service_name, "etcd-lb-ext");
        assert_eq!(d.addresses.len(), 2);
        assert_eq!(d.ports[0].port, 2379);
        assert_eq!(d.ports[0].name.as_deref(), Some("etcd"));
    }

    #[test]
    fn policy_and_opt_in_out() {
        let s = lb_service(json!([{"ip": "198.51.100.7"}]), json!({}));
        let annotated_only = ExternalEndpoints {
            policy: Policy::Annotated,
            ..config()
        };
        assert!(matches!(decide(&s, &annotated_only), Decision::Withdraw(_)));
        let opted_in = lb_service(
            json!([{"ip": "198.51.100.7"}]),
            json!({ANNOTATION_EXTERNAL_ENDPOINT: "true"}),
        );
        assert!(matches!(
            decide(&opted_in, &annotated_only),
            Decision::Publish(_)
        ));
        let opted_out = lb_service(
            json!([{"ip": "198.51.100.7"}]),
            json!({ANNOTATION_EXTERNAL_ENDPOINT: "false"}),
        );
        assert!(matches!(
            decide(&opted_out, &config()),
            Decision::Withdraw(_)
        ));
        let garbage = lb_service(
            json!([{"ip": "198.51.100.7"}]),
            json!({ANNOTATION_EXTERNAL_ENDPOINT: "yes"}),
        );
        assert!(matches!(decide(&garbage, &config()), Decision::Invalid(_)));
    }

    #[test]
    fn suffixes_and_names_that_do_not_fit_are_invalid() {
        let custom = lb_service(
            json!([{"ip": "198.51.100.7"}]),
            json!({ANNOTATION_EXTERNAL_ENDPOINT_SUFFIX: "-public"}),
        );
        let Decision::Publish(d) = decide(&custom, &config()) else {
            panic!()
        };
        assert_eq!(d.service_name, "etcd-lb-public");
        for bad in ["", "-Ext", "_x", "-ext.", &"-x".repeat(40)] {
            let s = lb_service(
                json!([{"ip": "198.51.100.7"}]),
                json!({ANNOTATION_EXTERNAL_ENDPOINT_SUFFIX: bad}),
            );
            assert!(
                matches!(decide(&s, &config()), Decision::Invalid(_)),
                "{bad:?}"
            );
        }
        let mut long = lb_service(json!([{"ip": "198.51.100.7"}]), json!({}));
        long.metadata.name = Some("a".repeat(60));
        let Decision::Invalid(message) = decide(&long, &config()) else {
            panic!()
        };
        assert!(message.contains("63"), "{message}");
    }

    #[test]
    fn no_addresses_or_not_a_load_balancer() {
        let s = lb_service(json!([]), json!({}));
        assert!(matches!(decide(&s, &config()), Decision::Withdraw(_)));
        let cluster_ip = service(json!({"type": "ClusterIP"}), json!({}), json!({}));
        assert_eq!(decide(&cluster_ip, &config()), Decision::Ignore);
        let was_published = service(
            json!({"type": "ClusterIP"}),
            json!({}),
            json!({ANNOTATION_EXTERNAL_ENDPOINT_DNS_NAME: "etcd-lb-ext.tenant.svc.cluster.local"}),
        );
        assert!(matches!(
            decide(&was_published, &config()),
            Decision::Withdraw(_)
        ));
    }
}
