//! Bad input on the real apiserver: a property test that generates LoadBalancers,
//! InMemoryLoadBalancers and Machines the schema accepts but that are odd in every way it allows,
//! applies them to the harness with capi-lb running as its ServiceAccount, changes them once, and
//! deletes them.
//!
//! What is generated (every value from a seeded generator: a fixed seed by default, so that CI
//! repeats itself; `CAPI_LB_FUZZ_SEED=<n>` replays a run, whose seed the test prints, and
//! `CAPI_LB_FUZZ_SEED=random` explores; `CAPI_LB_FUZZ_CASES` sets how many LoadBalancers, default
//! 16):
//! - LoadBalancer names at the length limits: 63 characters with their publication suffix, and
//!   dotted names of 63 with publication disabled (the schema refuses longer names: they cannot be
//!   label values, which a first version of this test found); a name whose `-ext` Service name
//!   another LoadBalancer's name and suffix also give;
//! - no ports (the default) or 1 to 32 with edge numbers and both protocols; every address type order; drain of 0, 1
//!   or 3600 s; readiness gates; source ranges of both families; a control plane of an existing or
//!   a missing Cluster; a user-set endpoint that is a name, an IPv6 address or no host at all; DNS
//!   names; target kinds that are refused (a core kind) or not installed;
//! - selectors that are empty, match nothing, match everything, use every operator, operators that
//!   do not exist, values where none are allowed and none where some are required, and keys and
//!   values that are not valid labels (the schema of a LabelSelector accepts any strings);
//! - infrastructure of its own, shared with another LoadBalancer, missing, or of a provider that
//!   is not enabled; address pools IPv4, IPv6, dual-stack, a single address shared by several
//!   load balancers, or none (hostname-only); provisioning delays; injected transient and
//!   permanent failures with odd messages;
//! - Machines with IPv4, IPv6, hostname-only, no, or nonsense addresses ("InternalIP: not-an-ip"),
//!   readiness conditions, and the annotations of other LoadBalancers: the proposal's pair naming
//!   another or a missing LoadBalancer with valid and invalid states, keyed states of other and of
//!   missing LoadBalancers, and `disabled` with any value.
//!
//! What must hold, after the first round and after the round of changes:
//! - capi-lb converges: every LoadBalancer's `observedGeneration` is its generation and capi-lb
//!   writes nothing for 10 s, within 4 minutes (a write loop never gets there), and then writes
//!   nothing for another 20 s (the quiet window: no status, annotation or Event write, which a slow
//!   loop would show);
//! - a bounded number of writes: at most [`WRITES_PER_OBJECT`] to any one object in a round (to a
//!   Machine, which every LoadBalancer may select, [`WRITES_PER_MACHINE_PER_LB`] per LoadBalancer),
//!   and at most [`EVENTS_PER_LOAD_BALANCER`] Events per LoadBalancer;
//! - every condition has a reason that docs/troubleshooting.md documents and a message, and every
//!   `False` one says what is wrong;
//! - every Ready LoadBalancer that publishes has its Service, and its EndpointSlices list exactly its
//!   IP addresses (an ExternalName Service when it only has a hostname);
//! - the annotations capi-lb does not own are as the test wrote them: `disabled`, and the keyed
//!   states of LoadBalancers that do not exist;
//! - after deletion: no LoadBalancer left (none stuck on its finalizer), no load balancer left in
//!   the in-memory cloud, no keyed annotation or deletion hook of a deleted LoadBalancer on any
//!   Machine, the proposal's pair naming none of them, and no object capi-lb published left;
//! - no request of capi-lb's ServiceAccount was refused (RBAC) and the controller neither
//!   panicked nor failed (`TestNs::finish`).
//!
//! There is no shrinking (each case costs seconds of a real apiserver): a failure prints the seed
//! and the generated objects.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use capi_lb_api::LoadBalancer;
use capi_lb_api::constants::{
    ANNOTATION_TARGET_DISABLED, ANNOTATION_TARGET_LB, ANNOTATION_TARGET_STATUS, LABEL_LB_NAME,
    LABEL_MANAGED_BY, LABEL_SERVICE_NAME, MANAGED_BY_VALUE, PRE_DRAIN_HOOK_PREFIX,
    PRE_TERMINATE_HOOK_PREFIX, TARGET_SINCE_PREFIX, TARGET_STATE_PREFIX,
};
use capi_lb_api::target::TargetKeys;
use capi_lb_tests::k8s::{
    TestNs, capi_api, capi_cluster, install_capi_crds, machine, merge_status, release_machine,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Map, Value, json};

/// Writes to one object in one round (create, status and annotation patches, finalizer). The
/// most seen in a round is recorded in docs/reliability.md; a write loop makes dozens.
const WRITES_PER_OBJECT: usize = 12;
/// Writes to one Machine in one round per LoadBalancer: each LoadBalancer that selects it writes
/// its own annotations at each state change (adding, active; disabling, disabled or removing,
/// removed in the second round).
const WRITES_PER_MACHINE_PER_LB: usize = 3;
/// Events per LoadBalancer in one round: one per state change it reports (the injected failures,
/// up to two of three tries each, the conflicts, the members added).
const EVENTS_PER_LOAD_BALANCER: usize = 16;
/// No write for this long counts as converged.
const SETTLED: Duration = Duration::from_secs(10);
/// Then no write at all for this long.
const QUIET: Duration = Duration::from_secs(20);
/// A round converges within this.
const CONVERGE_WITHIN: Duration = Duration::from_secs(240);
/// The Cluster that Machines belong to and control-plane LoadBalancers may name.
const CLUSTER: &str = "demo";
/// The seed without `CAPI_LB_FUZZ_SEED`.
const DEFAULT_SEED: u64 = 3;
/// A LoadBalancer that does not exist, whose annotations some Machines carry.
const GHOST: &str = "ghost";

// --- the generator -----------------------------------------------------------------------------

/// Values drawn from strategies with a seeded generator.
struct Gen(TestRunner);

impl Gen {
    fn new(seed: u64) -> Self {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        Gen(TestRunner::new_with_rng(
            Config::default(),
            TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
        ))
    }

    fn pick<S: Strategy>(&mut self, strategy: S) -> S::Value {
        strategy.new_tree(&mut self.0).unwrap().current()
    }

    fn chance(&mut self, one_in: u32) -> bool {
        self.pick(0..one_in) == 0
    }

    fn one_of<T: Clone + std::fmt::Debug + 'static>(&mut self, values: &[T]) -> T {
        self.pick(proptest::sample::select(values.to_vec()))
    }

    fn some_of<T: Clone + std::fmt::Debug + 'static>(
        &mut self,
        values: &[T],
        max: usize,
    ) -> Vec<T> {
        let picked = self.pick(proptest::sample::subsequence(
            values.to_vec(),
            0..=max.min(values.len()),
        ));
        self.pick(Just(picked).prop_shuffle())
    }
}

/// Label keys the Machines carry and the selectors use: plain, prefixed, and at the limits (a
/// 253-character prefix is too long for the schema of neither; 63 is the name part's limit).
fn label_keys() -> Vec<String> {
    vec![
        "app".into(),
        "tier".into(),
        "example.com/role".into(),
        format!("{}.example.com/{}", "p".repeat(40), "k".repeat(63)),
        "cluster.x-k8s.io/control-plane".into(),
    ]
}

fn label_values() -> Vec<String> {
    vec![
        String::new(),
        "a".into(),
        "web".into(),
        "v".repeat(63),
        "A-b_c.9".into(),
    ]
}

/// Keys and values no label can have, which a selector's schema still accepts.
const BAD_KEYS: [&str; 3] = ["Bad Key", "-x", "a/b/c"];
const BAD_VALUES: [&str; 2] = ["bad value!", "ünïcødé"];

fn selector(g: &mut Gen, lb_name: &str) -> Option<Value> {
    let keys = label_keys();
    let values = label_values();
    match g.pick(0..7u8) {
        0 | 1 => None,
        2 => Some(json!({})),
        3 => {
            let mut labels = Map::new();
            for key in g.some_of(&keys, 2) {
                labels.insert(key, json!(g.one_of(&values)));
            }
            Some(json!({"matchLabels": labels}))
        }
        4 => Some(json!({"matchLabels": {LABEL_LB_NAME: lb_name}})),
        _ => {
            let mut expressions = Vec::new();
            for _ in 0..g.pick(1..4usize) {
                let key = if g.chance(10) {
                    g.one_of(&BAD_KEYS).to_string()
                } else {
                    g.one_of(&keys)
                };
                let operator = if g.chance(8) {
                    g.one_of(&["Gt", ""])
                } else {
                    g.one_of(&["In", "NotIn", "Exists", "DoesNotExist"])
                };
                let mut list = g.some_of(&values, 3);
                if g.chance(10) {
                    list.push(g.one_of(&BAD_VALUES).to_string());
                }
                // The operators' rules (values for In/NotIn, none for Exists) are kept mostly.
                if matches!(operator, "Exists" | "DoesNotExist") && !g.chance(5) {
                    list.clear();
                }
                if matches!(operator, "In" | "NotIn") && list.is_empty() && !g.chance(5) {
                    list.push(g.one_of(&values));
                }
                expressions.push(json!({"key": key, "operator": operator, "values": list}));
            }
            Some(json!({"matchExpressions": expressions}))
        }
    }
}

/// 1 to 32 ports: unique names of up to 15 characters, unique numbers (1 and 65535 among them
/// sometimes), both protocols.
fn ports(g: &mut Gen) -> Value {
    let count = if g.chance(4) { 32 } else { g.pick(1..=4usize) };
    let mut numbers: BTreeSet<i32> = g.pick(proptest::collection::btree_set(1..=65535i32, count));
    if g.chance(3) {
        numbers.pop_first();
        numbers.insert(1);
    }
    if g.chance(3) {
        numbers.pop_last();
        numbers.insert(65535);
    }
    let mut ports = Vec::new();
    for (j, port) in numbers.into_iter().enumerate() {
        let tail: String = g.pick("[a-z0-9]{0,10}");
        let name = if tail.is_empty() {
            format!("p{j}")
        } else {
            format!("p{j}-{tail}")
        };
        let mut p = json!({"name": name, "port": port,
                           "protocol": g.one_of(&["TCP", "UDP"])});
        if g.chance(2) {
            p["targetPort"] = json!(g.pick(1..=65535i32));
        }
        ports.push(p);
    }
    json!(ports)
}

/// What one generated LoadBalancer is made of.
#[derive(Debug)]
struct Case {
    name: String,
    /// The InMemoryLoadBalancer of this case, created whether or not the LoadBalancer uses it.
    infra: String,
    suffix: String,
    publication: bool,
    lb: Value,
    imlb: Value,
    machines: Vec<Machine>,
}

#[derive(Debug)]
struct Machine {
    name: String,
    labels: Map<String, Value>,
    annotations: Map<String, Value>,
    addresses: Vec<Value>,
    conditions: Vec<Value>,
}

/// A name `f<i>-...` of exactly `len` characters (a DNS label when `len` <= 63).
fn sized_name(g: &mut Gen, i: usize, len: usize) -> String {
    let mut name = format!("f{i}-");
    let fill: String = g.pick("[a-z0-9]{70}");
    name.push_str(&fill[..len.saturating_sub(name.len() + 1).min(fill.len())]);
    name.push('z');
    name
}

/// The LoadBalancer's name and publication: a short name, one of 63 characters with its suffix,
/// or (publication disabled) a dotted one of 253.
fn naming(g: &mut Gen, i: usize, earlier: &[Case]) -> (String, String, bool) {
    // The Service name of an earlier LoadBalancer, from another name and suffix.
    if let Some(other) = earlier.iter().find(|c| {
        c.publication
            && c.suffix == "-ext"
            && c.name.len() <= 57
            && !earlier.iter().any(|d| d.name == format!("{}-e", c.name))
    }) && g.chance(8)
    {
        return (format!("{}-e", other.name), "xt".into(), true);
    }
    let suffix = if g.chance(2) {
        "-ext".to_string()
    } else {
        g.pick("-?[a-z0-9]{0,6}[a-z0-9]")
    };
    match g.pick(0..5u8) {
        0 => (sized_name(g, i, 63 - suffix.len()), suffix, true),
        1 => {
            // Dotted: an object name, but no Service name.
            let name = format!("{}.{}", sized_name(g, i, 30), "b".repeat(32));
            (name, suffix, false)
        }
        _ => {
            let len = g.pick(4..16usize);
            (sized_name(g, i, len), suffix, !g.chance(6))
        }
    }
}

fn load_balancer(g: &mut Gen, case: &Case, others: &[String]) -> Value {
    let mut spec = json!({
        "drainSeconds": g.one_of(&[0, 1, 3600]),
        "publication": {"enabled": case.publication, "suffix": case.suffix},
        "targetAddressTypes": g.pick(
            proptest::sample::subsequence(
                vec!["InternalIP", "ExternalIP", "Hostname", "InternalDNS", "ExternalDNS"],
                1..=5,
            )
            .prop_shuffle(),
        ),
    });
    // No ports at all (the schema's default, one port 6443) or 1 to 32.
    if !g.chance(6) {
        spec["ports"] = ports(g);
    }
    if let Some(selector) = selector(g, &case.name) {
        spec["selector"] = selector;
    }
    let gates = g.some_of(&["Ready", "example.com/Healthy", "APIServerPodHealthy"], 2);
    if !gates.is_empty() {
        spec["readinessGates"] = json!(
            gates
                .iter()
                .map(|t| json!({"conditionType": t}))
                .collect::<Vec<_>>()
        );
    }
    let ranges = g.some_of(
        &[
            "10.0.0.0/8",
            "192.0.2.0/24",
            "2001:db8::/32",
            "0.0.0.0/0",
            "::/0",
            "198.51.100.7/32",
        ],
        3,
    );
    if !ranges.is_empty() {
        spec["sourceRanges"] = json!(ranges);
    }
    match g.pick(0..4u8) {
        0 => {
            spec["clusterName"] = json!(CLUSTER);
            spec["controlPlane"] = json!({
                "publishEndpoint": !g.chance(4),
                "endpointHost": g.one_of(&["StableName", "ProviderAddress"])});
        }
        1 => spec["clusterName"] = json!(g.one_of(&[CLUSTER, "missing-cluster"])),
        _ => {}
    }
    if g.chance(5) {
        spec["endpoint"] = json!({
            "host": g.one_of(&["api.fuzz.example.org", "2001:db8::10", "192.0.2.10", "not a host!"]),
            "port": g.one_of(&[6443, 1, 65535])});
    }
    if g.chance(6) {
        spec["dns"] = json!({"hostnames": g.some_of(&["api.fuzz.example.org", "*.fuzz.example.org"], 2),
                             "ttlSeconds": g.one_of(&[1, 604_800])});
    }
    if g.chance(10) {
        spec["targetKind"] = g.one_of(&[
            json!({"apiGroup": "", "kind": "Service"}),
            json!({"apiGroup": "example.com", "kind": "Widget"}),
        ]);
    }
    let infra = match g.pick(0..12u8) {
        0 if !others.is_empty() => json!({"apiGroup": "infrastructure.cluster.x-k8s.io",
            "kind": "InMemoryLoadBalancer", "name": g.one_of(others)}),
        1 => json!({"apiGroup": "infrastructure.cluster.x-k8s.io",
            "kind": "InMemoryLoadBalancer", "name": "missing-infrastructure"}),
        2 => json!({"apiGroup": "infrastructure.cluster.x-k8s.io",
            "kind": "OctaviaLoadBalancer", "name": case.infra}),
        _ => json!({"apiGroup": "infrastructure.cluster.x-k8s.io",
            "kind": "InMemoryLoadBalancer", "name": case.infra}),
    };
    spec["infrastructureRef"] = infra;
    json!({"apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
           "metadata": {"name": case.name}, "spec": spec})
}

fn in_memory(g: &mut Gen, name: &str) -> Value {
    let pools = g.some_of(
        &[
            "203.0.113.0/24",
            "2001:db8:f::/64",
            "198.51.100.5/32",
            "2001:db8::7/128",
        ],
        2,
    );
    let mut spec = json!({"addressPools": pools,
                          "provisioningDelaySeconds": g.one_of(&[0, 0, 1, 2])});
    if pools.is_empty() || g.chance(4) {
        spec["hostname"] = json!(g.one_of(&[
            "lb.fuzz.example.org".to_string(),
            format!(
                "{}.{}.{}.{}",
                "h".repeat(63),
                "i".repeat(63),
                "j".repeat(63),
                "k".repeat(61)
            ),
        ]));
    }
    let mut failures = Vec::new();
    let failures_count = if g.chance(3) { g.pick(1..3usize) } else { 0 };
    for _ in 0..failures_count {
        let mut failure = json!({
            "operation": g.one_of(&["Ensure", "Members", "Delete"]),
            "type": g.one_of(&["Transient", "Permanent"]),
            "times": g.pick(1..=3u32)});
        if g.chance(2) {
            failure["message"] = json!(g.one_of(&[
                String::new(),
                "boom".into(),
                "ünïcødé \"quoted\" <b>tags</b> \\ back".into(),
                "m".repeat(256),
            ]));
        }
        failures.push(failure);
    }
    if !failures.is_empty() {
        spec["failures"] = json!(failures);
    }
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
           "kind": "InMemoryLoadBalancer", "metadata": {"name": name}, "spec": spec})
}

fn machines(g: &mut Gen, i: usize, lb: &str, lbs: &[String], ns: &str) -> Vec<Machine> {
    let keys = label_keys();
    let values = label_values();
    let mut machines = Vec::new();
    for j in 0..g.pick(0..=4usize) {
        let len = g.one_of(&[8, 63]);
        let mut name = format!("f{i}m{j}-");
        let fill: String = g.pick("[a-z0-9]{63}");
        name.push_str(&fill[..len - name.len()]);
        let mut labels = Map::new();
        for key in g.some_of(&keys, 3) {
            labels.insert(key, json!(g.one_of(&values)));
        }
        if lb.len() <= 63 && g.chance(2) {
            labels.insert(LABEL_LB_NAME.into(), json!(lb));
        }
        let mut annotations = Map::new();
        let other = g.one_of(lbs);
        if g.chance(3) {
            annotations.insert(
                ANNOTATION_TARGET_LB.into(),
                json!(g.one_of(&[other.clone(), GHOST.to_string()])),
            );
            annotations.insert(
                ANNOTATION_TARGET_STATUS.into(),
                json!(g.one_of(&["active", "removed", "adding", "bogus", ""])),
            );
        }
        if g.chance(4) {
            annotations.insert(
                ANNOTATION_TARGET_DISABLED.into(),
                json!(g.one_of(&["true", "", "false", "no"])),
            );
        }
        if g.chance(4) {
            let keys = TargetKeys::new(ns, &other);
            annotations.insert(keys.state.clone(), json!(g.one_of(&["active", "nonsense"])));
        }
        if g.chance(4) {
            let keys = TargetKeys::new(ns, GHOST);
            annotations.insert(keys.state.clone(), json!("active"));
            annotations.insert(keys.pre_drain.clone(), json!(format!("capi-lb/{GHOST}")));
        }
        let mut addresses = Vec::new();
        for _ in 0..g.pick(0..=3usize) {
            let octet = g.pick(1..255u8);
            let (kind, address) = g.one_of(&[
                ("InternalIP", format!("10.{i}.{j}.{octet}")),
                ("ExternalIP", format!("2001:db8:{i:x}::{j:x}")),
                ("InternalIP", format!("fd00::{i:x}:{j:x}")),
                ("Hostname", format!("node-{i}-{j}")),
                ("InternalDNS", format!("node-{i}-{j}.fuzz.example.org")),
                ("ExternalDNS", "n".repeat(253)),
                ("InternalIP", "not-an-ip".into()),
                ("ExternalIP", "300.1.2.3".into()),
            ]);
            addresses.push(json!({"type": kind, "address": address}));
        }
        let mut conditions = Vec::new();
        for t in g.some_of(&["Ready", "example.com/Healthy", "APIServerPodHealthy"], 3) {
            conditions.push(json!({"type": t,
                "status": g.one_of(&["True", "False", "Unknown"]),
                "reason": "Fuzz", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}));
        }
        machines.push(Machine {
            name,
            labels,
            annotations,
            addresses,
            conditions,
        });
    }
    machines
}

fn generate(g: &mut Gen, count: usize, ns: &str) -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    for i in 0..count {
        let (name, suffix, publication) = naming(g, i, &cases);
        cases.push(Case {
            infra: format!("f{i}-infra"),
            name,
            suffix,
            publication,
            lb: Value::Null,
            imlb: Value::Null,
            machines: Vec::new(),
        });
    }
    let names: Vec<String> = cases.iter().map(|c| c.name.clone()).collect();
    let infras: Vec<String> = cases.iter().map(|c| c.infra.clone()).collect();
    for (i, case) in cases.iter_mut().enumerate() {
        case.lb = load_balancer(g, case, &infras);
        case.imlb = in_memory(g, &case.infra);
        case.machines = machines(g, i, &case.name, &names, ns);
    }
    cases
}

/// Machine `m` of Cluster [`CLUSTER`] (the `machine` helper's) with its generated labels and
/// annotations.
fn machine_doc(m: &Machine) -> Value {
    let mut doc = machine(&m.name, Value::Object(m.labels.clone()));
    assert_eq!(doc["spec"]["clusterName"], CLUSTER);
    doc["metadata"]["annotations"] = Value::Object(m.annotations.clone());
    doc
}

// --- the rounds --------------------------------------------------------------------------------

fn is_write(request: &str) -> bool {
    ["POST ", "PUT ", "PATCH ", "DELETE "]
        .iter()
        .any(|m| request.starts_with(m))
}

/// The writes among `requests`, by path (without the query).
fn writes_by_path(requests: &[String]) -> BTreeMap<String, usize> {
    let mut by_path = BTreeMap::new();
    for r in requests.iter().filter(|r| is_write(r)) {
        let path = r.split('?').next().unwrap_or(r).to_string();
        *by_path.entry(path).or_insert(0) += 1;
    }
    by_path
}

fn writes(t: &TestNs) -> usize {
    t.requests.list().iter().filter(|r| is_write(r)).count()
}

/// Wait until every LoadBalancer observed its generation and capi-lb wrote nothing for
/// [`SETTLED`]; then require no write for [`QUIET`]. Returns the requests of the round.
async fn converge(t: &TestNs, round: &str, from: usize, cases: &[Case]) -> Vec<String> {
    let lbs = t.api::<LoadBalancer>();
    let started = Instant::now();
    let mut last = (writes(t), Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = writes(t);
        if now != last.0 {
            last = (now, Instant::now());
        }
        let behind: Vec<LoadBalancer> = lbs
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|lb| {
                lb.status.as_ref().and_then(|s| s.observed_generation) != lb.metadata.generation
            })
            .collect();
        let observed = behind.is_empty();
        if observed && last.1.elapsed() >= SETTLED {
            break;
        }
        if started.elapsed() > CONVERGE_WITHIN {
            let recent = t.requests.list();
            let tail = &recent[recent.len().saturating_sub(40)..];
            let behind: Vec<String> = behind
                .iter()
                .map(|lb| {
                    let case = cases.iter().find(|c| c.name == lb.name_any());
                    format!(
                        "{} generation {:?}: {:#?}\ngenerated: {:#}\n{:#}",
                        lb.name_any(),
                        lb.metadata.generation,
                        lb.status,
                        case.map_or(Value::Null, |c| c.lb.clone()),
                        case.map_or(Value::Null, |c| c.imlb.clone()),
                    )
                })
                .collect();
            panic!(
                "{round}: not converged within {CONVERGE_WITHIN:?}; behind: {behind:#?}\nthe last \
                 requests:\n{}",
                tail.join("\n")
            );
        }
    }
    let settled = writes(t);
    tokio::time::sleep(QUIET).await;
    let requests = t.requests.list();
    let quiet: Vec<&String> = requests
        .iter()
        .filter(|r| is_write(r))
        .skip(settled)
        .collect();
    assert!(
        quiet.is_empty(),
        "{round}: capi-lb wrote during the quiet window: {quiet:#?}"
    );
    let round_requests = requests[from..].to_vec();
    let by_path = writes_by_path(&round_requests);
    let events = by_path
        .iter()
        .filter(|(p, _)| p.ends_with("/events"))
        .map(|(_, n)| n)
        .sum::<usize>();
    let busiest = by_path
        .iter()
        .filter(|(p, _)| !p.ends_with("/events"))
        .max_by_key(|(_, n)| **n);
    println!(
        "{round}: converged in {:.1} s; {} writes, {events} Events; most writes to one object: {busiest:?}",
        started.elapsed().as_secs_f64(),
        by_path.values().sum::<usize>()
    );
    for (path, n) in &by_path {
        let most = if path.contains("/machines/") {
            WRITES_PER_MACHINE_PER_LB * cases.len()
        } else {
            WRITES_PER_OBJECT
        };
        if !path.ends_with("/events") {
            assert!(
                *n <= most,
                "{round}: {n} writes to {path} (at most {most}): {by_path:#?}"
            );
        }
    }
    assert!(
        events <= EVENTS_PER_LOAD_BALANCER * cases.len(),
        "{round}: {events} Events for {} LoadBalancers",
        cases.len()
    );
    round_requests
}

/// Every condition's reason is documented and every condition has a message when False; every
/// Ready LoadBalancer that publishes has its Service and EndpointSlices.
async fn check_state(t: &TestNs, round: &str, cases: &[Case]) {
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/troubleshooting.md"
    ))
    .unwrap();
    let services = t.api::<Service>();
    let slices = t.api::<EndpointSlice>();
    let mut reasons = BTreeMap::<String, usize>::new();
    for case in cases {
        let lb = t.api::<LoadBalancer>().get(&case.name).await.unwrap();
        let status = lb.status.clone().unwrap_or_default();
        for c in &status.conditions {
            *reasons
                .entry(format!("{}={} {}", c.type_, c.status, c.reason))
                .or_insert(0) += 1;
            if c.reason == "InvalidSpec" {
                println!("{round}: {} InvalidSpec: {}", case.name, c.message);
            }
            assert!(
                docs.contains(&format!("`{}`", c.reason)),
                "{round}: {}: condition {} reason {} is not in docs/troubleshooting.md",
                case.name,
                c.type_,
                c.reason
            );
            if c.status == "False" {
                assert!(
                    !c.message.trim().is_empty(),
                    "{round}: {}: {} False {} without a message",
                    case.name,
                    c.type_,
                    c.reason
                );
            }
        }
        if !(status.ready && case.publication) {
            continue;
        }
        let service_name = format!("{}{}", case.name, case.suffix);
        let service = services
            .get(&service_name)
            .await
            .unwrap_or_else(|e| panic!("{round}: {} is Ready but {service_name}: {e}", case.name));
        let ips: BTreeSet<String> = status
            .addresses
            .iter()
            .filter(|a| a.address.parse::<std::net::IpAddr>().is_ok())
            .map(|a| a.address.clone())
            .collect();
        if ips.is_empty() {
            let spec = service.spec.unwrap_or_default();
            assert_eq!(
                spec.type_.as_deref(),
                Some("ExternalName"),
                "{round}: {} has only a hostname",
                case.name
            );
            continue;
        }
        let listed: BTreeSet<String> = slices
            .list(&ListParams::default().labels(&format!("{LABEL_SERVICE_NAME}={service_name}")))
            .await
            .unwrap()
            .items
            .iter()
            .flat_map(|s| s.endpoints.iter().flat_map(|e| e.addresses.clone()))
            .collect();
        assert_eq!(listed, ips, "{round}: the EndpointSlices of {service_name}");
    }
    println!("{round}: conditions {reasons:?}");
}

/// The annotations the test wrote that capi-lb does not own are unchanged: `disabled`, and those
/// keyed to the LoadBalancer that does not exist.
async fn check_foreign_annotations(t: &TestNs, round: &str, cases: &[Case]) {
    let machines = capi_api(&t.client, &t.ns, "Machine").await.unwrap();
    let ghost = TargetKeys::new(&t.ns, GHOST);
    for m in cases.iter().flat_map(|c| &c.machines) {
        let live = machines.get(&m.name).await.unwrap();
        let annotations = live.annotations();
        for key in [ANNOTATION_TARGET_DISABLED, &ghost.state, &ghost.pre_drain] {
            assert_eq!(
                annotations.get(key).map(String::as_str),
                m.annotations.get(key).and_then(Value::as_str),
                "{round}: Machine {} annotation {key}",
                m.name
            );
        }
    }
}

async fn create_all(t: &TestNs, cases: &[Case]) {
    t.create(capi_cluster(CLUSTER)).await;
    for case in cases {
        t.create(case.imlb.clone()).await;
        for m in &case.machines {
            t.create(machine_doc(m)).await;
            let mut status = json!({"addresses": m.addresses});
            if !m.conditions.is_empty() {
                status["conditions"] = json!(m.conditions);
            }
            merge_status(
                &t.api::<capi_lb_api::capi::Machine>(),
                &m.name,
                json!({ "status": status }),
            )
            .await;
        }
    }
    for case in cases {
        t.create(case.lb.clone()).await;
    }
}

/// The second round: new specs for some LoadBalancers and new labels and `disabled` annotations
/// for some Machines.
async fn change_some(t: &TestNs, g: &mut Gen, cases: &mut [Case]) {
    let infras: Vec<String> = cases.iter().map(|c| c.infra.clone()).collect();
    let keys = label_keys();
    let values = label_values();
    for case in cases.iter_mut() {
        if g.chance(2) {
            case.lb = load_balancer(g, case, &infras);
            // The whole spec replaced (a JSON patch, with no resourceVersion: capi-lb may be
            // writing the status meanwhile).
            let patch: json_patch::Patch = serde_json::from_value(
                json!([{"op": "replace", "path": "/spec", "value": case.lb["spec"]}]),
            )
            .unwrap();
            t.api::<LoadBalancer>()
                .patch(
                    &case.name,
                    &PatchParams::default(),
                    &Patch::Json::<()>(patch),
                )
                .await
                .unwrap_or_else(|e| panic!("new spec of {}: {e}", case.name));
        }
        for m in &mut case.machines {
            if !g.chance(2) {
                continue;
            }
            let mut patch = Map::new();
            let mut labels = Map::new();
            for key in g.some_of(&keys, 2) {
                labels.insert(key, json!(g.one_of(&values)));
            }
            let disabled = if g.chance(2) {
                m.annotations.remove(ANNOTATION_TARGET_DISABLED);
                Value::Null
            } else {
                m.annotations
                    .insert(ANNOTATION_TARGET_DISABLED.into(), json!("true"));
                json!("true")
            };
            patch.insert(
                "metadata".into(),
                json!({"labels": labels, "annotations": {ANNOTATION_TARGET_DISABLED: disabled}}),
            );
            m.labels.extend(labels);
            capi_api(&t.client, &t.ns, "Machine")
                .await
                .unwrap()
                .patch(
                    &m.name,
                    &PatchParams::default(),
                    &Patch::Merge(&Value::Object(patch)),
                )
                .await
                .unwrap();
        }
    }
}

/// Delete every LoadBalancer (after lifting the injected failures, which a user would fix too:
/// a permanent failure to delete holds the finalizer by design) and check what is left.
async fn delete_all(t: &TestNs, cases: &[Case], state: &std::path::Path) {
    let imlbs: Api<capi_lb_api::InMemoryLoadBalancer> = t.api();
    for case in cases {
        imlbs
            .patch(
                &case.infra,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"failures": null}})),
            )
            .await
            .unwrap();
    }
    let lbs = t.api::<LoadBalancer>();
    for case in cases {
        lbs.delete(&case.name, &DeleteParams::default())
            .await
            .unwrap();
    }
    let started = Instant::now();
    loop {
        let left = lbs.list(&ListParams::default()).await.unwrap().items;
        let cloud: Value = std::fs::read(state)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(Value::Null);
        let in_cloud = cloud["load_balancers"].as_object().map_or(0, Map::len);
        if left.is_empty() && in_cloud == 0 {
            break;
        }
        assert!(
            started.elapsed() < CONVERGE_WITHIN,
            "LoadBalancers left after deletion: {:?}; in the in-memory cloud: {in_cloud}",
            left.iter()
                .map(|lb| (lb.name_any(), lb.status.clone().map(|s| s.conditions)))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let machines = capi_api(&t.client, &t.ns, "Machine").await.unwrap();
    for m in cases.iter().flat_map(|c| &c.machines) {
        let live = machines.get(&m.name).await.unwrap();
        for case in cases {
            let keys = TargetKeys::new(&t.ns, &case.name);
            // A LoadBalancer of another target kind never looks at Machines: what the test wrote
            // under its key stays.
            let machines_kind = case.lb["spec"].get("targetKind").is_none();
            for key in keys.all() {
                if !machines_kind
                    && live.annotations().get(key).map(|v| json!(v))
                        == m.annotations.get(key).cloned()
                {
                    continue;
                }
                assert!(
                    !live.annotations().contains_key(key),
                    "Machine {} keeps {key} of deleted {} (the test wrote {:?}): {:#?}\nthe LoadBalancer: {:#}",
                    m.name,
                    case.name,
                    m.annotations.get(key),
                    live.annotations(),
                    case.lb
                );
            }
            // The pair may name a deleted LoadBalancer only where the test wrote it so and no
            // LoadBalancer ever took it over.
            let pair = live.annotations().get(ANNOTATION_TARGET_LB);
            assert!(
                pair != Some(&case.name)
                    || m.annotations.get(ANNOTATION_TARGET_LB) == Some(&json!(case.name)),
                "Machine {} names deleted {}",
                m.name,
                case.name
            );
        }
        for key in live.annotations().keys() {
            let ours = [
                TARGET_STATE_PREFIX,
                TARGET_SINCE_PREFIX,
                PRE_DRAIN_HOOK_PREFIX,
                PRE_TERMINATE_HOOK_PREFIX,
            ]
            .iter()
            .any(|p| key.starts_with(p));
            assert!(
                !ours || m.annotations.contains_key(key),
                "Machine {} keeps {key}, which the test did not write",
                m.name
            );
        }
        release_machine(t, &m.name).await;
    }
    // What capi-lb published goes with its owner (the garbage collector).
    let published = ListParams::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"));
    let started = Instant::now();
    loop {
        let services = t
            .api::<Service>()
            .list(&published)
            .await
            .unwrap()
            .items
            .len();
        let slices = t
            .api::<EndpointSlice>()
            .list(&published)
            .await
            .unwrap()
            .items
            .len();
        if services + slices == 0 {
            break;
        }
        assert!(
            started.elapsed() < CONVERGE_WITHIN,
            "{services} Services and {slices} EndpointSlices of capi-lb left after deletion"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_input_converges_without_loops_refusals_or_leaks() {
    // A fixed seed by default, so that CI is repeatable; `random` explores.
    let seed: u64 = match std::env::var("CAPI_LB_FUZZ_SEED").as_deref() {
        Ok("random") => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
        Ok(seed) => seed
            .parse()
            .expect("CAPI_LB_FUZZ_SEED is a number or `random`"),
        Err(_) => DEFAULT_SEED,
    };
    let count: usize = std::env::var("CAPI_LB_FUZZ_CASES")
        .ok()
        .map(|s| s.parse().expect("CAPI_LB_FUZZ_CASES is a number"))
        .unwrap_or(16);
    println!("CAPI_LB_FUZZ_SEED={seed} CAPI_LB_FUZZ_CASES={count}");
    let mut t = TestNs::new("fuzz").await;
    install_capi_crds(&t.client).await;
    let mut g = Gen::new(seed);
    let mut cases = generate(&mut g, count, &t.ns);
    let state = std::env::temp_dir().join(format!("capi-lb-fuzz-{}.json", t.ns));
    let mut options = t.options(&["inmemory"]);
    options.inmemory_state = Some(state.clone());
    t.start(options);

    create_all(&t, &cases).await;
    converge(&t, "created", 0, &cases).await;
    check_state(&t, "created", &cases).await;
    check_foreign_annotations(&t, "created", &cases).await;

    let from = t.requests.list().len();
    change_some(&t, &mut g, &mut cases).await;
    converge(&t, "changed", from, &cases).await;
    check_state(&t, "changed", &cases).await;
    check_foreign_annotations(&t, "changed", &cases).await;

    delete_all(&t, &cases, &state).await;
    t.finish().await;
    let _ = std::fs::remove_file(&state);
}
