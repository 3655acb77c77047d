//! The zoned provider's decisions (pure): each zone's LoadBalancer, how each zone stands, which
//! addresses are published, and the members as the zones' LoadBalancers report them.

use std::collections::BTreeMap;

use capi_lb_api::LoadBalancer;
use capi_lb_api::conditions::find;
use capi_lb_api::constants::{DNS_LABEL_MAX, GROUP, VERSION, WATCH_FILTER_LABEL};
use capi_lb_api::loadbalancer::{LoadBalancerAddress, LoadBalancerSpec, Publication};
use capi_lb_api::zoned::{Zone, ZoneStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::ResourceExt;

use crate::lbservice;
use crate::provider::{
    DesiredMember, LoadBalancerIdentity, MemberIntent, MemberState, MemberStatus,
};

/// The name of `zone`'s LoadBalancer: `<parent>-<zone>`, or why it cannot be one.
pub fn child_name(parent: &str, zone: &str) -> Result<String, String> {
    let name = format!("{parent}-{zone}");
    if name.len() > DNS_LABEL_MAX {
        return Err(format!(
            "the LoadBalancer of zone {zone} would be named {name}, longer than {DNS_LABEL_MAX} characters: shorten the zone's or the LoadBalancer's name"
        ));
    }
    Ok(name)
}

/// `zone`'s LoadBalancer for `parent` (whose effective selector is `selector`): the parent's
/// ports, targets (with the zone's failure domains and labels), drain and target settings, the
/// zone's infrastructure object, and nothing published of its own. Labelled and annotated with the
/// parent's identity (so capi-lb maps its changes back to the parent and recognises it as the
/// parent's), owned by the parent (it goes with it).
pub fn child(
    parent: &LoadBalancer,
    identity: &LoadBalancerIdentity,
    selector: LabelSelector,
    zone: &Zone,
) -> Result<LoadBalancer, String> {
    let name = child_name(&identity.name, &zone.name)?;
    let mut selector = selector;
    if let Some(extra) = &zone.selector {
        if let Some(labels) = &extra.match_labels {
            let mine = selector.match_labels.get_or_insert_with(BTreeMap::new);
            for (key, value) in labels {
                match mine.get(key) {
                    Some(other) if other != value => {
                        return Err(format!(
                            "zone {}'s selector asks for {key}={value}, but the LoadBalancer selects {key}={other}: no target could be in the zone",
                            zone.name
                        ));
                    }
                    _ => {
                        mine.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        if let Some(expressions) = &extra.match_expressions {
            selector
                .match_expressions
                .get_or_insert_with(Vec::new)
                .extend(expressions.iter().cloned());
        }
    }
    let spec = &parent.spec;
    let mut labels = lbservice::labels(identity, None);
    if let Some(filter) = parent.labels().get(WATCH_FILTER_LABEL) {
        labels.insert(WATCH_FILTER_LABEL.to_string(), filter.clone());
    }
    let owner = OwnerReference {
        api_version: format!("{GROUP}/{VERSION}"),
        kind: "LoadBalancer".into(),
        name: identity.name.clone(),
        uid: parent.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let mut child_spec = LoadBalancerSpec::with_infrastructure(zone.infrastructure_ref.clone());
    child_spec.ports = spec.ports.clone();
    child_spec.target_kind = spec.target_kind.clone();
    child_spec.selector = Some(selector);
    child_spec.target_failure_domains = zone.failure_domains.clone();
    child_spec.target_address_types = spec.target_address_types.clone();
    child_spec.publication = Publication {
        enabled: false,
        ..Publication::default()
    };
    child_spec.drain_seconds = spec.drain_seconds;
    child_spec.readiness_gates = spec.readiness_gates.clone();
    child_spec.source_ranges = spec.source_ranges.clone();
    child_spec.target_health = spec.target_health.clone();
    let mut child = LoadBalancer::new(&name, child_spec);
    child.metadata = ObjectMeta {
        name: Some(name),
        namespace: Some(identity.namespace.clone()),
        labels: Some(labels),
        annotations: Some(lbservice::annotations(identity)),
        owner_references: Some(vec![owner]),
        ..ObjectMeta::default()
    };
    Ok(child)
}

/// Whether `existing` is a zone LoadBalancer made for `identity` (its UID label and namespace and
/// name annotations, as for every object a provider makes): only those are updated or deleted.
pub fn is_ours(existing: &LoadBalancer, identity: &LoadBalancerIdentity) -> bool {
    lbservice::owned(&existing.metadata, identity, None)
}

/// Whether `existing` already is `desired` (spec, and the labels, annotations and owner that make
/// it the parent's): then nothing is written.
pub fn up_to_date(existing: &LoadBalancer, desired: &LoadBalancer) -> bool {
    let contains = |have: &BTreeMap<String, String>, want: &BTreeMap<String, String>| {
        want.iter().all(|(k, v)| have.get(k) == Some(v))
    };
    existing.spec == desired.spec
        && contains(existing.labels(), desired.labels())
        && contains(existing.annotations(), desired.annotations())
        && desired
            .owner_references()
            .iter()
            .all(|o| existing.owner_references().contains(o))
}

/// How `zone` stands, from its LoadBalancer (`None`: not made yet) or the reason it cannot have
/// one (`problem`).
pub fn standing(
    zone: &str,
    name: &str,
    child: Option<&LoadBalancer>,
    problem: Option<&str>,
) -> ZoneStatus {
    let mut out = ZoneStatus {
        name: zone.to_string(),
        load_balancer: name.to_string(),
        ..ZoneStatus::default()
    };
    if let Some(problem) = problem {
        out.message = Some(problem.to_string());
        return out;
    }
    let Some(status) = child.and_then(|c| c.status.as_ref()) else {
        out.message = Some(format!("LoadBalancer {name} is being made"));
        return out;
    };
    out.addresses = status.addresses.clone();
    out.ready_targets = status.ready_targets.clone();
    out.ready = status.ready;
    out.serving = status.ready && !status.active_targets.is_empty();
    if !status.ready {
        let why = find(&status.conditions, "Ready")
            .map(|c| c.message.clone())
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| "not provisioned yet".to_string());
        out.message = Some(format!("LoadBalancer {name} is not Ready: {why}"));
    } else if status.active_targets.is_empty() {
        out.message = Some(format!("LoadBalancer {name} has no active target"));
    }
    out
}

/// The addresses to publish: those of the zones that serve; when none serves, those of the zones
/// whose load balancer is Ready (no target is active yet, as before a Cluster's first Machine);
/// when none is Ready, `before` (a name never loses its last addresses).
pub fn published(zones: &[ZoneStatus], before: &[LoadBalancerAddress]) -> Vec<LoadBalancerAddress> {
    let gather = |pick: &dyn Fn(&ZoneStatus) -> bool| {
        let mut out: Vec<LoadBalancerAddress> = Vec::new();
        for address in zones.iter().filter(|z| pick(z)).flat_map(|z| &z.addresses) {
            if !out.contains(address) {
                out.push(address.clone());
            }
        }
        out
    };
    let serving = gather(&|z| z.serving);
    if !serving.is_empty() {
        return serving;
    }
    let ready = gather(&|z| z.ready);
    if !ready.is_empty() {
        return ready;
    }
    before.to_vec()
}

/// The members as the zones' LoadBalancers report their targets: active where a zone's
/// LoadBalancer has the target active; otherwise adding, or draining for a target the parent
/// drains (its zone's LoadBalancer drains it too: the same Machine is deleted, disabled or
/// deselected). A target no zone's LoadBalancer has is adding when it is to serve, and gone
/// otherwise. Also returns the targets to serve that no zone has.
pub fn members(
    desired: &[DesiredMember],
    children: &[LoadBalancer],
) -> (Vec<MemberStatus>, Vec<String>) {
    let mut members = Vec::new();
    let mut nowhere = Vec::new();
    for member in desired {
        let status = children
            .iter()
            .filter_map(|c| c.status.as_ref())
            .find(|s| s.targets.contains(&member.name));
        let address = match &member.intent {
            MemberIntent::Serve(address) => address.clone(),
            _ => String::new(),
        };
        let state = match (status, &member.intent) {
            (Some(s), _) if s.active_targets.contains(&member.name) => MemberState::Active,
            (Some(_), MemberIntent::Drain) => MemberState::Draining,
            (Some(_), _) => MemberState::Adding,
            (None, MemberIntent::Serve(_)) => {
                nowhere.push(member.name.clone());
                MemberState::Adding
            }
            (None, _) => continue,
        };
        members.push(MemberStatus {
            name: member.name.clone(),
            address,
            state,
        });
    }
    (members, nowhere)
}

/// Whether every zone's LoadBalancer has seen its latest spec and its targets (so a target none of
/// them lists is in no zone, not just not seen yet).
pub fn all_settled(children: &[LoadBalancer], zones: usize) -> bool {
    children.len() == zones
        && children.iter().all(|c| {
            c.status.as_ref().is_some_and(|s| {
                s.observed_generation.is_some() && s.observed_generation == c.metadata.generation
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_lb_api::loadbalancer::{InfrastructureRef, LoadBalancerStatus};
    use serde_json::json;

    fn identity() -> LoadBalancerIdentity {
        LoadBalancerIdentity {
            namespace: "team-a".into(),
            name: "cp".into(),
            uid: "0b4f7a52-3c1e-4d2a-9f8e-1a2b3c4d5e6f".into(),
            cluster_name: None,
        }
    }

    fn zone(name: &str, selector: serde_json::Value) -> Zone {
        serde_json::from_value(json!({
            "name": name,
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                  "kind": "OctaviaLoadBalancer", "name": format!("cp-{name}")},
            "failureDomains": [name],
            "selector": selector,
        }))
        .unwrap()
    }

    fn parent() -> LoadBalancer {
        let mut lb = LoadBalancer::new(
            "cp",
            serde_json::from_value(json!({
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                      "kind": "ZonedLoadBalancer", "name": "cp"},
                "drainSeconds": 7,
                "dns": {"hostnames": ["api.example.com"]},
                "clusterName": "c1",
            }))
            .unwrap(),
        );
        lb.metadata.uid = Some("9c8d7e6f-5a4b-4c3d-8e2f-0a1b2c3d4e5f".into());
        lb.metadata.labels = Some([(WATCH_FILTER_LABEL.to_string(), "shard-1".to_string())].into());
        lb
    }

    fn selector(labels: serde_json::Value) -> LabelSelector {
        serde_json::from_value(json!({ "matchLabels": labels })).unwrap()
    }

    #[test]
    fn a_zones_load_balancer_takes_the_parents_targets_of_its_zone_and_publishes_nothing() {
        let child = child(
            &parent(),
            &identity(),
            selector(json!({"cluster.x-k8s.io/cluster-name": "c1"})),
            &zone(
                "az1",
                json!({"matchLabels": {"topology.kubernetes.io/zone": "az1"}}),
            ),
        )
        .unwrap();
        assert_eq!(child.name_any(), "cp-az1");
        let spec = &child.spec;
        assert_eq!(spec.target_failure_domains, vec!["az1".to_string()]);
        assert_eq!(
            spec.selector.as_ref().and_then(|s| s.match_labels.clone()),
            Some(BTreeMap::from([
                ("cluster.x-k8s.io/cluster-name".into(), "c1".into()),
                ("topology.kubernetes.io/zone".into(), "az1".into())
            ]))
        );
        assert_eq!(spec.infrastructure_ref.name, "cp-az1");
        assert_eq!(spec.drain_seconds, 7);
        assert!(!spec.publication.enabled);
        assert_eq!(spec.dns, None, "the parent publishes the name");
        assert_eq!(
            spec.cluster_name, None,
            "the parent writes the Cluster's endpoint"
        );
        assert!(is_ours(&child, &identity()));
        assert_eq!(
            child.labels().get(WATCH_FILTER_LABEL).map(String::as_str),
            Some("shard-1")
        );
        assert_eq!(
            child.owner_references()[0].uid,
            "9c8d7e6f-5a4b-4c3d-8e2f-0a1b2c3d4e5f"
        );
        assert!(up_to_date(&child, &child));
        let mut changed = child.clone();
        changed.spec.drain_seconds = 8;
        assert!(!up_to_date(&changed, &child));
        let mut foreign = child.clone();
        foreign.metadata.labels = None;
        assert!(!is_ours(&foreign, &identity()));
    }

    #[test]
    fn a_zone_selector_that_contradicts_the_parents_and_a_long_name_are_refused() {
        let err = child(
            &parent(),
            &identity(),
            selector(json!({"tier": "a"})),
            &zone("az1", json!({"matchLabels": {"tier": "b"}})),
        )
        .unwrap_err();
        assert!(err.contains("tier=b") && err.contains("tier=a"), "{err}");
        let long = "z".repeat(61);
        assert!(
            child_name("cp", &long)
                .unwrap_err()
                .contains("longer than 63")
        );
        assert_eq!(child_name("cp", "az1").unwrap(), "cp-az1");
    }

    fn lb(
        name: &str,
        ready: bool,
        active: &[&str],
        targets: &[&str],
        address: &str,
    ) -> LoadBalancer {
        let mut lb = LoadBalancer::new(
            name,
            capi_lb_api::LoadBalancerSpec::with_infrastructure(InfrastructureRef {
                api_group: "infrastructure.cluster.x-k8s.io".into(),
                kind: "OctaviaLoadBalancer".into(),
                name: name.into(),
            }),
        );
        lb.status = Some(LoadBalancerStatus {
            ready,
            active_targets: active.iter().map(ToString::to_string).collect(),
            targets: targets.iter().map(ToString::to_string).collect(),
            addresses: vec![LoadBalancerAddress::ip(address)],
            ..LoadBalancerStatus::default()
        });
        lb
    }

    #[test]
    fn a_zone_that_is_down_leaves_the_name_but_never_the_last_one() {
        let children = vec![
            lb("cp-az1", true, &["m1"], &["m1"], "198.51.100.1"),
            lb("cp-az2", true, &["m2"], &["m2"], "198.51.100.2"),
        ];
        let zones = |children: &[LoadBalancer]| -> Vec<ZoneStatus> {
            ["az1", "az2"]
                .iter()
                .map(|z| {
                    let name = format!("cp-{z}");
                    standing(
                        z,
                        &name,
                        children.iter().find(|c| c.name_any() == name),
                        None,
                    )
                })
                .collect()
        };
        let ips =
            |a: Vec<LoadBalancerAddress>| a.into_iter().map(|a| a.address).collect::<Vec<_>>();
        let both = zones(&children);
        assert_eq!(ips(published(&both, &[])), ["198.51.100.1", "198.51.100.2"]);

        let mut down = children.clone();
        down[1] = lb("cp-az2", false, &[], &["m2"], "198.51.100.2");
        let standing_down = zones(&down);
        assert!(
            standing_down[1]
                .message
                .as_deref()
                .is_some_and(|m| m.contains("not Ready"))
        );
        let before = published(&both, &[]);
        assert_eq!(ips(published(&standing_down, &before)), ["198.51.100.1"]);

        // Both down: the last addresses stay.
        let all_down = vec![
            lb("cp-az1", false, &[], &["m1"], "198.51.100.1"),
            lb("cp-az2", false, &[], &["m2"], "198.51.100.2"),
        ];
        let kept = published(&zones(&all_down), &before);
        assert_eq!(kept, before);

        // Ready, no target active yet (before the first Machine): the ready zones are published.
        let fresh = vec![
            lb("cp-az1", true, &[], &[], "198.51.100.1"),
            lb("cp-az2", false, &[], &[], ""),
        ];
        assert_eq!(ips(published(&zones(&fresh), &[])), ["198.51.100.1"]);
    }

    #[test]
    fn members_follow_their_zones_load_balancer() {
        let children = vec![
            lb("cp-az1", true, &["m1"], &["m1", "m3"], "198.51.100.1"),
            lb("cp-az2", true, &[], &["m2"], "198.51.100.2"),
        ];
        let desired = vec![
            DesiredMember::serve("m1", "10.0.0.1"),
            DesiredMember::drain("m2"),
            DesiredMember::serve("m3", "10.0.0.3"),
            DesiredMember::serve("m4", "10.0.0.4"),
            DesiredMember::keep("m5"),
            DesiredMember::drain("m6"),
        ];
        let (members, nowhere) = members(&desired, &children);
        let states: Vec<(&str, MemberState)> =
            members.iter().map(|m| (m.name.as_str(), m.state)).collect();
        assert_eq!(
            states,
            [
                ("m1", MemberState::Active),
                ("m2", MemberState::Draining),
                ("m3", MemberState::Adding),
                ("m4", MemberState::Adding),
            ]
        );
        assert_eq!(nowhere, ["m4"]);
        // A target its zone still has active stays active while the parent drains it.
        let (members, _) = self::members(&[DesiredMember::drain("m1")], &children);
        assert_eq!(members[0].state, MemberState::Active);
    }
}
