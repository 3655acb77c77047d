//! Target lifecycle through the real reconciler: per-target state annotations, disable and drain,
//! Cluster API deletion hooks (with a small emulation of the Machine controller's deletion phases),
//! readiness gates, stray members, two LoadBalancers over the same Machines, and restarts.

use std::collections::BTreeMap;
use std::time::Duration;

use capi_lb::sim::world::World;
use capi_lb_api::capi::{Cluster, Machine};
use capi_lb_api::constants::{
    ANNOTATION_TARGET_DISABLED, ANNOTATION_TARGET_LB, ANNOTATION_TARGET_STATUS,
    PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX,
};
use capi_lb_api::target::TargetKeys;
use capi_lb_providers::MemberState;
use capi_lb_providers::provider::tags;
use capi_lb_tests::*;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const CAPI_FINALIZER: &str = "machine.cluster.x-k8s.io";
/// Set by the emulated Machine controller once it has drained the node.
const DRAINED: &str = "test.capi-lb/drained";

fn keys(lb: &str) -> TargetKeys {
    TargetKeys::new(NS, lb)
}

fn machines(world: &World) -> Api<Machine> {
    Api::namespaced(world.client(), NS)
}

/// A world with LoadBalancer `cp` (given), its InMemoryLoadBalancer and Machines cp-m1 and cp-m2.
async fn two_machines(lb: Value) -> World {
    world(vec![
        lb,
        infra("cp").build(),
        cp_machine("cp-m1", "cp", "10.0.0.11"),
        cp_machine("cp-m2", "cp", "10.0.0.12"),
    ])
    .await
}

/// A control-plane Machine kept by Cluster API's finalizer while it is deleted.
fn cp_machine(name: &str, lb: &str, ip: &str) -> Value {
    let mut m = machine(name, lb, ip).build();
    m["metadata"]["finalizers"] = json!([CAPI_FINALIZER]);
    m
}

async fn annotations(world: &World, name: &str) -> BTreeMap<String, String> {
    machines(world)
        .get_opt(name)
        .await
        .unwrap()
        .map(|m| m.annotations().clone())
        .unwrap_or_default()
}

async fn state(world: &World, machine: &str, lb: &str) -> Option<String> {
    annotations(world, machine)
        .await
        .get(&keys(lb).state)
        .cloned()
}

async fn assert_state(world: &World, machine: &str, expected: &str) {
    assert_eq!(
        state(world, machine, "cp").await.as_deref(),
        Some(expected),
        "state of {machine}"
    );
}

async fn has_hooks(world: &World, machine: &str, lb: &str) -> (bool, bool) {
    let a = annotations(world, machine).await;
    let k = keys(lb);
    (
        a.contains_key(&k.pre_drain),
        a.contains_key(&k.pre_terminate),
    )
}

/// Members of LoadBalancer `lb` in the cloud: name -> state.
fn members(world: &World, lb: &str) -> BTreeMap<String, MemberState> {
    world
        .cloud
        .load_balancers()
        .into_iter()
        .filter(|l| l.tags.get(tags::NAME).map(String::as_str) == Some(lb))
        .flat_map(|l| l.members.into_iter().map(|(n, m)| (n, m.state)))
        .collect()
}

async fn patch_machine_status(world: &World, name: &str, status: Value) {
    machines(world)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await
        .unwrap();
}

/// One step of Cluster API's Machine deletion, as the Machine controller does it: wait for every
/// pre-drain hook, drain the node, wait for every pre-terminate hook, then let the Machine go.
/// `skip_pre_drain` models the cases where CAPI skips the pre-drain phase (last control-plane
/// node, no nodeRef, Cluster deletion).
async fn capi_machine_controller(world: &World, skip_pre_drain: bool) {
    for m in machines(world)
        .list(&Default::default())
        .await
        .unwrap()
        .items
    {
        if m.metadata.deletion_timestamp.is_none() {
            continue;
        }
        let a = m.annotations();
        let name = m.name_any();
        let pre_drain = a.keys().any(|k| k.starts_with(PRE_DRAIN_HOOK_PREFIX));
        let pre_terminate = a.keys().any(|k| k.starts_with(PRE_TERMINATE_HOOK_PREFIX));
        if !a.contains_key(DRAINED) {
            if skip_pre_drain || !pre_drain {
                merge_patch::<Machine>(
                    world,
                    &name,
                    json!({"metadata": {"annotations": {DRAINED: "true"}}}),
                )
                .await;
            }
        } else if !pre_terminate {
            merge_patch::<Machine>(world, &name, json!({"metadata": {"finalizers": null}})).await;
        }
    }
}

/// status.targets / activeTargets agree with the annotations on the Machines.
async fn assert_status_agrees_with_annotations(world: &World, lb: &str) {
    let status = get_lb(world, lb).await.status.unwrap();
    let all = machines(world)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    let k = keys(lb);
    let mut active: Vec<String> = all
        .iter()
        .filter(|m| m.annotations().get(&k.state).map(String::as_str) == Some("active"))
        .map(|m| m.name_any())
        .collect();
    active.sort();
    assert_eq!(status.active_targets, active, "{status:#?}");
    for name in &status.targets {
        assert!(
            all.iter()
                .any(|m| &m.name_any() == name && m.annotations().contains_key(&k.state)),
            "{name} is a target without a state annotation"
        );
    }
}

#[tokio::test]
async fn every_target_carries_its_state_hooks_and_the_proposal_pair() {
    let world = world(vec![
        lb("cp").build(),
        infra("cp")
            .spec("provisioningDelaySeconds", json!(2))
            .build(),
        cp_machine("cp-m1", "cp", "10.0.0.11"),
        cp_machine("cp-m2", "cp", "10.0.0.12"),
    ])
    .await;
    // The first pass asks for the load balancer: targets are adding, hooks are on.
    world.reconcile(NS, "cp").await.unwrap();
    assert_state(&world, "cp-m1", "adding").await;
    settle(&world).await;
    let k = keys("cp");
    for m in ["cp-m1", "cp-m2"] {
        let a = annotations(&world, m).await;
        assert_eq!(a[ANNOTATION_TARGET_LB], "cp");
        assert_eq!(a[ANNOTATION_TARGET_STATUS], "active");
        assert_eq!(a[&k.state], "active");
        assert!(a[&k.since].parse::<jiff::Timestamp>().is_ok());
        assert_eq!(a[&k.pre_drain], "capi-lb/cp");
        assert_eq!(a[&k.pre_terminate], "capi-lb/cp");
        assert!(k.key.starts_with("capi-lb-cp-") && k.key.len() <= 63);
    }
    assert_status_agrees_with_annotations(&world, "cp").await;
    // Joining is told once, on the LoadBalancer, with the hooks put on in the same pass; the
    // Machines get no Event for it.
    let timeline = world.ctx.events.timeline();
    let on_lb: Vec<_> = timeline
        .iter()
        .filter(|e| {
            (e.reason == "TargetStateChanged" || e.message.contains("| TargetStateChanged: "))
                && e.object.starts_with("LoadBalancer/")
        })
        .collect();
    assert!(
        on_lb
            .iter()
            .any(|e| e.message.contains("deletion hooks added to cp-m1, cp-m2")),
        "{on_lb:?}"
    );
    assert!(
        !timeline.iter().any(|e| e.object.starts_with("Machine/")),
        "{timeline:?}"
    );
    assert!(!event_reasons(&world).contains(&"DeletionHooksAdded".to_string()));

    // Steady state: another pass writes nothing.
    let writes = world.api.stats.writes_excluding_events();
    world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(world.api.stats.writes_excluding_events(), writes);
}

#[tokio::test]
async fn disable_drains_for_the_drain_time_and_keeps_the_target_out_until_enabled() {
    let world = two_machines(lb("cp").spec("drainSeconds", json!(20)).build()).await;
    settle(&world).await;
    merge_patch::<Machine>(
        &world,
        "cp-m2",
        json!({"metadata": {"annotations": {ANNOTATION_TARGET_DISABLED: ""}}}),
    )
    .await;
    let outcome = world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(outcome.requeue_after, Some(Duration::from_secs(20)));
    assert_state(&world, "cp-m2", "disabling").await;
    assert_eq!(members(&world, "cp")["cp-m2"], MemberState::Draining);
    assert_eq!(has_hooks(&world, "cp-m2", "cp").await, (true, true));
    // The way out is told on the Machine too.
    assert!(
        world
            .ctx
            .events
            .timeline()
            .iter()
            .any(|e| e.object == "Machine/cp-m2"
                && e.message == "LoadBalancer cp: active -> disabling"),
        "{:?}",
        world.ctx.events.timeline()
    );

    world.clock.advance(Duration::from_secs(19));
    world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(
        members(&world, "cp").get("cp-m2"),
        Some(&MemberState::Draining),
        "still serving existing connections before the drain time"
    );
    world.clock.advance(Duration::from_secs(1));
    world.reconcile(NS, "cp").await.unwrap();
    assert!(!members(&world, "cp").contains_key("cp-m2"));
    assert_state(&world, "cp-m2", "disabled").await;
    assert_eq!(
        annotations(&world, "cp-m2").await[ANNOTATION_TARGET_STATUS],
        "disabled"
    );
    assert_eq!(has_hooks(&world, "cp-m2", "cp").await, (false, false));
    let lb = get_lb(&world, "cp").await;
    let ready = condition(&lb, "TargetsReady");
    assert_eq!(ready.status, "True");
    assert!(
        ready.message.contains("disabled: cp-m2"),
        "{}",
        ready.message
    );
    assert_status_agrees_with_annotations(&world, "cp").await;
    settle(&world).await;
    assert!(!members(&world, "cp").contains_key("cp-m2"), "kept out");

    // Enabled again: back in, hooks back.
    merge_patch::<Machine>(
        &world,
        "cp-m2",
        json!({"metadata": {"annotations": {ANNOTATION_TARGET_DISABLED: null}}}),
    )
    .await;
    settle(&world).await;
    assert_eq!(members(&world, "cp")["cp-m2"], MemberState::Active);
    assert_state(&world, "cp-m2", "active").await;
    assert_eq!(has_hooks(&world, "cp-m2", "cp").await, (true, true));
}

#[tokio::test]
async fn a_control_plane_rolling_upgrade_is_make_before_break_and_drains_before_releasing() {
    let world = world(vec![
        lb("cp").spec("drainSeconds", json!(30)).build(),
        infra("cp")
            .spec("provisioningDelaySeconds", json!(5))
            .build(),
        cp_machine("cp-old1", "cp", "10.0.0.11"),
        cp_machine("cp-old2", "cp", "10.0.0.12"),
    ])
    .await;
    settle(&world).await;
    // KCP creates the replacement first ...
    let new: Machine = serde_json::from_value(cp_machine("cp-new1", "cp", "10.0.0.21")).unwrap();
    machines(&world)
        .create(&PostParams::default(), &new)
        .await
        .unwrap();
    // ... and deletes an old Machine once the new one is up. Step through time second by second,
    // with the Machine controller's deletion phases emulated.
    let mut new_active_at = None;
    let mut old_deleted_at = None;
    let mut drain_started_at = None;
    let mut member_gone_at = None;
    let mut pre_drain_released_at = None;
    let mut machine_gone_at = None;
    for second in 0..200u64 {
        world.reconcile(NS, "cp").await.unwrap();
        let m = members(&world, "cp");
        if new_active_at.is_none() && m.get("cp-new1") == Some(&MemberState::Active) {
            new_active_at = Some(second);
            assert_state(&world, "cp-new1", "active").await;
            delete::<Machine>(&world, "cp-old1").await;
            old_deleted_at = Some(second);
            continue;
        }
        if old_deleted_at.is_some() {
            if drain_started_at.is_none() && m.get("cp-old1") == Some(&MemberState::Draining) {
                drain_started_at = Some(second);
                assert_state(&world, "cp-old1", "removing").await;
            }
            let hooks = has_hooks(&world, "cp-old1", "cp").await;
            if member_gone_at.is_none() && !m.contains_key("cp-old1") {
                member_gone_at = Some(second);
            }
            if m.contains_key("cp-old1") {
                assert_eq!(hooks, (true, true), "hooks held while the member exists");
                assert!(
                    !annotations(&world, "cp-old1").await.contains_key(DRAINED),
                    "the node must not be drained while the member still takes traffic"
                );
            }
            if pre_drain_released_at.is_none() && !hooks.0 && machine_gone_at.is_none() {
                pre_drain_released_at = Some(second);
            }
        }
        capi_machine_controller(&world, false).await;
        if old_deleted_at.is_some()
            && machine_gone_at.is_none()
            && machines(&world).get_opt("cp-old1").await.unwrap().is_none()
        {
            machine_gone_at = Some(second);
            break;
        }
        world.clock.advance(Duration::from_secs(1));
    }
    let new_active_at = new_active_at.expect("the new machine became active");
    let drain_started_at = drain_started_at.expect("the old member was drained");
    let member_gone_at = member_gone_at.expect("the old member was removed");
    let released = pre_drain_released_at.expect("the pre-drain hook was released");
    machine_gone_at.expect("the old machine was deleted");
    assert!(new_active_at < drain_started_at);
    assert!(
        member_gone_at - drain_started_at >= 30,
        "drained for the drain time: {drain_started_at}..{member_gone_at}"
    );
    assert!(
        released >= member_gone_at,
        "hooks released only once the member is gone"
    );
    assert_eq!(
        members(&world, "cp").keys().cloned().collect::<Vec<_>>(),
        vec!["cp-new1", "cp-old2"]
    );
    settle(&world).await;
    let status = get_lb(&world, "cp").await.status.unwrap();
    assert_eq!(status.active_targets, vec!["cp-new1", "cp-old2"]);
    assert_status_agrees_with_annotations(&world, "cp").await;
}

#[tokio::test]
async fn when_pre_drain_is_skipped_pre_terminate_still_waits_for_the_drain() {
    let world = two_machines(lb("cp").build()).await;
    settle(&world).await;
    delete::<Machine>(&world, "cp-m2").await;
    for _ in 0..40 {
        world.reconcile(NS, "cp").await.unwrap();
        // The Machine controller skips pre-drain (e.g. no nodeRef) and drains at once.
        capi_machine_controller(&world, true).await;
        if members(&world, "cp").contains_key("cp-m2") {
            assert!(
                machines(&world).get_opt("cp-m2").await.unwrap().is_some(),
                "pre-terminate keeps the Machine while its member exists"
            );
        }
        world.clock.advance(Duration::from_secs(1));
    }
    assert!(machines(&world).get_opt("cp-m2").await.unwrap().is_none());
    assert!(!members(&world, "cp").contains_key("cp-m2"));
}

#[tokio::test]
async fn a_deselected_machine_drains_and_loses_its_hooks() {
    let world = two_machines(lb("cp").build()).await;
    settle(&world).await;
    merge_patch::<Machine>(
        &world,
        "cp-m2",
        json!({"metadata": {"labels": {"loadbalancer.cluster.x-k8s.io/name": "other"}}}),
    )
    .await;
    world.reconcile(NS, "cp").await.unwrap();
    assert_state(&world, "cp-m2", "removing").await;
    assert_eq!(members(&world, "cp")["cp-m2"], MemberState::Draining);
    let status = get_lb(&world, "cp").await.status.unwrap();
    assert_eq!(
        status.targets,
        vec!["cp-m1", "cp-m2"],
        "tracked until removed"
    );
    settle(&world).await;
    assert_state(&world, "cp-m2", "removed").await;
    assert_eq!(has_hooks(&world, "cp-m2", "cp").await, (false, false));
    assert!(!members(&world, "cp").contains_key("cp-m2"));
    let status = get_lb(&world, "cp").await.status.unwrap();
    assert_eq!(status.targets, vec!["cp-m1"]);
    assert_status_agrees_with_annotations(&world, "cp").await;
}

#[tokio::test]
async fn cluster_deletion_releases_every_hook_at_once() {
    let mut cluster = cluster_naming("demo", false, "cp");
    cluster["metadata"]["finalizers"] = json!(["cluster.cluster.x-k8s.io"]);
    let world = world(vec![
        cluster,
        lb("cp").build(),
        infra("cp").build(),
        cp_machine("cp-m1", "cp", "10.0.0.11"),
        cp_machine("cp-m2", "cp", "10.0.0.12"),
    ])
    .await;
    settle(&world).await;
    assert_eq!(has_hooks(&world, "cp-m1", "cp").await, (true, true));
    Api::<Cluster>::namespaced(world.client(), NS)
        .delete("demo", &DeleteParams::default())
        .await
        .unwrap();
    world.reconcile(NS, "cp").await.unwrap();
    for m in ["cp-m1", "cp-m2"] {
        assert_eq!(has_hooks(&world, m, "cp").await, (false, false), "{m}");
    }
    assert!(event_reasons(&world).contains(&"DeletionHooksReleased".to_string()));
    // Machines deleted now go without waiting for the load balancer.
    delete::<Machine>(&world, "cp-m1").await;
    capi_machine_controller(&world, true).await;
    capi_machine_controller(&world, true).await;
    assert!(machines(&world).get_opt("cp-m1").await.unwrap().is_none());
}

#[tokio::test]
async fn deleting_the_load_balancer_releases_hooks_and_annotations() {
    let world = world(vec![
        lb("cp").build(),
        infra("cp").build(),
        cp_machine("cp-m1", "cp", "10.0.0.11"),
    ])
    .await;
    settle(&world).await;
    Api::<capi_lb_api::LoadBalancer>::namespaced(world.client(), NS)
        .delete("cp", &DeleteParams::default())
        .await
        .unwrap();
    settle(&world).await;
    let a = annotations(&world, "cp-m1").await;
    let k = keys("cp");
    for key in k.all() {
        assert!(!a.contains_key(key), "{key} left on the Machine: {a:?}");
    }
    assert!(!a.contains_key(ANNOTATION_TARGET_LB));
    assert!(!a.contains_key(ANNOTATION_TARGET_STATUS));
}

#[tokio::test]
async fn two_load_balancers_over_the_same_machines_do_not_fight() {
    let selector = json!({"matchLabels": {"cluster.x-k8s.io/control-plane": ""}});
    let world = world(vec![
        lb("api").spec("selector", selector.clone()).build(),
        infra("api").build(),
        lb("internal")
            .spec("selector", selector)
            .spec("drainSeconds", json!(0))
            .build(),
        infra("internal").build(),
        cp_machine("cp-m1", "cp", "10.0.0.11"),
        cp_machine("cp-m2", "cp", "10.0.0.12"),
    ])
    .await;
    settle(&world).await;
    for m in ["cp-m1", "cp-m2"] {
        let a = annotations(&world, m).await;
        assert_eq!(a[&keys("api").state], "active");
        assert_eq!(a[&keys("internal").state], "active");
        assert!(a.contains_key(&keys("api").pre_drain));
        assert!(a.contains_key(&keys("internal").pre_drain));
        assert_eq!(
            a[ANNOTATION_TARGET_LB], "api",
            "the first LoadBalancer holds the pair"
        );
    }
    assert_eq!(members(&world, "api").len(), 2);
    assert_eq!(members(&world, "internal").len(), 2);
    // No ping-pong: a further pass of both writes nothing.
    let writes = world.api.stats.writes_excluding_events();
    world.reconcile(NS, "api").await.unwrap();
    world.reconcile(NS, "internal").await.unwrap();
    world.reconcile(NS, "api").await.unwrap();
    assert_eq!(world.api.stats.writes_excluding_events(), writes);

    // Disabling a Machine takes it out of both.
    merge_patch::<Machine>(
        &world,
        "cp-m2",
        json!({"metadata": {"annotations": {ANNOTATION_TARGET_DISABLED: "maintenance"}}}),
    )
    .await;
    settle(&world).await;
    assert!(!members(&world, "api").contains_key("cp-m2"));
    assert!(!members(&world, "internal").contains_key("cp-m2"));

    // Deleting one LoadBalancer hands the pair over to the other.
    Api::<capi_lb_api::LoadBalancer>::namespaced(world.client(), NS)
        .delete("api", &DeleteParams::default())
        .await
        .unwrap();
    settle(&world).await;
    let a = annotations(&world, "cp-m1").await;
    assert_eq!(a[ANNOTATION_TARGET_LB], "internal");
    assert_eq!(a[ANNOTATION_TARGET_STATUS], "active");
    assert!(!a.contains_key(&keys("api").state));
    assert!(a.contains_key(&keys("internal").pre_terminate));
    assert_status_agrees_with_annotations(&world, "internal").await;
}

#[tokio::test]
async fn readiness_gates_hold_admission_until_the_condition_is_true() {
    let mut m1 = cp_machine("cp-m1", "cp", "10.0.0.11");
    m1["status"]["conditions"] = json!([{"type": "APIServerPodHealthy", "status": "False"}]);
    let world = world(vec![
        lb("cp")
            .spec(
                "readinessGates",
                json!([{"conditionType": "APIServerPodHealthy"}]),
            )
            .build(),
        infra("cp").build(),
        m1,
    ])
    .await;
    settle(&world).await;
    assert!(members(&world, "cp").is_empty());
    // Not admitted: nothing is written on it (no state, no hooks) until it can join.
    assert_eq!(state(&world, "cp-m1", "cp").await, None);
    assert_eq!(has_hooks(&world, "cp-m1", "cp").await, (false, false));
    let lb = get_lb(&world, "cp").await;
    assert!(
        lb.status
            .as_ref()
            .unwrap()
            .targets
            .contains(&"cp-m1".to_string())
    );
    let c = condition(&lb, "TargetsReady");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "TargetsNotAdmitted")
    );
    assert!(
        c.message.contains("cp-m1 (APIServerPodHealthy)"),
        "{}",
        c.message
    );

    patch_machine_status(
        &world,
        "cp-m1",
        json!({"conditions": [{"type": "APIServerPodHealthy", "status": "True"}]}),
    )
    .await;
    settle(&world).await;
    assert_eq!(members(&world, "cp")["cp-m1"], MemberState::Active);
    // Admitted: its state and its hooks in the same pass as its member.
    assert_state(&world, "cp-m1", "active").await;
    assert_eq!(has_hooks(&world, "cp-m1", "cp").await, (true, true));
    // Admission only: a gate that turns false again does not take a serving member out.
    patch_machine_status(
        &world,
        "cp-m1",
        json!({"conditions": [{"type": "APIServerPodHealthy", "status": "False"}]}),
    )
    .await;
    settle(&world).await;
    assert_eq!(members(&world, "cp")["cp-m1"], MemberState::Active);
}

#[tokio::test]
async fn stray_members_are_removed_and_a_lost_address_keeps_its_member() {
    let world = world(vec![
        lb("cp").build(),
        infra("cp").build(),
        cp_machine("cp-m1", "cp", "10.0.0.11"),
    ])
    .await;
    settle(&world).await;
    let id = world.cloud.load_balancers()[0].id.clone();
    assert!(world.cloud.insert_member(&id, "nobody", "10.9.9.9"));
    // The Machine's status loses its addresses for a moment.
    patch_machine_status(&world, "cp-m1", json!({"addresses": []})).await;
    settle(&world).await;
    assert!(
        machines(&world)
            .get("cp-m1")
            .await
            .unwrap()
            .status
            .is_some_and(|s| s.addresses.is_empty()),
        "the address is really gone"
    );
    let m = members(&world, "cp");
    assert!(!m.contains_key("nobody"), "stray member removed");
    assert_eq!(
        m.get("cp-m1"),
        Some(&MemberState::Active),
        "kept, not dropped"
    );
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "TargetsReady");
    // It is still active, so it is not reported as missing an address.
    assert_eq!(c.status, "True", "{}", c.message);
}

#[tokio::test]
async fn a_restart_during_a_drain_keeps_the_drain_clock() {
    let world = two_machines(lb("cp").spec("drainSeconds", json!(60)).build()).await;
    settle(&world).await;
    delete::<Machine>(&world, "cp-m2").await;
    world.reconcile(NS, "cp").await.unwrap();
    world.clock.advance(Duration::from_secs(40));
    // A new controller process: nothing in memory, the same API and cloud.
    let restarted = world.restart();
    let outcome = restarted.reconcile(NS, "cp").await.unwrap();
    assert_eq!(
        outcome.requeue_after,
        Some(Duration::from_secs(20)),
        "continues the drain that started before the restart"
    );
    assert_eq!(members(&restarted, "cp")["cp-m2"], MemberState::Draining);
    restarted.clock.advance(Duration::from_secs(20));
    restarted.reconcile(NS, "cp").await.unwrap();
    assert!(!members(&restarted, "cp").contains_key("cp-m2"));
    assert_state(&restarted, "cp-m2", "removed").await;
    assert_eq!(has_hooks(&restarted, "cp-m2", "cp").await, (false, false));
}

#[tokio::test]
async fn a_member_update_failure_keeps_hooks_and_states_until_it_recovers() {
    let world = two_machines(lb("cp").spec("drainSeconds", json!(0)).build()).await;
    settle(&world).await;
    Api::<capi_lb_api::InMemoryLoadBalancer>::namespaced(world.client(), NS)
        .patch(
            "cp",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"failures": [
                {"operation": "Members", "type": "Transient", "times": 2}]}})),
        )
        .await
        .unwrap();
    delete::<Machine>(&world, "cp-m2").await;
    world.reconcile(NS, "cp").await.unwrap();
    assert_state(&world, "cp-m2", "active").await;
    assert_eq!(has_hooks(&world, "cp-m2", "cp").await, (true, true));
    assert!(members(&world, "cp").contains_key("cp-m2"));
    let lb = get_lb(&world, "cp").await;
    assert_eq!(condition(&lb, "TargetsReady").reason, "ProviderError");
    settle(&world).await;
    assert!(!members(&world, "cp").contains_key("cp-m2"));
    assert_eq!(has_hooks(&world, "cp-m2", "cp").await, (false, false));
}
