//! The summary `capi-lb simulate` ends with, answering what an evaluator asks first: for each
//! LoadBalancer, whether it is Ready, its endpoint and where that comes from, its targets (active
//! of selected) and its Warnings; for each Cluster, the `spec.controlPlaneEndpoint` that goes into
//! its certificates, who wrote it, or why capi-lb did not.

use capi_lb_api::LoadBalancer;
use capi_lb_api::capi::Cluster;
use capi_lb_api::constants::ANNOTATION_LOAD_BALANCER_REF;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::Value;

use crate::class;
use crate::events::TimelineEntry;

/// Ready with its endpoint, or not Ready with the reason and message of its Ready condition.
pub fn readiness(lb: &LoadBalancer) -> String {
    let Some(status) = &lb.status else {
        return "not Ready: never reconciled".into();
    };
    if status.ready {
        return match &status.endpoint {
            Some(endpoint) => format!(
                "Ready, endpoint {}:{} ({})",
                endpoint.host,
                endpoint.port,
                endpoint_source(lb)
            ),
            None => "Ready".into(),
        };
    }
    let Some(ready) = status.conditions.iter().find(|c| c.type_ == "Ready") else {
        return "not Ready".into();
    };
    // Ready's message is the one of the condition that holds it back: name that condition.
    match status
        .conditions
        .iter()
        .find(|c| c.type_ != "Ready" && c.message == ready.message)
    {
        Some(cause) => format!(
            "not Ready: {} is {} ({}): {}",
            cause.type_, cause.status, cause.reason, cause.message
        ),
        None => format!("not Ready ({}): {}", ready.reason, ready.message),
    }
}

/// Where the LoadBalancer's endpoint comes from: `spec.endpoint`, the provider's address (with
/// publication off), or the stable `-ext` name and the addresses it resolves to.
fn endpoint_source(lb: &LoadBalancer) -> String {
    let addresses: Vec<&str> = lb
        .status
        .iter()
        .flat_map(|s| &s.addresses)
        .map(|a| a.address.as_str())
        .collect();
    let host = lb
        .status
        .as_ref()
        .and_then(|s| s.endpoint.as_ref())
        .map_or("", |e| e.host.as_str());
    if lb.spec.endpoint.is_some() {
        "given in spec.endpoint".into()
    } else if addresses.contains(&host) {
        "the provider's address".into()
    } else if addresses.is_empty() {
        "the stable -ext name".into()
    } else {
        format!(
            "the stable -ext name, resolving to {}",
            addresses.join(", ")
        )
    }
}

/// `active/selected targets`, and what the targets are when none are Machines of the LoadBalancer.
fn targets(lb: &LoadBalancer) -> String {
    let (active, all) = lb
        .status
        .as_ref()
        .map_or((0, 0), |s| (s.active_targets.len(), s.targets.len()));
    let mut out = format!("{active}/{all} targets active");
    if all == 0 && lb.annotations().contains_key(class::ANNOTATION_SERVICE) {
        out.push_str(
            " (the Service's endpoints are its targets: whoever makes them does not run here)",
        );
    }
    out
}

/// The Warnings of `object` (`Kind/name`) in the timeline: `none`, or their count and reasons.
fn warnings(timeline: &[TimelineEntry], object: &str) -> String {
    let mut reasons: Vec<&str> = Vec::new();
    let mut count = 0;
    for entry in timeline.iter().filter(|e| e.warning && e.object == object) {
        count += 1;
        if !reasons.contains(&entry.reason.as_str()) {
            reasons.push(&entry.reason);
        }
    }
    match count {
        0 => "no Warning".into(),
        1 => format!("1 Warning ({})", reasons.join(", ")),
        n => format!("{n} Warnings ({})", reasons.join(", ")),
    }
}

/// One line per LoadBalancer of `lbs` (every one, in order), then one per Cluster; `given` are the
/// Clusters as the input wrote them (`namespace/name` and their `spec.controlPlaneEndpoint`, if
/// any).
pub async fn lines(
    client: &kube::Client,
    lbs: &[LoadBalancer],
    timeline: &[TimelineEntry],
    given: &[(String, Option<Value>)],
) -> Result<Vec<String>, Box<kube::Error>> {
    let mut out = Vec::new();
    for lb in lbs {
        out.push(format!(
            "LoadBalancer {}/{}: {}; {}; {}",
            lb.namespace().unwrap_or_default(),
            lb.name_any(),
            readiness(lb),
            targets(lb),
            warnings(timeline, &format!("LoadBalancer/{}", lb.name_any()))
        ));
    }
    let mut clusters = Api::<Cluster>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(Box::new)?
        .items;
    clusters.sort_by_key(|c| (c.namespace(), c.name_any()));
    for cluster in &clusters {
        out.push(cluster_line(cluster, lbs, given));
    }
    Ok(out)
}

/// The Cluster's control-plane endpoint and who wrote it, or why capi-lb did not.
fn cluster_line(
    cluster: &Cluster,
    lbs: &[LoadBalancer],
    given: &[(String, Option<Value>)],
) -> String {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let key = format!("{namespace}/{name}");
    let ours: Vec<&LoadBalancer> = lbs
        .iter()
        .filter(|lb| {
            lb.namespace().as_deref() == Some(namespace.as_str())
                && lb.spec.cluster_name.as_deref() == Some(name.as_str())
        })
        .collect();
    let endpoint = cluster
        .spec
        .control_plane_endpoint
        .as_ref()
        .filter(|e| !e.host.is_empty());
    let was_given = given
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, e)| e.as_ref())
        .is_some_and(|e| {
            e.get("host")
                .and_then(Value::as_str)
                .is_some_and(|h| !h.is_empty())
        });
    if let Some(endpoint) = endpoint {
        let at = format!("{}:{}", endpoint.host, endpoint.port);
        let writer = ours.iter().find(|lb| {
            lb.status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "ClusterEndpoint"))
                .is_some_and(|c| c.status == "True")
        });
        return match (writer, was_given) {
            (Some(lb), _) => format!(
                "Cluster {key}: spec.controlPlaneEndpoint {at}, written by capi-lb from LoadBalancer {} (the Cluster names it in {ANNOTATION_LOAD_BALANCER_REF})",
                lb.name_any()
            ),
            (None, true) => format!(
                "Cluster {key}: spec.controlPlaneEndpoint {at}, as the manifest gives it (capi-lb did not write it)"
            ),
            (None, false) => format!("Cluster {key}: spec.controlPlaneEndpoint {at}"),
        };
    }
    let Some(lb) = ours.first() else {
        return format!(
            "Cluster {key}: no spec.controlPlaneEndpoint; no LoadBalancer names this Cluster in spec.clusterName"
        );
    };
    let condition = lb
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "ClusterEndpoint"));
    let why = match condition {
        Some(c) => format!(
            "LoadBalancer {}: {} ({}): {}",
            lb.name_any(),
            c.type_,
            c.reason,
            c.message
        ),
        None if lb.annotations().contains_key(class::ANNOTATION_SERVICE) => {
            let owner = match cluster.control_plane_ref() {
                Some((_, kind, _)) if kind == "KamajiControlPlane" => {
                    "its control plane (Kamaji)".to_string()
                }
                Some((_, kind, _)) => {
                    format!("its control plane ({kind}) or whoever made the Service")
                }
                None => "whoever made the Service".to_string(),
            };
            format!(
                "LoadBalancer {} realises a Service of capi-lb's class; {owner} writes the endpoint from the Service's ingress, and does not run here",
                lb.name_any()
            )
        }
        None if !cluster
            .annotations()
            .contains_key(ANNOTATION_LOAD_BALANCER_REF) =>
        {
            format!(
                "the Cluster does not name LoadBalancer {} in {ANNOTATION_LOAD_BALANCER_REF}, and capi-lb writes a Cluster's endpoint only with that consent",
                lb.name_any()
            )
        }
        None => format!("LoadBalancer {} has not written it", lb.name_any()),
    };
    format!("Cluster {key}: no spec.controlPlaneEndpoint: {why}")
}
