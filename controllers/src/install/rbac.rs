//! Least-privilege RBAC: what each controller and provider is allowed to do, as data, turned into
//! the ClusterRole that `capi-lb manifests` writes. A test (`tests/tests/integration/rbac.rs`) runs the
//! controllers through their scenarios against the in-memory API, turns every request they make
//! into (group, resource, verb) with [`verb_of`] (plus `create` for a server-side apply that
//! creates its object, which a real apiserver also authorizes as `create`), and checks that the
//! generated ClusterRole allows exactly those: nothing they need is missing, nothing is granted they
//! do not use. The e2e suite runs the controller as the ServiceAccount bound to that ClusterRole on a
//! real apiserver, so the real authorizer has the last word.

use std::collections::BTreeSet;

use capi_lb_api::constants::{CAPI_GROUP, CONTROL_PLANE_GROUP, CONTROL_PLANE_KINDS, GROUP};
use capi_lb_providers::catalog;
use k8s_openapi::api::rbac::v1::PolicyRule;

/// One permission: an API group, a resource (with `/subresource`), a verb.
pub type Permission = (String, String, String);

/// What a component needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Component {
    /// Name, for the generated comments and docs.
    pub name: &'static str,
    /// Permissions other than watches.
    pub calls: Vec<(&'static str, &'static str, &'static [&'static str])>,
    /// Resources the controller watches (list + watch), set up by `run`: (group, resource).
    pub watches: Vec<(String, String)>,
}

/// Which parts of capi-lb the RBAC is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enabled {
    /// Provider names (`inmemory`, `kubedc`, ...: see the provider catalog).
    pub providers: Vec<String>,
    /// The `-ext` publisher for Services.
    pub external_endpoints: bool,
    /// Secure metrics (`--metrics-secure=true`): token and access reviews.
    pub secure_metrics: bool,
}

impl Enabled {
    /// Every provider (the in-memory one included) and the `-ext` publisher: what the tests run.
    pub fn all() -> Self {
        Self {
            providers: catalog::names().into_iter().map(String::from).collect(),
            external_endpoints: true,
            secure_metrics: true,
        }
    }

    /// What the shipped install enables: the providers of `run`'s default (not the in-memory one)
    /// and the `-ext` publisher.
    pub fn shipped() -> Self {
        Self {
            providers: catalog::shipped().into_iter().map(String::from).collect(),
            external_endpoints: true,
            secure_metrics: true,
        }
    }
}

/// The label that puts a part's ClusterRole into capi-lb's aggregated manager role: its value is
/// the part ([`CONTROLLER_PART`] or a provider's name).
pub const PART_LABEL: &str = "loadbalancer.cluster.x-k8s.io/aggregate-to-manager";
/// The part of the controllers themselves (the LoadBalancer controller and the `-ext` publisher).
pub const CONTROLLER_PART: &str = "controller";

fn watched(resources: &[(&str, &str)]) -> Vec<(String, String)> {
    resources
        .iter()
        .map(|(group, resource)| (group.to_string(), resource.to_string()))
        .collect()
}

/// The components `enabled` runs.
pub fn components(enabled: &Enabled) -> Vec<Component> {
    let mut out = vec![Component {
        name: "LoadBalancer controller",
        calls: vec![
            (GROUP, "loadbalancers", &["patch"]),
            (GROUP, "loadbalancers/status", &["patch"]),
            // Owner references with blockOwnerDeletion (published Services, infrastructure objects).
            (GROUP, "loadbalancers/finalizers", &["update"]),
            // Server-side apply of an object that does not exist yet is also authorized as
            // `create` (the `-ext` Service and EndpointSlices).
            (
                "",
                "services",
                &["get", "list", "create", "patch", "delete"],
            ),
            // The ingress of Services of capi-lb's load-balancer class.
            ("", "services/status", &["patch"]),
            (
                "discovery.k8s.io",
                "endpointslices",
                &["get", "list", "create", "patch", "delete"],
            ),
            // Owner reference from the EndpointSlices to their Service.
            ("", "services/finalizers", &["update"]),
            (CAPI_GROUP, "machines", &["list", "patch"]),
            // spec.reachability: the Cluster's CA (`tls.crt` of `<clusterName>-ca`, in the
            // LoadBalancer's namespace) to check a kube-apiserver's certificate with.
            ("", "secrets", &["get"]),
            // `spec.controlPlaneEndpoint` of the Cluster of a control-plane LoadBalancer.
            (CAPI_GROUP, "clusters", &["get", "patch"]),
            ("events.k8s.io", "events", &["create", "patch"]),
            // The ExternalDNS DNSEndpoint of spec.dns (server-side apply; the other LoadBalancers'
            // are listed for hostname conflicts).
            (
                "externaldns.k8s.io",
                "dnsendpoints",
                &["get", "list", "create", "patch", "delete"],
            ),
        ],
        watches: watched(&[
            (GROUP, "loadbalancers"),
            ("", "services"),
            ("discovery.k8s.io", "endpointslices"),
            (CAPI_GROUP, "machines"),
            (CAPI_GROUP, "clusters"),
            ("externaldns.k8s.io", "dnsendpoints"),
            // Their allowed-addresses annotation (the address policy).
            ("", "namespaces"),
        ]),
    }];
    // The Cluster's control-plane object (spec.controlPlaneRef), for its loadBalancerRef
    // annotation: the kinds of the self-hosted control-plane providers, named one by one (no
    // wildcard). Another kind is reported as ControlPlaneUnreadable until a rule adds it.
    out[0].calls.extend(
        CONTROL_PLANE_KINDS
            .iter()
            .map(|(_, plural)| (CONTROL_PLANE_GROUP, *plural, &["get"][..])),
    );
    for entry in enabled
        .providers
        .iter()
        .filter_map(|name| catalog::find(name))
    {
        out.push(Component {
            name: entry.title,
            calls: entry.calls.to_vec(),
            watches: entry.watches(),
        });
    }
    if enabled.external_endpoints {
        out.push(Component {
            name: "external endpoint publisher",
            calls: vec![
                // Created by server-side apply: `create` as well as `patch`.
                (
                    "",
                    "services",
                    &["get", "list", "create", "patch", "delete"],
                ),
                ("", "services/finalizers", &["update"]),
                (
                    "discovery.k8s.io",
                    "endpointslices",
                    &["get", "list", "create", "patch", "delete"],
                ),
                // Binding a Service of capi-lb's load-balancer class to its LoadBalancer.
                (GROUP, "loadbalancers", &["get", "patch"]),
                // Legacy Endpoints (--legacy-endpoints) and kube-dc's (--adopt-kube-dc).
                ("", "endpoints", &["get", "create", "patch", "delete"]),
                ("events.k8s.io", "events", &["create", "patch"]),
                // The ExternalDNS DNSEndpoint of a Service's hostnames annotation.
                (
                    "externaldns.k8s.io",
                    "dnsendpoints",
                    &["get", "list", "create", "patch", "delete"],
                ),
            ],
            watches: watched(&[
                ("", "services"),
                ("discovery.k8s.io", "endpointslices"),
                ("externaldns.k8s.io", "dnsendpoints"),
            ]),
        });
    }
    if enabled.secure_metrics {
        out.push(Component {
            name: "secure metrics",
            calls: vec![
                // Who a scraper's bearer token is, and whether they may get /metrics.
                ("authentication.k8s.io", "tokenreviews", &["create"]),
                ("authorization.k8s.io", "subjectaccessreviews", &["create"]),
            ],
            watches: Vec::new(),
        });
    }
    out
}

/// The permissions of `components`, flattened (watched resources get `list` and `watch`).
fn flatten(components: Vec<Component>) -> BTreeSet<Permission> {
    let mut out = BTreeSet::new();
    for c in components {
        for (group, resource, verbs) in c.calls {
            for verb in verbs {
                out.insert((group.to_string(), resource.to_string(), verb.to_string()));
            }
        }
        for (group, resource) in c.watches {
            for verb in ["list", "watch"] {
                out.insert((group.to_string(), resource.to_string(), verb.to_string()));
            }
        }
    }
    out
}

/// Every permission `enabled` needs.
pub fn permissions(enabled: &Enabled) -> BTreeSet<Permission> {
    flatten(components(enabled))
}

/// The rules of each part `enabled` runs, by part: [`CONTROLLER_PART`] (the controllers) and each
/// enabled provider's name. Each part is a ClusterRole of its own, aggregated into the manager role
/// when the install enables it, so the role follows `--providers` (also under clusterctl, whose
/// variable names the parts the aggregation selects).
pub fn parts(enabled: &Enabled) -> Vec<(String, Vec<PolicyRule>)> {
    let controllers = Enabled {
        providers: Vec::new(),
        ..enabled.clone()
    };
    let mut out = vec![(
        CONTROLLER_PART.to_string(),
        to_rules(permissions(&controllers)),
    )];
    let all = components(enabled);
    for name in &enabled.providers {
        let Some(entry) = catalog::find(name) else {
            continue;
        };
        let provider = all
            .iter()
            .filter(|c| c.name == entry.title)
            .cloned()
            .collect();
        out.push((name.clone(), to_rules(flatten(provider))));
    }
    out
}

/// The ClusterRole rules: one rule per (group, resource) with its verbs, sorted.
pub fn rules(enabled: &Enabled) -> Vec<PolicyRule> {
    to_rules(permissions(enabled))
}

fn to_rules(permissions: BTreeSet<Permission>) -> Vec<PolicyRule> {
    let mut grouped: std::collections::BTreeMap<(String, String), BTreeSet<String>> =
        std::collections::BTreeMap::new();
    for (group, resource, verb) in permissions {
        grouped.entry((group, resource)).or_default().insert(verb);
    }
    grouped
        .into_iter()
        .map(|((group, resource), verbs)| PolicyRule {
            api_groups: Some(vec![group]),
            resources: Some(vec![resource]),
            verbs: verbs.into_iter().collect(),
            ..Default::default()
        })
        .collect()
}

/// The Lease permissions of leader election (a namespaced Role in capi-lb's namespace).
pub fn leader_election_rules() -> Vec<PolicyRule> {
    vec![PolicyRule {
        api_groups: Some(vec!["coordination.k8s.io".into()]),
        resources: Some(vec!["leases".into()]),
        verbs: vec!["create".into(), "get".into(), "patch".into()],
        ..Default::default()
    }]
}

/// The (group, resource, verb) of a request, from its method, path and query; `None` for paths
/// that are not resource requests (discovery).
pub fn verb_of(method: &str, path: &str, query: &str) -> Option<Permission> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let (group, rest) = match parts.first() {
        Some(&"api") => (String::new(), parts.get(2..)?),
        Some(&"apis") => ((*parts.get(1)?).to_string(), parts.get(3..)?),
        _ => return None,
    };
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, named, sub) = match rest {
        [resource] => (*resource, false, None),
        [resource, _name] => (*resource, true, None),
        [resource, _name, sub] => (*resource, true, Some(*sub)),
        _ => return None,
    };
    let resource = match sub {
        Some(sub) => format!("{resource}/{sub}"),
        None => resource.to_string(),
    };
    let watching = query
        .split('&')
        .any(|q| q == "watch=true" || q == "watch=1");
    let verb = match (method, named) {
        ("GET", _) if watching => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", false) => "create",
        ("PUT", true) => "update",
        ("PATCH", true) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return None,
    };
    Some((group, resource, verb.to_string()))
}

/// The `finalizers` permission an owner reference with `blockOwnerDeletion` to `kind` needs.
pub fn finalizers_of(kind: &str) -> Option<Permission> {
    let (group, resource) = match kind {
        "LoadBalancer" => (GROUP.to_string(), "loadbalancers".to_string()),
        "Service" => (String::new(), "services".to_string()),
        other => {
            let infra = (catalog::for_kind(other)?.infrastructure)();
            (infra.group, infra.plural)
        }
    };
    Some((
        group,
        format!("{resource}/finalizers"),
        "update".to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(g: &str, r: &str, v: &str) -> Option<Permission> {
        Some((g.into(), r.into(), v.into()))
    }

    #[test]
    fn requests_map_to_verbs() {
        assert_eq!(
            verb_of("GET", "/api/v1/namespaces/default/services/x", ""),
            p("", "services", "get")
        );
        assert_eq!(
            verb_of(
                "GET",
                "/api/v1/namespaces/default/services",
                "labelSelector=a"
            ),
            p("", "services", "list")
        );
        assert_eq!(
            verb_of(
                "GET",
                "/apis/cluster.x-k8s.io/v1beta2/machines",
                "watch=true"
            ),
            p("cluster.x-k8s.io", "machines", "watch")
        );
        assert_eq!(
            verb_of(
                "PATCH",
                "/apis/loadbalancer.cluster.x-k8s.io/v1alpha1/namespaces/default/loadbalancers/cp/status",
                ""
            ),
            p(
                "loadbalancer.cluster.x-k8s.io",
                "loadbalancers/status",
                "patch"
            )
        );
        assert_eq!(
            verb_of(
                "POST",
                "/apis/events.k8s.io/v1/namespaces/default/events",
                ""
            ),
            p("events.k8s.io", "events", "create")
        );
        assert_eq!(
            verb_of("DELETE", "/api/v1/namespaces/default/endpoints/x", ""),
            p("", "endpoints", "delete")
        );
        assert_eq!(verb_of("GET", "/apis/kube-dc.com", ""), None, "discovery");
    }

    #[test]
    fn rules_follow_what_is_enabled() {
        let all = permissions(&Enabled::all());
        assert!(all.contains(&("kube-dc.com".into(), "eips".into(), "create".into())));
        let without = permissions(&Enabled {
            providers: vec!["inmemory".into()],
            external_endpoints: false,
            secure_metrics: false,
        });
        assert!(!without.iter().any(|(_, r, _)| r == "tokenreviews"));
        assert!(!without.iter().any(|(g, _, _)| g == "kube-dc.com"));
        assert!(!without.iter().any(|(_, r, _)| r == "endpoints"));
        for rule in rules(&Enabled::all()) {
            assert!(!rule.verbs.iter().any(|v| v == "*"));
            assert!(!rule.resources.iter().flatten().any(|r| r == "*"));
        }
    }
}
