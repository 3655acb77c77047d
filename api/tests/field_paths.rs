//! The `fieldPath` of every CEL rule in the CRDs is one a real apiserver accepts (a path relative to
//! the schema node carrying the rule, starting with `.`, that resolves inside that node), and a rule
//! that fails is reported client-side on the same field the apiserver reports.
// Integration tests: helpers panic on broken fixtures, which is the failure we want.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use capi_lb_api::validation::{FieldErrors, Validated, parse, resolve_field_path};
use capi_lb_api::{LoadBalancer, OctaviaLoadBalancer, crds};
use serde_json::{Value, json};

/// Every rule with a `fieldPath` under `schema` (at `path`): `(node path, fieldPath, problem)`.
fn check_field_paths(schema: &Value, path: &str, out: &mut Vec<(String, String, Option<String>)>) {
    if let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for rule in rules {
            let Some(field_path) = rule.get("fieldPath") else {
                continue;
            };
            let problem = match field_path.as_str() {
                None => Some("fieldPath is not a string".to_string()),
                Some(p) if !p.starts_with('.') => {
                    Some("does not start with `.` (it is relative to the rule's node)".into())
                }
                Some(p) => resolve_field_path(schema, p).err(),
            };
            out.push((
                path.to_string(),
                field_path.as_str().unwrap_or_default().to_string(),
                problem,
            ));
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            check_field_paths(child, &format!("{path}.properties[{name}]"), out);
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(child) = schema.get(key).filter(|c| c.is_object()) {
            check_field_paths(child, &format!("{path}.{key}"), out);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(children) = schema.get(key).and_then(Value::as_array) {
            for (i, child) in children.iter().enumerate() {
                check_field_paths(child, &format!("{path}.{key}[{i}]"), out);
            }
        }
    }
}

/// Every rule with a `fieldPath` in the schemas of every version of a CRD (given as JSON), with the
/// apiserver's name of the place: `<kind> spec.versions[i].schema.openAPIV3Schema...`.
fn check_crd(crd: &Value, out: &mut Vec<(String, String, Option<String>)>) {
    let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or("?");
    let versions = crd["spec"]["versions"].as_array().unwrap();
    for (i, version) in versions.iter().enumerate() {
        let schema = &version["schema"]["openAPIV3Schema"];
        assert!(schema.is_object(), "{kind} version {i} has no schema");
        check_field_paths(
            schema,
            &format!("{kind} spec.versions[{i}].schema.openAPIV3Schema"),
            out,
        );
    }
}

fn problems(found: &[(String, String, Option<String>)]) -> Vec<String> {
    found
        .iter()
        .filter_map(|(path, field_path, problem)| {
            problem
                .as_ref()
                .map(|p| format!("{path}.x-kubernetes-validations fieldPath {field_path:?}: {p}"))
        })
        .collect()
}

/// The CRDs as generated (what `capi-lb crds` and `capi-lb manifests` print).
#[test]
fn generated_crd_field_paths_resolve_against_the_rules_node() {
    let mut found = Vec::new();
    for crd in crds() {
        check_crd(&serde_json::to_value(&crd).unwrap(), &mut found);
    }
    // The rules on LoadBalancer (root and spec) and OctaviaLoadBalancer's spec.
    assert!(
        found.len() >= 3,
        "only {} fieldPaths found: {found:?}",
        found.len()
    );
    let problems = problems(&found);
    assert!(
        problems.is_empty(),
        "a real apiserver refuses these CRDs:\n{}",
        problems.join("\n")
    );
}

/// `text` with every clusterctl variable `${NAME:=default}` replaced by its default.
fn with_defaults(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = start + rest[start..].find('}').expect("a closed ${...}");
        let (_, default) = rest[start + 2..end]
            .split_once(":=")
            .expect("every variable of the components has a default");
        out.push_str(default);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The CRDs as committed under `config/` (what users apply): every CRD document in every YAML file.
#[test]
fn committed_crd_field_paths_resolve_against_the_rules_node() {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config");
    let mut files = vec![config.join(format!(
        "clusterctl/infrastructure-capi-lb/v{}/infrastructure-components.yaml",
        env!("CARGO_PKG_VERSION")
    ))];
    for entry in std::fs::read_dir(config.join("crd/bases")).unwrap() {
        files.push(entry.unwrap().path());
    }
    let mut found = Vec::new();
    let mut crds_seen = 0;
    for file in &files {
        // clusterctl replaces its variables before it parses the components: so does this test,
        // with their defaults (`${NAME:=default}`).
        let text = with_defaults(&std::fs::read_to_string(file).unwrap());
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for doc in docs
            .iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
        {
            crds_seen += 1;
            assert_ne!(
                doc["spec"]["names"]["kind"],
                "InMemoryLoadBalancer",
                "{}: no shipped manifest installs the in-memory provider",
                file.display()
            );
            check_crd(doc, &mut found);
        }
    }
    // Every CRD but the in-memory provider's (tests and demos only), in the CRD files and the
    // clusterctl components each.
    assert_eq!(
        crds_seen,
        2 * (crds().len() - 1),
        "CRD documents in {files:?}"
    );
    assert!(found.len() >= 6, "only {} fieldPaths found", found.len());
    let problems = problems(&found);
    assert!(
        problems.is_empty(),
        "a real apiserver refuses these committed CRDs:\n{}",
        problems.join("\n")
    );
}

/// The client-side validators accept the CRDs: a fieldPath the apiserver would refuse makes them fail.
#[test]
fn validators_build() {
    LoadBalancer::validator().unwrap();
    OctaviaLoadBalancer::validator().unwrap();
}

fn fields(errors: &FieldErrors) -> Vec<&str> {
    errors.0.iter().map(|e| e.field.as_str()).collect()
}

/// A failed rule with a fieldPath is reported on `<path of the rule's node>` + the fieldPath without
/// its leading dot, as the apiserver reports it (`spec.controlPlane`, not `.controlPlane` or
/// `spec.spec.controlPlane`).
#[test]
fn failed_rules_name_the_field_the_apiserver_names() {
    let infra_ref = json!({"apiGroup": "infrastructure.cluster.x-k8s.io",
                           "kind": "InMemoryLoadBalancer", "name": "cp"});
    let lb = |name: &str, spec: Value| {
        json!({"apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
               "metadata": {"name": name, "namespace": "default"}, "spec": spec})
    };

    // Rule on the root, fieldPath `.spec.publication.suffix`.
    let errors = parse::<LoadBalancer>(&lb("cp.example", json!({"infrastructureRef": infra_ref})))
        .unwrap_err();
    assert_eq!(fields(&errors), ["spec.publication.suffix"], "{errors}");

    // Rule on spec, fieldPath `.controlPlane`.
    let errors = parse::<LoadBalancer>(&lb(
        "cp",
        json!({"infrastructureRef": infra_ref, "controlPlane": {}}),
    ))
    .unwrap_err();
    assert_eq!(fields(&errors), ["spec.controlPlane"], "{errors}");
    assert_eq!(
        errors.to_string(),
        "spec.controlPlane: spec.controlPlane needs spec.clusterName"
    );

    // Rule on OctaviaLoadBalancer's spec, fieldPath `.listener.allowedCIDRs`.
    let errors = parse::<OctaviaLoadBalancer>(&json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "OctaviaLoadBalancer",
        "metadata": {"name": "cp", "namespace": "default"},
        "spec": {"credentials": {"secretName": "cloud"}, "vip": {"subnetID": "s"},
                 "provider": "ovn", "listener": {"allowedCIDRs": ["10.0.0.0/8"]}},
    }))
    .unwrap_err();
    assert_eq!(fields(&errors), ["spec.listener.allowedCIDRs"], "{errors}");
}
