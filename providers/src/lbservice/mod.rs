//! A selectorless Service of `type: LoadBalancer` whose endpoints are the members: how the kube-dc
//! provider and the Service provider (`servicelb`) realise a load balancer. What they share is here:
//!
//! - ownership: the labels, annotations and check that mark an object as made for one LoadBalancer
//!   (and one infrastructure object), so an object with the same name that is not capi-lb's is never
//!   touched and a restarted controller adopts what is;
//! - the Service itself: its ports from the listeners, [`service_matches`] (an unchanged Service is
//!   not written), and what its implementation put in `status.loadBalancer.ingress`;
//! - the members as the Service's endpoints ([`members`]) and deleting it all ([`delete`]).

pub mod delete;
pub mod members;

use std::collections::BTreeMap;

use capi_lb_api::constants::{DNS_LABEL_MAX, FIELD_MANAGER, LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sha2::{Digest, Sha256};

use crate::error::ProviderError;
use crate::provider::{Listener, LoadBalancerIdentity, tags};

/// `base + suffix` when it is a DNS label of at most 63 characters starting with a letter;
/// otherwise `capi-lb-<base cut>-<8 hex of its SHA-256><suffix>`, which always is.
pub fn derived_name(base: &str, suffix: &str) -> String {
    let candidate = format!("{base}{suffix}");
    let is_label = candidate.len() <= DNS_LABEL_MAX
        && candidate.starts_with(|c: char| c.is_ascii_lowercase())
        && candidate
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !candidate.ends_with('-');
    if is_label {
        return candidate;
    }
    let hash: String = Sha256::digest(base.as_bytes())
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect();
    let room = DNS_LABEL_MAX - "capi-lb-".len() - 1 - hash.len() - suffix.len();
    let cut: String = base
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(room)
        .collect();
    let cut = cut.trim_matches('-');
    if cut.is_empty() {
        format!("capi-lb-{hash}{suffix}")
    } else {
        format!("capi-lb-{cut}-{hash}{suffix}")
    }
}

/// Labels on everything made for `identity` (and the infrastructure object `infra_uid`).
pub fn labels(
    identity: &LoadBalancerIdentity,
    infra_uid: Option<&str>,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY_VALUE.to_string()),
        (tags::UID.to_string(), identity.uid.clone()),
    ]);
    if let Some(uid) = infra_uid {
        labels.insert(tags::INFRASTRUCTURE_UID.to_string(), uid.to_string());
    }
    labels
}

/// Annotations on everything made for `identity` (names can be longer than label values).
pub fn annotations(identity: &LoadBalancerIdentity) -> BTreeMap<String, String> {
    BTreeMap::from([
        (tags::NAMESPACE.to_string(), identity.namespace.clone()),
        (tags::NAME.to_string(), identity.name.clone()),
    ])
}

/// Whether an object was made for `identity` and, when it says so, for the infrastructure object
/// `infra_uid`: the UID label and the namespace and name annotations must all be the
/// LoadBalancer's (as Octavia's tags must), so that an object someone labelled with another
/// LoadBalancer's UID is not adopted, updated or deleted for it; a name alone never decides.
pub fn owned(meta: &ObjectMeta, identity: &LoadBalancerIdentity, infra_uid: Option<&str>) -> bool {
    labelled_for(meta, identity, infra_uid) && named_for(meta, identity)
}

/// Whether an object's labels are `identity`'s (and `infra_uid`'s, when they name one): with an
/// owner reference to an object already known to be ours (the endpoints of our Service), as good
/// as [`owned`].
pub fn labelled_for(
    meta: &ObjectMeta,
    identity: &LoadBalancerIdentity,
    infra_uid: Option<&str>,
) -> bool {
    let labels = meta.labels.clone().unwrap_or_default();
    identity.owns(&labels)
        && labels
            .get(tags::INFRASTRUCTURE_UID)
            .is_none_or(|uid| Some(uid.as_str()) == infra_uid)
}

/// Whether an object's namespace and name annotations are `identity`'s.
pub fn named_for(meta: &ObjectMeta, identity: &LoadBalancerIdentity) -> bool {
    let annotated = |key: &str, value: &str| {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
            == Some(value)
    };
    annotated(tags::NAMESPACE, &identity.namespace) && annotated(tags::NAME, &identity.name)
}

/// The Service's ports: one per listener, to its target port.
pub fn service_ports(listeners: &[Listener]) -> Vec<ServicePort> {
    listeners
        .iter()
        .map(|l| ServicePort {
            name: Some(l.name.clone()),
            port: l.port,
            target_port: Some(IntOrString::Int(l.target_port)),
            protocol: Some(l.protocol.as_str().to_string()),
            ..Default::default()
        })
        .collect()
}

/// A Service port as compared: name, port, target port, protocol.
type PortKey = (Option<String>, i32, Option<IntOrString>, String);

/// A Service's ports as compared, sorted by name and port (the protocol defaults to TCP).
fn ports_of(spec: &ServiceSpec) -> Vec<PortKey> {
    let mut ports: Vec<_> = spec
        .ports
        .iter()
        .flatten()
        .map(|p| {
            (
                p.name.clone(),
                p.port,
                p.target_port.clone(),
                p.protocol.clone().unwrap_or_else(|| "TCP".into()),
            )
        })
        .collect();
    ports.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    ports
}

/// True when the observed Service already is what `desired` asks for: a selectorless Service of
/// the desired type with the desired ports, every spec field the desired one sets (class, requested
/// address, source ranges, traffic policy, IP families, node ports) equal, every desired label,
/// annotation and owner reference present (others may add their own; the API's defaults for fields
/// the desired one leaves unset are not differences), and nothing capi-lb applied earlier that the
/// desired one no longer has (read from capi-lb's entry in `managedFields`: applying again removes
/// it).
pub fn service_matches(observed: &Service, desired: &Service) -> bool {
    spec_matches(observed, desired) && !applied_beyond(observed, desired)
}

fn spec_matches(observed: &Service, desired: &Service) -> bool {
    let (Some(o), Some(d)) = (&observed.spec, &desired.spec) else {
        return false;
    };
    // A field the desired Service sets is equal; one it leaves unset is the API's business.
    fn same<T: PartialEq>(observed: &Option<T>, desired: &Option<T>) -> bool {
        desired.is_none() || observed == desired
    }
    let source_ranges = |s: &ServiceSpec| s.load_balancer_source_ranges.clone().unwrap_or_default();
    o.type_ == d.type_
        && o.selector.as_ref().is_none_or(BTreeMap::is_empty)
        && ports_of(o) == ports_of(d)
        && same(&o.load_balancer_class, &d.load_balancer_class)
        && same(&o.load_balancer_ip, &d.load_balancer_ip)
        && source_ranges(o) == source_ranges(d)
        && same(&o.external_traffic_policy, &d.external_traffic_policy)
        && same(&o.ip_family_policy, &d.ip_family_policy)
        && same(&o.ip_families, &d.ip_families)
        && same(
            &o.allocate_load_balancer_node_ports,
            &d.allocate_load_balancer_node_ports,
        )
        && contains(&observed.metadata.labels, &desired.metadata.labels)
        && contains(
            &observed.metadata.annotations,
            &desired.metadata.annotations,
        )
        && desired.metadata.owner_references.iter().flatten().all(|d| {
            observed
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == d.uid && o.controller == d.controller)
        })
}

/// Whether capi-lb's server-side apply of `observed` owns a spec field, label or annotation that
/// `desired` does not set.
fn applied_beyond(observed: &Service, desired: &Service) -> bool {
    let Some(applied) = observed
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|m| {
            m.manager.as_deref() == Some(FIELD_MANAGER) && m.operation.as_deref() == Some("Apply")
        })
        .and_then(|m| m.fields_v1.as_ref())
    else {
        return false;
    };
    let keys = |path: &[&str]| -> Vec<String> {
        let mut node = &applied.0;
        for step in path {
            match node.get(step) {
                Some(next) => node = next,
                None => return Vec::new(),
            }
        }
        node.as_object()
            .map(|o| {
                o.keys()
                    .filter_map(|k| k.strip_prefix("f:").map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let desired_spec = desired
        .spec
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or_default();
    let has_map_key = |map: &Option<BTreeMap<String, String>>, key: &String| {
        map.as_ref().is_some_and(|m| m.contains_key(key))
    };
    keys(&["f:spec"])
        .iter()
        .any(|k| desired_spec.get(k).is_none())
        || keys(&["f:metadata", "f:labels"])
            .iter()
            .any(|k| !has_map_key(&desired.metadata.labels, k))
        || keys(&["f:metadata", "f:annotations"])
            .iter()
            .any(|k| !has_map_key(&desired.metadata.annotations, k))
}

/// Whether `observed` has every entry of `wanted`.
fn contains(
    observed: &Option<BTreeMap<String, String>>,
    wanted: &Option<BTreeMap<String, String>>,
) -> bool {
    let observed = observed.clone().unwrap_or_default();
    wanted
        .iter()
        .flatten()
        .all(|(k, v)| observed.get(k) == Some(v))
}

/// What the Service's implementation put in `status.loadBalancer.ingress`: its IPs and its
/// hostnames, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ingress {
    /// IP addresses.
    pub ips: Vec<String>,
    /// DNS names (cloud load balancers that have no stable IP).
    pub hostnames: Vec<String>,
}

impl Ingress {
    /// The ingress of `service`.
    pub fn of(service: &Service) -> Self {
        let mut ingress = Self::default();
        for entry in service
            .status
            .iter()
            .flat_map(|s| s.load_balancer.iter())
            .flat_map(|lb| lb.ingress.iter().flatten())
        {
            if let Some(ip) = entry.ip.as_ref().filter(|ip| !ip.is_empty()) {
                ingress.ips.push(ip.clone());
            } else if let Some(hostname) = entry.hostname.as_ref().filter(|h| !h.is_empty()) {
                ingress.hostnames.push(hostname.clone());
            }
        }
        ingress
    }

    /// True when there is neither an IP nor a hostname.
    pub fn is_empty(&self) -> bool {
        self.ips.is_empty() && self.hostnames.is_empty()
    }
}

/// How far one step of [`Provider::ensure`](crate::provider::Provider::ensure) got: what it made or
/// found, or the progress to report when the reconcile has to stop there (a name is taken, an
/// object it needs does not exist yet). API failures are not a step's outcome but a
/// [`ProviderError`].
#[derive(Debug)]
pub enum Step<T> {
    /// The step is done; carry on with this.
    Ready(T),
    /// Stop here and report this progress (pending, with its condition reason).
    Wait(crate::provider::Progress),
}

/// The Service `name` the members are endpoints of: a transient error until it exists and is ours
/// (made for `identity` and the infrastructure object `infra_uid`).
pub async fn member_service(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    identity: &LoadBalancerIdentity,
    infra_uid: Option<&str>,
) -> Result<Service, ProviderError> {
    kube::Api::<Service>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| api_error(&format!("get Service {name}"), e))?
        .filter(|s| owned(&s.metadata, identity, infra_uid))
        .ok_or_else(|| ProviderError::transient(format!("Service {name} does not exist yet")))
}

/// A failed API call as a transient error: `<what>: <error>`.
/// The error's text is quoted at most [`crate::untrusted::QUOTE_MAX`] long: for a remote kube-dc
/// cluster, the server chose it.
pub fn api_error(what: &str, e: kube::Error) -> ProviderError {
    let text = crate::untrusted::quote(&e.to_string());
    if timed_out(&e) {
        return ProviderError::TimedOut {
            message: format!("{what}: no answer in time: {text}"),
        };
    }
    ProviderError::transient(format!("{what}: {text}"))
}

/// Whether `e` is a request that got no answer in time (a client's connect, read or write
/// timeout).
fn timed_out(e: &kube::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = source {
        if error
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
            || matches!(
                error.downcast_ref::<crate::untrusted::Refused>(),
                Some(crate::untrusted::Refused::TimedOut(_))
            )
        {
            return true;
        }
        source = error.source();
    }
    false
}

/// Whether the API answered 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Fixtures the tests of the providers on a Service share.
#[cfg(test)]
pub(crate) mod testing {
    use crate::provider::LoadBalancerIdentity;

    /// LoadBalancer `ns/cp` with UID `lb-uid`.
    pub(crate) fn identity() -> LoadBalancerIdentity {
        LoadBalancerIdentity {
            namespace: "ns".into(),
            name: "cp".into(),
            uid: "lb-uid".into(),
            cluster_name: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, ServiceStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::testing::identity;
    use super::*;

    fn desired() -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("cp-lb".into()),
                labels: Some(labels(&identity(), Some("infra-uid"))),
                annotations: Some(annotations(&identity())),
                owner_references: Some(vec![OwnerReference {
                    uid: "owner".into(),
                    controller: Some(true),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                load_balancer_class: Some("metallb.io/x".into()),
                load_balancer_source_ranges: Some(vec!["192.0.2.0/24".into()]),
                ports: Some(service_ports(&[Listener {
                    name: "api".into(),
                    port: 6443,
                    target_port: 16443,
                    protocol: capi_lb_api::loadbalancer::Protocol::Tcp,
                }])),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn derived_names_fit_and_stay_readable() {
        assert_eq!(derived_name("cp", "-lb"), "cp-lb");
        let long = "a".repeat(80);
        let name = derived_name(&long, "-eip");
        assert!(name.len() <= 63 && name.ends_with("-eip") && name.starts_with("capi-lb-a"));
        assert_ne!(
            derived_name(&format!("{long}x"), "-lb"),
            derived_name(&format!("{long}y"), "-lb")
        );
        // Names that are not DNS-1035 labels (a leading digit, dots) are derived too.
        let dotted = derived_name("1.cp", "-lb");
        assert!(dotted.starts_with("capi-lb-1-cp-"), "{dotted}");
        assert!(
            dotted
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
    }

    #[test]
    fn a_service_matches_itself_with_api_defaults_and_not_a_changed_field() {
        let desired = desired();
        assert!(service_matches(&desired, &desired));
        // What the API adds (cluster IP, defaults, other labels) is not a difference.
        let mut observed = desired.clone();
        let spec = observed.spec.get_or_insert_with(Default::default);
        spec.cluster_ip = Some("10.96.0.10".into());
        spec.external_traffic_policy = Some("Cluster".into());
        spec.ip_families = Some(vec!["IPv4".into()]);
        spec.selector = Some(BTreeMap::new());
        observed
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("other".into(), "x".into());
        assert!(service_matches(&observed, &desired));

        let changed = |change: fn(&mut Service)| {
            let mut observed = desired.clone();
            change(&mut observed);
            service_matches(&observed, &desired)
        };
        assert!(!changed(
            |s| s.spec.as_mut().unwrap().type_ = Some("ClusterIP".into())
        ));
        assert!(!changed(
            |s| s.spec.as_mut().unwrap().load_balancer_class = None
        ));
        assert!(!changed(|s| s
            .spec
            .as_mut()
            .unwrap()
            .load_balancer_source_ranges = None));
        assert!(!changed(|s| s
            .spec
            .as_mut()
            .unwrap()
            .ports
            .as_mut()
            .unwrap()[0]
            .port = 443));
        assert!(!changed(|s| {
            s.spec.as_mut().unwrap().selector =
                Some(BTreeMap::from([("app".to_string(), "x".to_string())]))
        }));
        assert!(!changed(|s| s.metadata.labels = None));
        assert!(!changed(|s| s.metadata.annotations = None));
        assert!(!changed(|s| s.metadata.owner_references = None));
        // Source ranges the desired Service drops are a difference too.
        let mut unrestricted = desired.clone();
        unrestricted
            .spec
            .as_mut()
            .unwrap()
            .load_balancer_source_ranges = None;
        assert!(!service_matches(&desired, &unrestricted));
    }

    #[test]
    fn a_field_capi_lb_applied_that_is_no_longer_desired_is_a_difference() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
        let desired = desired();
        let applied = |manager: &str, fields: serde_json::Value| {
            let mut observed = desired.clone();
            observed.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
                manager: Some(manager.into()),
                operation: Some("Apply".into()),
                fields_v1: Some(FieldsV1(fields)),
                ..Default::default()
            }]);
            service_matches(&observed, &desired)
        };
        let fields = |extra_spec: &str, extra_annotation: &str| {
            serde_json::json!({
                "f:metadata": {
                    "f:annotations": {
                        format!("f:{}", tags::NAME): {},
                        format!("f:{extra_annotation}"): {},
                    },
                    "f:labels": {format!("f:{}", tags::UID): {}},
                },
                "f:spec": {"f:type": {}, "f:ports": {}, format!("f:{extra_spec}"): {}},
            })
        };
        // Everything capi-lb applied is still desired.
        assert!(applied(
            FIELD_MANAGER,
            fields("loadBalancerClass", tags::NAMESPACE)
        ));
        // A requested address, or an annotation, that the desired Service dropped.
        assert!(!applied(
            FIELD_MANAGER,
            fields("loadBalancerIP", tags::NAMESPACE)
        ));
        assert!(!applied(
            FIELD_MANAGER,
            fields("type", "metallb.io/address-pool")
        ));
        // Someone else's fields are theirs.
        assert!(applied(
            "metallb",
            fields("loadBalancerIP", "metallb.io/address-pool")
        ));
    }

    #[test]
    fn ownership_is_the_uid_label_and_the_infrastructure_when_it_is_given() {
        let meta = |labels: BTreeMap<String, String>| ObjectMeta {
            labels: Some(labels),
            annotations: Some(annotations(&identity())),
            ..Default::default()
        };
        let ours = meta(labels(&identity(), Some("infra-uid")));
        assert!(owned(&ours, &identity(), Some("infra-uid")));
        assert!(!owned(&ours, &identity(), Some("other-infra")));
        // Made before the infrastructure label existed: any infrastructure object's.
        assert!(owned(
            &meta(labels(&identity(), None)),
            &identity(),
            Some("x")
        ));
        let mut other = identity();
        other.uid = "another".into();
        assert!(!owned(&ours, &other, Some("infra-uid")));
        assert!(!owned(&ObjectMeta::default(), &identity(), None));
    }

    #[test]
    fn ingress_has_ips_and_hostnames_in_order() {
        let mut service = desired();
        assert!(Ingress::of(&service).is_empty());
        service.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![
                    LoadBalancerIngress {
                        ip: Some("198.51.100.2".into()),
                        ..Default::default()
                    },
                    LoadBalancerIngress {
                        hostname: Some("lb.example.com".into()),
                        ..Default::default()
                    },
                    LoadBalancerIngress::default(),
                ]),
            }),
            ..Default::default()
        });
        assert_eq!(
            Ingress::of(&service),
            Ingress {
                ips: vec!["198.51.100.2".into()],
                hostnames: vec!["lb.example.com".into()],
            }
        );
    }

    /// The UID label alone does not make an object ours: the namespace and name annotations must
    /// be the LoadBalancer's too.
    #[test]
    fn ownership_needs_the_uid_the_namespace_and_the_name() {
        let meta = desired().metadata;
        assert!(owned(&meta, &identity(), Some("infra-uid")));
        assert!(!owned(&meta, &identity(), Some("other-infra")));
        for (key, value) in [(tags::NAMESPACE, "other-ns"), (tags::NAME, "other")] {
            let mut other = meta.clone();
            other
                .annotations
                .as_mut()
                .unwrap()
                .insert(key.to_string(), value.to_string());
            assert!(
                !owned(&other, &identity(), Some("infra-uid")),
                "{key}={value}"
            );
        }
        let mut bare = meta.clone();
        bare.annotations = None;
        assert!(
            !owned(&bare, &identity(), Some("infra-uid")),
            "the UID label alone"
        );
    }
}
