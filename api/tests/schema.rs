//! The generated CRD schemas and CEL rules, evaluated client-side: defaults apply, valid objects pass,
//! and every rule rejects what it is meant to reject with an error naming the field.
// Integration tests: helpers panic on broken fixtures, which is the failure we want.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capi_lb_api::constants::{CAPI_CONTRACT_LABEL, LABEL_CLUSTERCTL};
use capi_lb_api::validation::{FieldErrors, parse};
use capi_lb_api::{InMemoryLoadBalancer, LoadBalancer, crds};
use serde_json::{Value, json};

fn lb(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1",
        "kind": "LoadBalancer",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
}

fn infra_ref() -> Value {
    json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "InMemoryLoadBalancer", "name": "cp"})
}

fn errors_of(obj: Value) -> FieldErrors {
    parse::<LoadBalancer>(&obj).expect_err("expected the object to be rejected")
}

fn assert_rejected(obj: Value, field: &str, fragment: &str) {
    let errors = errors_of(obj);
    assert!(
        errors
            .0
            .iter()
            .any(|e| e.field == field && e.message.contains(fragment)),
        "expected an error on {field} containing {fragment:?}, got: {errors}"
    );
}

#[test]
fn minimal_loadbalancer_gets_every_default() {
    let parsed: LoadBalancer = parse(&lb("cp", json!({"infrastructureRef": infra_ref()}))).unwrap();
    let spec = &parsed.spec;
    assert_eq!(spec.ports.len(), 1);
    assert_eq!(spec.ports[0].port, 6443);
    assert_eq!(spec.ports[0].name, "kube-apiserver");
    assert_eq!(spec.target_kind.kind, "Machine");
    assert_eq!(spec.target_kind.api_group, "cluster.x-k8s.io");
    assert_eq!(spec.target_address_types.len(), 2);
    assert!(spec.publication.enabled);
    assert_eq!(spec.publication.suffix, "-ext");
    assert_eq!(parsed.published_service_name().as_deref(), Some("cp-ext"));
    assert_eq!(spec.drain_seconds, 30);
    assert!(spec.readiness_gates.is_empty());
}

#[test]
fn infrastructure_ref_is_required() {
    let errors = errors_of(lb("cp", json!({})));
    assert!(errors.to_string().contains("infrastructureRef"), "{errors}");
}

#[test]
fn port_out_of_range_is_rejected() {
    assert_rejected(
        lb(
            "cp",
            json!({"infrastructureRef": infra_ref(), "ports": [{"name": "api", "port": 70000}]}),
        ),
        "spec.ports[0].port",
        "65535",
    );
}

#[test]
fn duplicate_port_names_are_rejected_by_cel() {
    assert_rejected(
        lb(
            "cp",
            json!({"infrastructureRef": infra_ref(), "ports": [
                {"name": "api", "port": 6443}, {"name": "api", "port": 443}
            ]}),
        ),
        "spec.ports",
        "port names must be unique",
    );
}

#[test]
fn duplicate_port_protocol_pairs_are_rejected_but_tcp_and_udp_may_share_a_port() {
    assert_rejected(
        lb(
            "cp",
            json!({"infrastructureRef": infra_ref(), "ports": [
                {"name": "a", "port": 53}, {"name": "b", "port": 53}
            ]}),
        ),
        "spec.ports",
        "each port and protocol pair",
    );
    parse::<LoadBalancer>(&lb(
        "dns",
        json!({"infrastructureRef": infra_ref(), "ports": [
            {"name": "dns-tcp", "port": 53}, {"name": "dns-udp", "port": 53, "protocol": "UDP"}
        ]}),
    ))
    .unwrap();
}

#[test]
fn port_names_must_be_iana_service_names() {
    assert_rejected(
        lb(
            "cp",
            json!({"infrastructureRef": infra_ref(), "ports": [{"name": "6443", "port": 6443}]}),
        ),
        "spec.ports[0].name",
        "letter",
    );
    assert_rejected(
        lb(
            "cp",
            json!({"infrastructureRef": infra_ref(), "ports": [{"name": "Api", "port": 6443}]}),
        ),
        "spec.ports[0].name",
        "does not match",
    );
}

#[test]
fn published_name_that_is_not_a_dns_label_is_rejected_by_cel() {
    let long = "a".repeat(60);
    assert_rejected(
        lb(&long, json!({"infrastructureRef": infra_ref()})),
        "spec.publication.suffix",
        &format!("{long}-ext must be a DNS label"),
    );
    // A dotted name is a valid object name but not a valid Service name.
    assert_rejected(
        lb("cp.example", json!({"infrastructureRef": infra_ref()})),
        "spec.publication.suffix",
        "must be a DNS label",
    );
    // Longer than a label value: refused with or without publication.
    let dotted = format!("{}.{}", "a".repeat(40), "b".repeat(30));
    assert_rejected(
        lb(
            &dotted,
            json!({"infrastructureRef": infra_ref(), "publication": {"enabled": false}}),
        ),
        "",
        "is longer than 63 characters",
    );
    // Without publication the same names are fine.
    parse::<LoadBalancer>(&lb(
        &long,
        json!({"infrastructureRef": infra_ref(), "publication": {"enabled": false}}),
    ))
    .unwrap();
    // 59 characters plus "-ext" is exactly 63.
    parse::<LoadBalancer>(&lb(
        &"a".repeat(59),
        json!({"infrastructureRef": infra_ref()}),
    ))
    .unwrap();
}

#[test]
fn unknown_fields_are_reported() {
    assert_rejected(
        lb(
            "cp",
            json!({"infrastructureRef": infra_ref(), "infrastructureref": {}}),
        ),
        "spec.infrastructureref",
        "unknown field",
    );
}

#[test]
fn bad_infrastructure_ref_is_rejected() {
    assert_rejected(
        lb(
            "cp",
            json!({"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "inMemory", "name": "cp"}}),
        ),
        "spec.infrastructureRef.kind",
        "does not match",
    );
}

#[test]
fn duplicate_address_types_are_rejected() {
    assert_rejected(
        lb(
            "cp",
            json!({"infrastructureRef": infra_ref(), "targetAddressTypes": ["InternalIP", "InternalIP"]}),
        ),
        "spec.targetAddressTypes",
        "unique",
    );
}

#[test]
fn drain_seconds_and_readiness_gates_are_checked() {
    assert_rejected(
        lb(
            "cp",
            json!({"infrastructureRef": infra_ref(), "drainSeconds": -1}),
        ),
        "spec.drainSeconds",
        "",
    );
    assert_rejected(
        lb(
            "cp",
            json!({"infrastructureRef": infra_ref(), "drainSeconds": 3601}),
        ),
        "spec.drainSeconds",
        "",
    );
    assert_rejected(
        lb(
            "cp",
            json!({"infrastructureRef": infra_ref(), "readinessGates": [
                {"conditionType": "APIServerPodHealthy"}, {"conditionType": "APIServerPodHealthy"}]}),
        ),
        "spec.readinessGates",
        "unique",
    );
    assert_rejected(
        lb(
            "cp",
            json!({"infrastructureRef": infra_ref(), "readinessGates": [{"conditionType": "not a type"}]}),
        ),
        "spec.readinessGates[0].conditionType",
        "",
    );
    let parsed: LoadBalancer = parse(&lb(
        "cp",
        json!({"infrastructureRef": infra_ref(), "drainSeconds": 0, "readinessGates": [
            {"conditionType": "APIServerPodHealthy"}, {"conditionType": "example.com/Serving"}]}),
    ))
    .unwrap();
    assert_eq!(parsed.spec.drain_seconds, 0);
    assert_eq!(parsed.spec.readiness_gates.len(), 2);
}

fn inmemory(spec: Value) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "InMemoryLoadBalancer",
        "metadata": {"name": "cp", "namespace": "default"},
        "spec": spec,
    })
}

#[test]
fn inmemory_defaults_and_rules() {
    let parsed: InMemoryLoadBalancer = parse(&inmemory(json!({}))).unwrap();
    assert_eq!(
        parsed.spec.address_pools,
        vec!["203.0.113.0/24".to_string()]
    );
    let errors = parse::<InMemoryLoadBalancer>(&inmemory(json!({"addressPools": ["not-a-cidr"]})))
        .unwrap_err();
    assert!(
        errors.0.iter().any(|e| e.field == "spec.addressPools"),
        "{errors}"
    );
    let errors = parse::<InMemoryLoadBalancer>(&inmemory(json!({"addressPools": []}))).unwrap_err();
    assert!(
        errors
            .to_string()
            .contains("at least one address pool or a hostname"),
        "{errors}"
    );
    parse::<InMemoryLoadBalancer>(&inmemory(
        json!({"addressPools": [], "hostname": "lb.example.com"}),
    ))
    .unwrap();
    parse::<InMemoryLoadBalancer>(&inmemory(
        json!({"addressPools": ["203.0.113.0/24", "2001:db8::/64"]}),
    ))
    .unwrap();
}

#[test]
fn crds_carry_contract_label_names_and_columns() {
    for crd in crds() {
        let labels = crd.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get(CAPI_CONTRACT_LABEL).map(String::as_str),
            Some("v1alpha1")
        );
        // clusterctl move only looks at kinds whose CRD carries its label.
        assert_eq!(labels.get(LABEL_CLUSTERCTL).map(String::as_str), Some(""));
        let name = crd.metadata.name.clone().unwrap();
        assert_eq!(
            name,
            format!("{}.{}", crd.spec.names.plural, crd.spec.group)
        );
        let version = &crd.spec.versions[0];
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
    }
    let lb_crd = LoadBalancer::crd_for_test();
    let columns: Vec<String> = lb_crd.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.to_uppercase())
        .collect();
    assert_eq!(
        columns,
        ["READY", "ENDPOINT", "ADDRESS", "TARGETS", "PROVIDER", "AGE"]
    );
}

#[test]
fn every_field_has_a_description() {
    fn walk(schema: &Value, path: &str, missing: &mut Vec<String>) {
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (name, child) in props {
                let child_path = format!("{path}.{name}");
                let top_level =
                    path.is_empty() && matches!(name.as_str(), "apiVersion" | "kind" | "metadata");
                if !top_level && child.get("description").is_none() {
                    missing.push(child_path.clone());
                }
                walk(child, &child_path, missing);
            }
        }
        if let Some(items) = schema.get("items") {
            walk(items, &format!("{path}[]"), missing);
        }
    }
    for crd in crds() {
        let schema = serde_json::to_value(
            crd.spec.versions[0]
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap(),
        )
        .unwrap();
        let mut missing = Vec::new();
        // Types from k8s-openapi (LabelSelector, Condition) carry their own upstream descriptions.
        walk(&schema["properties"]["spec"], "spec", &mut missing);
        assert!(
            missing.is_empty(),
            "{}: fields without a description: {missing:?}",
            crd.spec.names.kind
        );
    }
}

trait CrdForTest {
    fn crd_for_test()
    -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
}
impl CrdForTest for LoadBalancer {
    fn crd_for_test()
    -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition
    {
        <LoadBalancer as kube::CustomResourceExt>::crd()
    }
}

/// Every CEL rule passes the static checks an apiserver applies when the CRD is installed: only
/// variables valid in CRD rules, bounded lists and strings, estimated cost within the budget.
#[test]
fn cel_rules_pass_static_analysis() {
    use kube::core::cel::{ScopeContext, analyze_rule, compile_schema};
    fn walk(schema: &Value, path: &str, checked: &mut usize, problems: &mut Vec<String>) {
        if let Some(rules) = schema
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
        {
            let compiled = compile_schema(schema);
            for rule in rules {
                let rule = rule["rule"].as_str().unwrap();
                *checked += 1;
                for w in analyze_rule(rule, &compiled, ScopeContext::CrdValidation) {
                    // kube-cel reports the variables bound by macros (`self.all(p, ...)`) as out of
                    // scope; those are fine. Any other variable, and every cost or bounds warning,
                    // is a real problem.
                    let bound_by_macro = w
                        .message
                        .strip_prefix("variable '")
                        .and_then(|m| m.split('\'').next())
                        .is_some_and(|var| rule.contains(&format!("({var},")));
                    if !bound_by_macro {
                        problems.push(format!("{path}: {rule}: {} ({:?})", w.message, w.kind));
                    }
                }
            }
        }
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (name, child) in props {
                walk(child, &format!("{path}.{name}"), checked, problems);
            }
        }
        if let Some(items) = schema.get("items") {
            walk(items, &format!("{path}[]"), checked, problems);
        }
    }
    let mut checked = 0;
    let mut problems = Vec::new();
    for crd in crds() {
        let schema = serde_json::to_value(
            crd.spec.versions[0]
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap(),
        )
        .unwrap();
        walk(&schema, &crd.spec.names.kind, &mut checked, &mut problems);
    }
    assert!(checked >= 7, "only {checked} rules found");
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn kubedc_defaults_and_rules() {
    use capi_lb_api::KubeDCLoadBalancer;
    use capi_lb_api::kubedc::ExternalNetworkType;
    let obj = |spec: Value| {
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "KubeDCLoadBalancer",
            "metadata": {"name": "cp", "namespace": "default"},
            "spec": spec,
        })
    };
    let parsed: KubeDCLoadBalancer = parse(&obj(json!({}))).unwrap();
    assert_eq!(
        parsed.spec.external_network_type,
        ExternalNetworkType::Cloud
    );
    assert!(parsed.spec.eip_name.is_none());
    let parsed: KubeDCLoadBalancer = parse(&obj(
        json!({"externalNetworkType": "public", "eipName": "default-gw"}),
    ))
    .unwrap();
    assert_eq!(parsed.spec.eip_name.as_deref(), Some("default-gw"));
    let errors = parse::<KubeDCLoadBalancer>(&obj(json!({"externalNetworkType": "internet"})))
        .expect_err("unknown network type");
    assert!(
        errors
            .0
            .iter()
            .any(|e| e.field == "spec.externalNetworkType"),
        "{errors}"
    );
    let errors = parse::<KubeDCLoadBalancer>(&obj(json!({"eipName": "Not_A_Name"})))
        .expect_err("invalid EIp name");
    assert!(
        errors.0.iter().any(|e| e.field == "spec.eipName"),
        "{errors}"
    );
}

#[test]
fn octavia_defaults_and_rules() {
    use capi_lb_api::OctaviaLoadBalancer;
    use capi_lb_api::octavia::{Algorithm, MonitorType};
    let obj = |spec: Value| {
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "OctaviaLoadBalancer",
            "metadata": {"name": "cp", "namespace": "default"},
            "spec": spec,
        })
    };
    let parsed: OctaviaLoadBalancer = parse(&obj(json!({
        "credentials": {"secretName": "cloud"},
        "vip": {"subnetID": "8c1b7a84-6b36-4d1b-9f3f-0d5e8a4f2b11"},
    })))
    .unwrap();
    assert_eq!(parsed.spec.credentials.key, "clouds.yaml");
    assert_eq!(parsed.spec.credentials.cloud, "openstack");
    assert_eq!(parsed.spec.algorithm, Algorithm::RoundRobin);
    assert_eq!(parsed.spec.health_monitor.type_, MonitorType::Tcp);
    // A member out after two failed checks 5 s apart.
    let hm = &parsed.spec.health_monitor;
    assert_eq!(
        (
            hm.delay_seconds,
            hm.timeout_seconds,
            hm.max_retries,
            hm.max_retries_down
        ),
        (5, 3, 2, 2)
    );
    let rejected = |spec: Value, fragment: &str| {
        let errors = parse::<OctaviaLoadBalancer>(&obj(spec)).expect_err("should be rejected");
        assert!(
            errors.to_string().contains(fragment),
            "{fragment:?} in {errors}"
        );
    };
    rejected(
        json!({"credentials": {"secretName": "cloud"}, "vip": {}}),
        "exactly one of networkID and subnetID",
    );
    rejected(
        json!({"credentials": {"secretName": "cloud"}, "vip": {"networkID": "n", "subnetID": "s"}}),
        "exactly one of networkID and subnetID",
    );
    rejected(
        json!({"credentials": {"secretName": "cloud"}, "vip": {"subnetID": "s"},
               "floatingIp": {"networkID": "ext"}}),
        "unknown field",
    );
    rejected(
        json!({"credentials": {"secretName": "cloud"}, "vip": {"subnetID": "s"},
               "floatingIP": {}}),
        "set networkID (allocate a floating IP from it), address",
    );
    // Both: the given address, which must be on that network (a template names the network and
    // takes an owned address when one is given); null is no value, as the apiserver prunes it.
    for floating_ip in [
        json!({"networkID": "ext", "address": "192.0.2.7"}),
        json!({"networkID": "ext", "address": null}),
    ] {
        parse::<OctaviaLoadBalancer>(&obj(json!({"credentials": {"secretName": "cloud"},
            "vip": {"subnetID": "s"}, "floatingIP": floating_ip})))
        .unwrap_or_else(|e| panic!("{floating_ip}: {e}"));
    }
    rejected(
        json!({"credentials": {"secretName": "cloud"}, "vip": {"subnetID": "s"},
               "floatingIP": {"networkID": null, "address": null}}),
        "set networkID (allocate a floating IP from it), address",
    );
    rejected(
        json!({"credentials": {"secretName": "cloud"}, "vip": {"subnetID": "s"},
               "provider": "ovn", "listener": {"allowedCIDRs": ["10.0.0.0/8"]}}),
        "not supported by the ovn provider",
    );
    rejected(
        json!({"credentials": {"secretName": "cloud"}, "vip": {"subnetID": "s"},
               "listener": {"allowedCIDRs": ["not-a-cidr"]}}),
        "must be a CIDR",
    );
    rejected(
        json!({"credentials": {"secretName": "cloud"}, "vip": {"subnetID": "s"},
               "healthMonitor": {"type": "TCP", "urlPath": "/healthz"}}),
        "urlPath needs type HTTP or HTTPS",
    );
}
