//! Behaviour of the in-memory provider through the Provider trait.
// Integration tests: helpers panic on broken fixtures, which is the failure we want.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use capi_lb_api::loadbalancer::{LoadBalancerAddress, Protocol};
use capi_lb_providers::clock::ManualClock;
use capi_lb_providers::inmemory::{
    INJECTED_FAILURE, InMemoryCloud, InMemoryProvider, POOL_EXHAUSTED,
};
use capi_lb_providers::provider::tags;
use capi_lb_providers::{
    DeleteRequest, DesiredMember, EnsureOutcome, EnsureRequest, Listener, LoadBalancerIdentity,
    MemberState, MembersOutcome, MembersRequest, Progress, Provider, ProviderError,
};
use kube::core::DynamicObject;
use serde_json::{Value, json};

struct World {
    clock: Arc<ManualClock>,
    cloud: InMemoryCloud,
    provider: InMemoryProvider,
}

fn world() -> World {
    let clock = Arc::new(ManualClock::new("2026-01-01T00:00:00Z".parse().unwrap()));
    let cloud = InMemoryCloud::new(clock.clone());
    let provider = InMemoryProvider::new(cloud.clone());
    World {
        clock,
        cloud,
        provider,
    }
}

fn infra(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "InMemoryLoadBalancer",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-infra-{name}")},
        "spec": spec,
    }))
    .unwrap()
}

fn identity(name: &str) -> LoadBalancerIdentity {
    LoadBalancerIdentity {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-lb-{name}"),
        cluster_name: Some("demo".into()),
    }
}

/// The LoadBalancer the requests are for (the in-memory provider does not read it).
fn parent() -> capi_lb_api::LoadBalancer {
    serde_json::from_value(json!({
        "apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
        "metadata": {"name": "cp", "namespace": "default"},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                       "kind": "InMemoryLoadBalancer", "name": "cp"}}}))
    .unwrap()
}

fn listeners() -> Vec<Listener> {
    vec![Listener {
        name: "api".into(),
        port: 6443,
        target_port: 6443,
        protocol: Protocol::Tcp,
    }]
}

fn member(name: &str, address: &str, drain: bool) -> DesiredMember {
    if drain {
        DesiredMember::drain(name)
    } else {
        DesiredMember::serve(name, address)
    }
}

async fn ensure(
    w: &World,
    id: &LoadBalancerIdentity,
    infra: &DynamicObject,
) -> Result<EnsureOutcome, ProviderError> {
    w.provider
        .ensure(EnsureRequest {
            identity: id,
            loadbalancer: &parent(),
            infra,
            listeners: &listeners(),
            source_ranges: &[],
            members: &[],
        })
        .await
}

async fn converge(
    w: &World,
    id: &LoadBalancerIdentity,
    infra: &DynamicObject,
    members: &[DesiredMember],
) -> MembersOutcome {
    w.provider
        .converge_members(MembersRequest {
            identity: id,
            infra,
            listeners: &listeners(),
            members,
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn provisioning_takes_the_configured_delay_and_never_blocks() {
    let w = world();
    let id = identity("cp");
    let infra = infra("cp", json!({"provisioningDelaySeconds": 5}));
    let first = ensure(&w, &id, &infra).await.unwrap();
    assert_eq!(
        first.addresses,
        vec![LoadBalancerAddress::ip("203.0.113.1")]
    );
    assert_eq!(first.progress.retry_after(), Some(Duration::from_secs(5)));
    assert!(first.changes[0].contains("created load balancer"));
    assert!(first.created);
    assert_eq!(first.status["ready"], json!(false));

    w.clock.advance(Duration::from_secs(3));
    let second = ensure(&w, &id, &infra).await.unwrap();
    assert_eq!(second.progress.retry_after(), Some(Duration::from_secs(2)));
    assert!(
        second.changes.is_empty(),
        "an unchanged ensure changes nothing"
    );

    w.clock.advance(Duration::from_secs(2));
    let third = ensure(&w, &id, &infra).await.unwrap();
    assert_eq!(third.progress, Progress::Done);
    assert_eq!(third.status["ready"], json!(true));
    assert_eq!(w.cloud.load_balancers().len(), 1);
}

#[tokio::test]
async fn a_restarted_controller_adopts_by_tag_and_never_duplicates() {
    let w = world();
    let id = identity("cp");
    let infra = infra("cp", json!({}));
    let created = ensure(&w, &id, &infra).await.unwrap();
    // A new provider over the same cloud: what a restarted controller with a wiped status sees.
    let restarted = InMemoryProvider::new(w.cloud.clone());
    let adopted = restarted
        .ensure(EnsureRequest {
            identity: &id,
            loadbalancer: &parent(),
            infra: &infra,
            listeners: &listeners(),
            source_ranges: &[],
            members: &[],
        })
        .await
        .unwrap();
    assert_eq!(adopted.addresses, created.addresses);
    assert!(adopted.changes.is_empty());
    assert_eq!(w.cloud.load_balancers().len(), 1);
}

#[tokio::test]
async fn a_foreign_load_balancer_with_the_same_name_is_never_adopted() {
    let w = world();
    let id = identity("cp");
    let mut foreign_tags = id.tags();
    foreign_tags.insert(tags::UID.into(), "someone-else".into());
    let foreign = w.cloud.insert_foreign(foreign_tags, "203.0.113.1");
    let outcome = ensure(&w, &id, &infra("cp", json!({}))).await.unwrap();
    assert_eq!(
        outcome.addresses,
        vec![LoadBalancerAddress::ip("203.0.113.2")],
        "the foreign address stays taken"
    );
    let lbs = w.cloud.load_balancers();
    assert_eq!(lbs.len(), 2);
    assert!(
        lbs.iter()
            .any(|lb| lb.id == foreign && lb.tags[tags::UID] == "someone-else")
    );
    // Deleting ours leaves the foreign one alone.
    let done = w
        .provider
        .delete(DeleteRequest {
            identity: &id,
            infra: None,
        })
        .await
        .unwrap();
    assert!(done.progress.is_done());
    let left: Vec<String> = w
        .cloud
        .load_balancers()
        .into_iter()
        .map(|lb| lb.id)
        .collect();
    assert_eq!(left, vec![foreign]);
}

#[tokio::test]
async fn dual_stack_pools_hostnames_and_pool_changes() {
    let w = world();
    let id = identity("cp");
    let dual = infra(
        "cp",
        json!({"addressPools": ["203.0.113.0/24", "2001:db8::/64"], "hostname": "cp.example.com"}),
    );
    let out = ensure(&w, &id, &dual).await.unwrap();
    assert_eq!(
        out.addresses,
        vec![
            LoadBalancerAddress::ip("203.0.113.1"),
            LoadBalancerAddress::ip("2001:db8::1"),
            LoadBalancerAddress::hostname("cp.example.com"),
        ]
    );
    // Moving to another pool changes the address in place; the IPv6 one is kept.
    let moved = infra(
        "cp",
        json!({"addressPools": ["198.51.100.0/24", "2001:db8::/64"]}),
    );
    let out = ensure(&w, &id, &moved).await.unwrap();
    assert_eq!(
        out.addresses,
        vec![
            LoadBalancerAddress::ip("198.51.100.1"),
            LoadBalancerAddress::ip("2001:db8::1")
        ]
    );
    assert!(
        out.changes[0].contains("addresses changed"),
        "{:?}",
        out.changes
    );
}

#[tokio::test]
async fn a_pool_of_one_address_hands_out_that_address() {
    let w = world();
    let spec = json!({"addressPools": ["198.51.100.7/32", "2001:db8::7/128"]});
    let out = ensure(&w, &identity("a"), &infra("a", spec)).await.unwrap();
    let addresses: Vec<&str> = out.addresses.iter().map(|a| a.address.as_str()).collect();
    assert_eq!(addresses, ["198.51.100.7", "2001:db8::7"]);
}

#[tokio::test]
async fn an_exhausted_pool_is_a_permanent_error() {
    let w = world();
    let spec = json!({"addressPools": ["192.0.2.0/30"]});
    ensure(&w, &identity("a"), &infra("a", spec.clone()))
        .await
        .unwrap();
    ensure(&w, &identity("b"), &infra("b", spec.clone()))
        .await
        .unwrap();
    let err = ensure(&w, &identity("c"), &infra("c", spec))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::Permanent { ref reason, .. } if reason == POOL_EXHAUSTED),
        "{err:?}"
    );
}

#[tokio::test]
async fn invalid_infrastructure_is_a_permanent_error_naming_the_field() {
    let w = world();
    let err = ensure(
        &w,
        &identity("cp"),
        &infra("cp", json!({"addressPools": ["nope"]})),
    )
    .await
    .unwrap_err();
    match err {
        ProviderError::Permanent { reason, message } => {
            assert_eq!(reason, "InvalidConfiguration");
            assert!(message.contains("spec.addressPools"), "{message}");
        }
        other => panic!("expected a permanent error, got {other:?}"),
    }
}

#[tokio::test]
async fn members_are_added_drained_moved_and_removed() {
    let w = world();
    let id = identity("cp");
    let infra = infra("cp", json!({"provisioningDelaySeconds": 2}));
    ensure(&w, &id, &infra).await.unwrap();
    w.clock.advance(Duration::from_secs(2));

    let out = converge(
        &w,
        &id,
        &infra,
        &[
            member("m1", "10.0.0.1", false),
            member("m2", "10.0.0.2", false),
        ],
    )
    .await;
    assert!(out.members.iter().all(|m| m.state == MemberState::Adding));
    assert_eq!(out.progress.retry_after(), Some(Duration::from_secs(2)));

    w.clock.advance(Duration::from_secs(2));
    let out = converge(
        &w,
        &id,
        &infra,
        &[
            member("m1", "10.0.0.1", false),
            member("m2", "10.0.0.2", true),
        ],
    )
    .await;
    let state = |name: &str| out.members.iter().find(|m| m.name == name).map(|m| m.state);
    assert_eq!(state("m1"), Some(MemberState::Active));
    assert_eq!(state("m2"), Some(MemberState::Draining));
    assert!(out.progress.is_done());

    let out = converge(&w, &id, &infra, &[member("m1", "10.0.0.9", false)]).await;
    assert_eq!(
        out.members.len(),
        1,
        "m2 is removed once it is no longer desired"
    );
    assert_eq!(out.members[0].address, "10.0.0.9");
    assert_eq!(
        out.members[0].state,
        MemberState::Adding,
        "a moved member is re-added"
    );
    assert_eq!(out.status["memberCount"], json!(1));
}

#[tokio::test]
async fn keep_and_drain_never_create_a_member() {
    let w = world();
    let id = identity("cp");
    let infra = infra("cp", json!({}));
    ensure(&w, &id, &infra).await.unwrap();
    let out = converge(
        &w,
        &id,
        &infra,
        &[DesiredMember::keep("m1"), DesiredMember::drain("m2")],
    )
    .await;
    assert!(out.members.is_empty(), "{:?}", out.members);
    assert!(out.changes.is_empty());

    // Keep leaves an active member active and a draining member draining.
    converge(
        &w,
        &id,
        &infra,
        &[
            member("m1", "10.0.0.1", false),
            member("m2", "10.0.0.2", false),
        ],
    )
    .await;
    converge(
        &w,
        &id,
        &infra,
        &[DesiredMember::keep("m1"), DesiredMember::drain("m2")],
    )
    .await;
    let out = converge(
        &w,
        &id,
        &infra,
        &[DesiredMember::keep("m1"), DesiredMember::keep("m2")],
    )
    .await;
    let state = |name: &str| out.members.iter().find(|m| m.name == name).map(|m| m.state);
    assert_eq!(state("m1"), Some(MemberState::Active));
    assert_eq!(state("m2"), Some(MemberState::Draining));
    assert!(out.changes.is_empty(), "{:?}", out.changes);

    // Serving again takes a draining member out of draining.
    let out = converge(&w, &id, &infra, &[member("m2", "10.0.0.2", false)]).await;
    assert_eq!(out.members.len(), 1);
    assert_eq!(out.members[0].state, MemberState::Active);
}

#[tokio::test]
async fn deletion_is_delayed_idempotent_and_cleans_up() {
    let w = world();
    let id = identity("cp");
    let infra = infra("cp", json!({"provisioningDelaySeconds": 3}));
    ensure(&w, &id, &infra).await.unwrap();
    let first = w
        .provider
        .delete(DeleteRequest {
            identity: &id,
            infra: Some(&infra),
        })
        .await
        .unwrap();
    assert_eq!(first.progress.retry_after(), Some(Duration::from_secs(3)));
    // Ensure during deletion does not resurrect it.
    assert!(!ensure(&w, &id, &infra).await.unwrap().progress.is_done());
    w.clock.advance(Duration::from_secs(3));
    let second = w
        .provider
        .delete(DeleteRequest {
            identity: &id,
            infra: None,
        })
        .await
        .unwrap();
    assert!(second.progress.is_done());
    assert!(w.cloud.load_balancers().is_empty());
    let again = w
        .provider
        .delete(DeleteRequest {
            identity: &id,
            infra: None,
        })
        .await
        .unwrap();
    assert!(again.progress.is_done() && again.changes.is_empty());
}

#[tokio::test]
async fn injected_failures_transient_then_success_and_permanent_forever() {
    let w = world();
    let id = identity("cp");
    let infra = infra(
        "cp",
        json!({"failures": [
            {"operation": "Ensure", "type": "Transient", "times": 2, "message": "cloud is busy"},
            {"operation": "Delete", "type": "Permanent", "message": "delete refused"}
        ]}),
    );
    for _ in 0..2 {
        let err = ensure(&w, &id, &infra).await.unwrap_err();
        assert_eq!(err, ProviderError::transient("cloud is busy"));
    }
    assert!(ensure(&w, &id, &infra).await.unwrap().progress.is_done());
    for _ in 0..3 {
        let err = w
            .provider
            .delete(DeleteRequest {
                identity: &id,
                infra: Some(&infra),
            })
            .await
            .unwrap_err();
        assert!(
            matches!(err, ProviderError::Permanent { ref reason, .. } if reason == INJECTED_FAILURE)
        );
    }
    assert_eq!(
        w.cloud.load_balancers().len(),
        1,
        "a failed delete deletes nothing"
    );
}

#[test]
fn identity_tags_prove_ownership_by_uid() {
    let id = identity("cp");
    let tags = id.tags();
    assert!(id.owns(&tags));
    let mut other = tags.clone();
    other.insert(tags::UID.into(), "x".into());
    assert!(!id.owns(&other));
    assert!(!id.owns(&BTreeMap::new()));
}
