//! What `capi-lb simulate` admits of a manifest, as an apiserver would: capi-lb's kinds checked
//! against their CRD schema and CEL rules (defaults applied), the kinds the simulation needs, other
//! projects' kinds and Secrets kept as context; a kind or group that looks like a typo of capi-lb's,
//! and other built-in kinds, refused (pure).

use capi_lb_api::constants::{GROUP as LOADBALANCER_GROUP, INFRASTRUCTURE_GROUP};
use capi_lb_api::kinds;
use capi_lb_api::validation::FieldErrors;
use serde_json::{Value, json};

/// Kinds a manifest may contain to be simulated: capi-lb's own ([`kinds::all`]), then the others.
fn supported() -> String {
    let of = |group: &str| {
        let names = kinds::names_in(group);
        match names.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
            None => String::new(),
        }
    };
    format!(
        "{} ({LOADBALANCER_GROUP}/v1alpha1); {} ({INFRASTRUCTURE_GROUP}/v1alpha1); Machine and Cluster (cluster.x-k8s.io/v1beta2); Service (v1); EndpointSlice (discovery.k8s.io/v1); as context, not simulated: Secret, ConfigMap and Namespace (v1) and the kinds of other projects (e.g. OpenStackCluster, KamajiControlPlane, KubeadmControlPlane)",
        of(LOADBALANCER_GROUP),
        of(INFRASTRUCTURE_GROUP)
    )
}

/// capi-lb's API groups.
const GROUPS: [&str; 2] = [LOADBALANCER_GROUP, INFRASTRUCTURE_GROUP];

pub(super) fn describe(doc: &Value) -> String {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("object");
    let name = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("<no name>");
    let ns = doc
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    format!("{kind} {ns}/{name}")
}

fn field_errors(errors: FieldErrors) -> Vec<String> {
    errors.0.into_iter().map(|e| e.to_string()).collect()
}

/// The edit distance between `a` and `b` (case-insensitive), to tell a typo of one of capi-lb's
/// kinds or groups from another project's kind.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_ascii_lowercase().chars().collect();
    let b: Vec<char> = b.to_ascii_lowercase().chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// How a document is taken.
pub(super) enum Admitted {
    /// Loaded into the simulation, as the apiserver would store it.
    Simulated(Value),
    /// Accepted as context and not simulated (another project's kind, a Secret).
    Context,
}

/// Check a document of capi-lb's kind against its CRD schema and CEL rules; returns it with
/// defaults applied and without status.
fn validated(kind: &kinds::Kind, doc: &Value) -> Result<Admitted, Vec<String>> {
    let mut value = (kind.validate)(doc).map_err(field_errors)?;
    if let Some(map) = value.as_object_mut() {
        map.remove("status");
    }
    Ok(Admitted::Simulated(value))
}

/// Why a document of an unknown kind is refused rather than taken as context: it looks like one of
/// capi-lb's kinds or groups with a typo, or it is a built-in kind simulate does not run.
fn refusal(group: &str, api_version: &str, kind: &str) -> Option<String> {
    let unsupported = || {
        format!(
            "apiVersion/kind: {api_version:?}/{kind:?} is not supported; supported: {}",
            supported()
        )
    };
    if let Some(ours) = kinds::all()
        .iter()
        .map(|k| (k.resource)())
        .find(|r| r.kind == kind || (r.group == group && distance(&r.kind, kind) <= 3))
    {
        return Some(if ours.kind == kind {
            format!("apiVersion: {kind} is {}", ours.api_version)
        } else {
            format!(
                "kind: {kind:?} is not a kind of {group}; did you mean {}?",
                ours.kind
            )
        });
    }
    if group == LOADBALANCER_GROUP
        || (group == INFRASTRUCTURE_GROUP && kind.to_ascii_lowercase().ends_with("loadbalancer"))
    {
        return Some(unsupported());
    }
    if let Some(ours) = GROUPS
        .iter()
        .find(|g| **g != group && distance(g, group) <= 2)
    {
        return Some(format!(
            "apiVersion: {api_version:?} is not an API group; did you mean {ours}?"
        ));
    }
    // A built-in kind other than the simulated ones and the context ones.
    (!group.contains('.')).then(unsupported)
}

/// Check one document: what the simulation takes, what it keeps as context, or why it is refused.
pub(super) fn admit(mut doc: Value) -> Result<Admitted, Vec<String>> {
    let api_version = doc
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let kind = doc
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .is_none()
    {
        return Err(vec!["metadata.name: required".into()]);
    }
    if doc.pointer("/metadata/namespace").is_none() {
        doc["metadata"]["namespace"] = json!("default");
    }
    if let Some(ours) = kinds::find(&api_version, &kind) {
        return validated(&ours, &doc);
    }
    match (api_version.as_str(), kind.as_str()) {
        ("cluster.x-k8s.io/v1beta2", "Machine") => {
            let mut problems = Vec::new();
            for (i, a) in doc
                .pointer("/status/addresses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                if a.get("type").and_then(Value::as_str).is_none()
                    || a.get("address").and_then(Value::as_str).is_none()
                {
                    problems.push(format!(
                        "status.addresses[{i}]: needs string fields type and address"
                    ));
                }
            }
            if problems.is_empty() {
                Ok(Admitted::Simulated(doc))
            } else {
                Err(problems)
            }
        }
        ("cluster.x-k8s.io/v1beta2", "Cluster")
        | ("v1", "Service")
        | ("discovery.k8s.io/v1", "EndpointSlice") => Ok(Admitted::Simulated(doc)),
        ("cluster.x-k8s.io/v1beta1", "Machine" | "Cluster") => Err(vec![format!(
            "apiVersion: use cluster.x-k8s.io/v1beta2 (Cluster API contract v1beta2)"
        )]),
        ("v1", "Secret" | "ConfigMap" | "Namespace") => Ok(Admitted::Context),
        _ => {
            let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
            match refusal(group, &api_version, &kind) {
                Some(problem) => Err(vec![problem]),
                None => Ok(Admitted::Context),
            }
        }
    }
}
