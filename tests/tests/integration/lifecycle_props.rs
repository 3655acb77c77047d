//! Property test of the target lifecycle through the real reconciler, the in-memory provider and the
//! in-memory Kubernetes API: any sequence of target events (select, deselect, address change or
//! loss, disable, enable, delete, re-create, readiness flips), provider progress and failures,
//! controller restarts and Cluster deletion keeps the safety invariants at every step, and once the
//! events stop the annotations, members and hooks converge to the right end state with no hook left
//! on a deleted or deselected Machine.

use std::collections::BTreeMap;
use std::time::Duration;

use capi_lb::sim::world::World;
use capi_lb_api::capi::{Cluster, Machine};
use capi_lb_api::constants::{
    ANNOTATION_TARGET_DISABLED, ANNOTATION_TARGET_LB, ANNOTATION_TARGET_STATUS,
    PRE_TERMINATE_HOOK_PREFIX,
};
use capi_lb_api::target::TargetKeys;
use capi_lb_providers::MemberState;
use capi_lb_providers::clock::Clock;
use capi_lb_tests::*;
use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use proptest::prelude::*;
use serde_json::{Value, json};

const MACHINES: usize = 3;
const GATE: &str = "APIServerPodHealthy";

#[derive(Clone, Debug)]
enum Op {
    Select(usize, bool),
    Disable(usize, bool),
    Delete(usize),
    Create(usize),
    Address(usize, Option<u8>),
    Gate(usize, bool),
    Tick(u64),
    Reconcile,
    Capi,
    Restart,
    ProviderFailure(u32),
    DeleteCluster,
}

fn op() -> impl Strategy<Value = Op> {
    let m = 0..MACHINES;
    prop_oneof![
        2 => (m.clone(), any::<bool>()).prop_map(|(i, b)| Op::Select(i, b)),
        2 => (m.clone(), any::<bool>()).prop_map(|(i, b)| Op::Disable(i, b)),
        2 => m.clone().prop_map(Op::Delete),
        2 => m.clone().prop_map(Op::Create),
        1 => (m.clone(), proptest::option::weighted(0.8, 1u8..4)).prop_map(|(i, a)| Op::Address(i, a)),
        1 => (m, any::<bool>()).prop_map(|(i, b)| Op::Gate(i, b)),
        3 => (0u64..40).prop_map(Op::Tick),
        6 => Just(Op::Reconcile),
        3 => Just(Op::Capi),
        1 => Just(Op::Restart),
        1 => (1u32..3).prop_map(Op::ProviderFailure),
        1 => Just(Op::DeleteCluster),
    ]
}

#[derive(Clone, Debug)]
struct Config {
    drain: u64,
    delay: u64,
    gates: bool,
}

fn config() -> impl Strategy<Value = Config> {
    (
        prop_oneof![Just(0u64), Just(10), Just(30)],
        prop_oneof![Just(0u64), Just(3)],
        any::<bool>(),
    )
        .prop_map(|(drain, delay, gates)| Config {
            drain,
            delay,
            gates,
        })
}

fn name(i: usize) -> String {
    format!("m{i}")
}

fn machine_object(i: usize) -> Value {
    let mut m = machine(&name(i), "cp", &format!("10.0.{i}.1")).build();
    m["metadata"]["finalizers"] = json!(["machine.cluster.x-k8s.io"]);
    m["status"]["conditions"] = json!([{"type": GATE, "status": "True"}]);
    m
}

struct Harness {
    world: World,
    config: Config,
    keys: TargetKeys,
    /// When each member was first seen draining.
    draining_since: BTreeMap<String, Timestamp>,
    /// Members seen after the previous reconcile, with their state.
    previous: BTreeMap<String, MemberState>,
    cluster_deleting: bool,
}

impl Harness {
    fn machines(&self) -> Api<Machine> {
        Api::namespaced(self.world.client(), NS)
    }

    async fn get(&self, i: usize) -> Option<Machine> {
        self.machines().get_opt(&name(i)).await.unwrap()
    }

    async fn patch(&self, i: usize, patch: Value) {
        if self.get(i).await.is_some() {
            self.machines()
                .patch(&name(i), &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    }

    async fn patch_status(&self, i: usize, status: Value) {
        if self.get(i).await.is_some() {
            self.machines()
                .patch_status(
                    &name(i),
                    &PatchParams::default(),
                    &Patch::Merge(&json!({ "status": status })),
                )
                .await
                .unwrap();
        }
    }

    fn members(&self) -> BTreeMap<String, MemberState> {
        self.world
            .cloud
            .load_balancers()
            .into_iter()
            .flat_map(|l| l.members.into_iter().map(|(n, m)| (n, m.state)))
            .collect()
    }

    async fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Select(i, on) => {
                let value = if *on { "cp" } else { "other" };
                self.patch(
                    *i,
                    json!({"metadata": {"labels": {"loadbalancer.cluster.x-k8s.io/name": value}}}),
                )
                .await;
            }
            Op::Disable(i, on) => {
                let value = if *on { json!("") } else { Value::Null };
                self.patch(
                    *i,
                    json!({"metadata": {"annotations": {ANNOTATION_TARGET_DISABLED: value}}}),
                )
                .await;
            }
            Op::Delete(i) => {
                if self.get(*i).await.is_some() {
                    self.machines()
                        .delete(&name(*i), &DeleteParams::default())
                        .await
                        .unwrap();
                }
            }
            Op::Create(i) => {
                if self.get(*i).await.is_none() {
                    let m: Machine = serde_json::from_value(machine_object(*i)).unwrap();
                    self.machines()
                        .create(&PostParams::default(), &m)
                        .await
                        .unwrap();
                }
            }
            Op::Address(i, address) => {
                let addresses = match address {
                    Some(a) => json!([{"type": "InternalIP", "address": format!("10.0.{i}.{a}")}]),
                    None => json!([]),
                };
                self.patch_status(*i, json!({ "addresses": addresses }))
                    .await;
            }
            Op::Gate(i, on) => {
                let status = if *on { "True" } else { "False" };
                self.patch_status(
                    *i,
                    json!({"conditions": [{"type": GATE, "status": status}]}),
                )
                .await;
            }
            Op::Tick(secs) => self.world.clock.advance(Duration::from_secs(*secs)),
            Op::Reconcile => self.reconcile().await?,
            Op::Capi => self.capi().await,
            Op::Restart => self.world = self.world.restart(),
            Op::ProviderFailure(times) => {
                Api::<capi_lb_api::InMemoryLoadBalancer>::namespaced(self.world.client(), NS)
                    .patch(
                        "cp",
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"failures": [
                            {"operation": "Members", "type": "Transient", "times": times}]}})),
                    )
                    .await
                    .unwrap();
            }
            Op::DeleteCluster => {
                let clusters: Api<Cluster> = Api::namespaced(self.world.client(), NS);
                if clusters.get_opt("demo").await.unwrap().is_some() {
                    clusters
                        .delete("demo", &DeleteParams::default())
                        .await
                        .unwrap();
                }
                self.cluster_deleting = true;
            }
        }
        Ok(())
    }

    /// The Machine controller's deletion phases (pre-drain is skipped, the harder case: only the
    /// pre-terminate hook protects the member): a deleted Machine goes once no pre-terminate hook
    /// is left.
    async fn capi(&self) {
        for m in self
            .machines()
            .list(&Default::default())
            .await
            .unwrap()
            .items
        {
            let blocked = m
                .annotations()
                .keys()
                .any(|k| k.starts_with(PRE_TERMINATE_HOOK_PREFIX));
            if m.metadata.deletion_timestamp.is_some() && !blocked {
                self.machines()
                    .patch(
                        &m.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await
                    .unwrap();
            }
        }
    }

    /// Reconcile once and check the invariants that must hold after every pass.
    async fn reconcile(&mut self) -> Result<(), TestCaseError> {
        // A resourceVersion conflict (a concurrent edit) is retried by the controller; the next pass
        // continues. Any other error is a bug.
        if let Err(e) = self.world.reconcile(NS, "cp").await {
            prop_assert!(e.to_string().contains("Conflict"), "reconcile failed: {e}");
        }
        let now = self.world.clock.now();
        let members = self.members();
        let machines: BTreeMap<String, Machine> = self
            .machines()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|m| (m.name_any(), m))
            .collect();
        for (member, state) in &members {
            // No member without the safety net on its Machine (unless the Cluster is going).
            if let Some(m) = machines.get(member)
                && !self.cluster_deleting
            {
                let a = m.annotations();
                prop_assert!(
                    a.contains_key(&self.keys.pre_drain)
                        && a.contains_key(&self.keys.pre_terminate),
                    "member {member} without hooks: {a:?}"
                );
            }
            if *state == MemberState::Draining {
                self.draining_since.entry(member.clone()).or_insert(now);
            } else {
                self.draining_since.remove(member);
            }
        }
        // Graceful: a member whose Machine still exists leaves only after draining long enough.
        for (member, before) in &self.previous {
            if members.contains_key(member) || self.cluster_deleting {
                continue;
            }
            if machines.contains_key(member)
                && self.config.drain > 0
                && *before == MemberState::Active
            {
                prop_assert!(false, "{member} removed while active, without a drain");
            }
            if machines.contains_key(member)
                && self.config.drain > 0
                && *before == MemberState::Draining
            {
                let since = self.draining_since.get(member).copied().unwrap_or(now);
                let drained = now.duration_since(since).as_secs();
                prop_assert!(
                    drained >= i64::try_from(self.config.drain).unwrap(),
                    "{member} removed after draining {drained}s of {}",
                    self.config.drain
                );
            }
            self.draining_since.remove(member);
        }
        self.previous = members;
        Ok(())
    }

    /// After the events stop: reconcile, let the Machine controller work and time pass until
    /// nothing changes, then check the end state.
    async fn converge_and_check(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..60 {
            self.reconcile().await?;
            self.capi().await;
            self.world.clock.advance(Duration::from_secs(5));
        }
        let members = self.members();
        let machines = self
            .machines()
            .list(&Default::default())
            .await
            .unwrap()
            .items;
        for m in &machines {
            let n = m.name_any();
            let a = m.annotations();
            prop_assert!(
                m.metadata.deletion_timestamp.is_none(),
                "{n} is stuck in deletion: {a:?}"
            );
            let selected =
                m.labels().get("loadbalancer.cluster.x-k8s.io/name") == Some(&"cp".to_string());
            let disabled = a.contains_key(ANNOTATION_TARGET_DISABLED);
            let status = serde_json::to_value(&m.status).unwrap();
            let has_address = status["addresses"]
                .as_array()
                .is_some_and(|a| !a.is_empty());
            let gate_ok = !self.config.gates
                || status["conditions"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["type"] == GATE && c["status"] == "True"));
            let state = a.get(&self.keys.state).map(String::as_str);
            let hooks = (
                a.contains_key(&self.keys.pre_drain),
                a.contains_key(&self.keys.pre_terminate),
            );
            let member = members.get(&n);
            let want_hooks = !self.cluster_deleting;
            if selected && !disabled {
                if has_address && gate_ok {
                    prop_assert_eq!(member, Some(&MemberState::Active), "{}", n);
                    prop_assert_eq!(state, Some("active"), "{}", n);
                } else {
                    // Kept if it was serving, never created otherwise; one that never joined is
                    // not written at all.
                    prop_assert!(
                        member.is_none() && (state == Some("adding") || state.is_none())
                            || member == Some(&MemberState::Active) && state == Some("active")
                            || member.is_some() && state == Some("adding"),
                        "{n}: member {member:?}, state {state:?}"
                    );
                }
                let want_hooks = want_hooks && state.is_some();
                prop_assert_eq!(hooks, (want_hooks, want_hooks), "{}", n);
            } else if selected {
                prop_assert_eq!(member, None, "{} is disabled", n);
                prop_assert_eq!(state, Some("disabled"), "{}", n);
                prop_assert_eq!(hooks, (false, false), "{}", n);
            } else {
                prop_assert_eq!(member, None, "{} is deselected", n);
                prop_assert!(
                    state.is_none() || state == Some("removed"),
                    "{n}: {state:?}"
                );
                prop_assert_eq!(hooks, (false, false), "{}", n);
            }
            if let Some(state) = state {
                prop_assert_eq!(a.get(ANNOTATION_TARGET_LB).map(String::as_str), Some("cp"));
                prop_assert_eq!(
                    a.get(ANNOTATION_TARGET_STATUS).map(String::as_str),
                    Some(state)
                );
            }
        }
        for member in members.keys() {
            prop_assert!(
                machines.iter().any(|m| &m.name_any() == member),
                "stray member {member}"
            );
        }
        let status = get_lb(&self.world, "cp").await.status.unwrap();
        let mut active: Vec<String> = machines
            .iter()
            .filter(|m| m.annotations().get(&self.keys.state).map(String::as_str) == Some("active"))
            .map(|m| m.name_any())
            .collect();
        active.sort();
        prop_assert_eq!(status.active_targets, active);
        Ok(())
    }
}

async fn run(config: Config, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut cluster = cluster_naming("demo", false, "cp");
    cluster["metadata"]["finalizers"] = json!(["cluster.cluster.x-k8s.io"]);
    let mut lb = lb("cp").spec("drainSeconds", json!(config.drain));
    if config.gates {
        lb = lb.spec("readinessGates", json!([{ "conditionType": GATE }]));
    }
    let mut objects = vec![
        cluster,
        lb.build(),
        infra("cp")
            .spec("provisioningDelaySeconds", json!(config.delay))
            .build(),
    ];
    objects.extend((0..MACHINES).map(machine_object));
    let world = World::new(objects).await.unwrap();
    let mut h = Harness {
        world,
        config,
        keys: TargetKeys::new(NS, "cp"),
        draining_since: BTreeMap::new(),
        previous: BTreeMap::new(),
        cluster_deleting: false,
    };
    for op in &ops {
        h.apply(op).await?;
    }
    h.converge_and_check().await
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_event_sequence_keeps_the_invariants_and_converges(
        config in config(),
        ops in proptest::collection::vec(op(), 0..40),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(run(config, ops))?;
    }
}
