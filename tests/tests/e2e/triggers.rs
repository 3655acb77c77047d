//! Watch triggers and idleness on a real apiserver (`tests/k8s/harness.sh`).
//!
//! The controller runs in this process as capi-lb's ServiceAccount with a resync of ONE HOUR, so
//! after a change only a watch trigger can make it converge within the few seconds these tests
//! allow ([`BOUND`]). Before every change the namespace is *settled*: every LoadBalancer is Ready
//! (or paused), its generation observed, no target in a transitional state (`adding`, `disabling`,
//! `removing`: the states that carry a drain or provisioning requeue), every provider member
//! `Active`, and no object of the watched kinds written for one second (so no reconcile that an
//! earlier write triggered is still running and could pick the change up by accident). A missing
//! trigger therefore shows up as a step that does not converge.
//!
//! The idle test then checks the other side: once a realistic namespace has converged, nothing in
//! it is written any more (no status, annotation, `-ext` or Event churn).
//!
//! Run: `cargo test -p capi-lb-tests --test e2e triggers::` (add `-- --nocapture` to see how long
//! each step took to converge).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use capi_lb_api::capi::{Cluster, Machine};
use capi_lb_api::target::TargetKeys;
use capi_lb_api::{InMemoryLoadBalancer, LoadBalancer};
use capi_lb_tests::k8s::{
    TIMEOUT, TestNs, condition, cp_cluster, dynamic_api, in_memory, install_capi_crds,
    load_balancer, machine, merge, merge_status, release_machine, set_machine_ip,
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

/// How long a change may take to converge. A watch event reaches the controller within
/// milliseconds on a local apiserver and a reconcile takes well under a second (the in-memory
/// provider answers at once; the only timer involved is a drain of `drainSeconds: 1`), so 10 s
/// leaves a wide margin for a loaded machine running the suite in parallel, while being 360 times
/// shorter than the controller's one-hour resync: only a watch trigger can explain convergence.
const BOUND: Duration = Duration::from_secs(10);
/// How long the namespace must see no write before a change is made (see the module comment).
const QUIET: Duration = Duration::from_secs(1);
/// How long a converged namespace is watched for writes in the idle test.
const IDLE: Duration = Duration::from_secs(10);

const CLASS: &str = "loadbalancer.cluster.x-k8s.io/capi-lb";
const DISABLED: &str = "loadbalancer.cluster.x-k8s.io/disabled";
const LB_REF: &str = "loadbalancer.cluster.x-k8s.io/load-balancer-ref";
const BOUND_SERVICE: &str = "loadbalancer.cluster.x-k8s.io/service";
const DNS_NAME: &str = "loadbalancer.cluster.x-k8s.io/external-endpoint-dns-name";

// --- fixtures -----------------------------------------------------------------------------------

/// An InMemoryLoadBalancer allocating from `pool`.
fn pool(name: &str, pool: &str) -> Value {
    in_memory(name, json!({"addressPools": [pool]}))
}

/// A control-plane Machine of Cluster `demo` (selected by a control-plane LoadBalancer's default
/// selector).
fn control_plane_machine(name: &str) -> Value {
    machine(name, json!({"cluster.x-k8s.io/control-plane": ""}))
}

/// A LoadBalancer on the pool of the same name that realises the Service `service` of capi-lb's
/// class (its author names it).
fn realising(name: &str, service: &str) -> Value {
    let mut lb = load_balancer(name, name, json!({}));
    lb["metadata"]["annotations"] = json!({"loadbalancer.cluster.x-k8s.io/service": service});
    lb
}

/// A Service of capi-lb's class realised by the LoadBalancer of its own name.
fn class_service(name: &str, port: i32) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "annotations": {LB_REF: name}},
           "spec": {"type": "LoadBalancer", "loadBalancerClass": CLASS,
                    "ports": [{"name": "kube-apiserver", "port": port, "targetPort": 6443}]}})
}

fn endpoint_slice(name: &str, service: &str, endpoints: &[(&str, bool)]) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service}},
           "addressType": "IPv4", "ports": [{"name": "kube-apiserver", "port": 6443}],
           "endpoints": endpoints.iter().map(|(ip, ready)|
               json!({"addresses": [ip], "conditions": {"ready": ready}})).collect::<Vec<_>>()})
}

async fn create_machine(t: &TestNs, name: &str, ip: &str) {
    t.create(control_plane_machine(name)).await;
    set_machine_ip(t, name, ip).await;
}

async fn delete<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    api.delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting {name}: {e}"));
}

// --- observing ---------------------------------------------------------------------------------

/// `Ok` when `got == want`, otherwise what differs.
fn expect<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, want {want:?}"))
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

async fn get<K>(api: &Api<K>, name: &str) -> Result<K, String>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    api.get_opt(name)
        .await
        .map_err(|e| format!("get {name}: {e}"))?
        .ok_or_else(|| format!("{name} does not exist"))
}

/// The provider's members of InMemoryLoadBalancer `infra`: `(name, address, state)`, sorted.
async fn members(t: &TestNs, infra: &str) -> Result<Vec<(String, String, String)>, String> {
    let infra = get(&t.api::<InMemoryLoadBalancer>(), infra).await?;
    let mut members: Vec<_> = infra
        .status
        .map(|s| s.members)
        .unwrap_or_default()
        .into_iter()
        .map(|m| (m.name, m.address, m.state))
        .collect();
    members.sort();
    Ok(members)
}

fn active(members: &[(&str, &str)]) -> Vec<(String, String, String)> {
    let mut v: Vec<_> = members
        .iter()
        .map(|(n, a)| (n.to_string(), a.to_string(), "Active".to_string()))
        .collect();
    v.sort();
    v
}

async fn expect_members(t: &TestNs, infra: &str, want: &[(&str, &str)]) -> Result<(), String> {
    expect(
        &format!("members of {infra}"),
        members(t, infra).await?,
        active(want),
    )
}

/// The addresses of an EndpointSlice and whether they are all ready.
async fn slice_ips(t: &TestNs, name: &str) -> Result<(Vec<String>, bool), String> {
    let slice = get(&t.api::<EndpointSlice>(), name).await?;
    let mut ips: Vec<String> = slice
        .endpoints
        .iter()
        .flat_map(|e| e.addresses.clone())
        .collect();
    ips.sort();
    let ready = slice
        .endpoints
        .iter()
        .all(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true));
    Ok((ips, ready))
}

async fn expect_slice(t: &TestNs, name: &str, ips: &[&str]) -> Result<(), String> {
    expect(
        &format!("EndpointSlice {name}"),
        slice_ips(t, name).await?,
        (strings(ips), true),
    )
}

/// `(name, port, targetPort)` of a Service's ports, sorted.
async fn service_ports(t: &TestNs, name: &str) -> Result<Vec<(String, i32, String)>, String> {
    let svc = get(&t.api::<Service>(), name).await?;
    let mut ports: Vec<_> = svc
        .spec
        .and_then(|s| s.ports)
        .unwrap_or_default()
        .into_iter()
        .map(|p| {
            let target = match p.target_port {
                Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i)) => {
                    i.to_string()
                }
                Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s)) => s,
                None => String::new(),
            };
            (p.name.unwrap_or_default(), p.port, target)
        })
        .collect();
    ports.sort();
    Ok(ports)
}

fn port(name: &str, port: i32) -> (String, i32, String) {
    (name.to_string(), port, port.to_string())
}

async fn expect_label(t: &TestNs, service: &str, key: &str, value: &str) -> Result<(), String> {
    let svc = get(&t.api::<Service>(), service).await?;
    expect(
        &format!("label {key} of Service {service}"),
        svc.labels().get(key).map(String::as_str),
        Some(value),
    )
}

/// The ingress IPs of a Service.
async fn ingress(t: &TestNs, name: &str) -> Result<Vec<String>, String> {
    let svc = get(&t.api::<Service>(), name).await?;
    Ok(svc
        .status
        .and_then(|s| s.load_balancer?.ingress)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|i| i.ip)
        .collect())
}

async fn lb_status(t: &TestNs, name: &str) -> Result<capi_lb_api::LoadBalancerStatus, String> {
    get(&t.api::<LoadBalancer>(), name)
        .await?
        .status
        .ok_or_else(|| format!("LoadBalancer {name} has no status"))
}

async fn target_state(t: &TestNs, lb: &str, machine: &str) -> Result<Option<String>, String> {
    let m = get(&t.api::<Machine>(), machine).await?;
    Ok(m.annotations()
        .get(&TargetKeys::new(&t.ns, lb).state)
        .cloned())
}

// --- converging ---------------------------------------------------------------------------------

/// Poll `check` every 100 ms until it is `Ok`, for at most `limit`; returns how long it took. The
/// panic says what was still different.
async fn converge(
    what: &str,
    limit: Duration,
    mut check: impl AsyncFnMut() -> Result<(), String>,
) -> Duration {
    let start = Instant::now();
    loop {
        let result = check().await;
        match result {
            Ok(()) => return start.elapsed(),
            Err(why) if start.elapsed() >= limit => panic!(
                "{what}: not converged within {limit:?} (the controller's resync is one hour: \
                 a watch trigger is missing or did not map to the object, or the reconcile cannot \
                 converge): {why}"
            ),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The kinds a test observes: `(Kind, API)` of every kind served (the Cluster API kinds only once
/// installed).
type Kinds = Vec<(String, Api<DynamicObject>)>;

async fn kinds(t: &TestNs, events: bool) -> Kinds {
    let mut wanted = vec![
        ("loadbalancer.cluster.x-k8s.io/v1alpha1", "LoadBalancer"),
        (
            "infrastructure.cluster.x-k8s.io/v1alpha1",
            "InMemoryLoadBalancer",
        ),
        ("cluster.x-k8s.io/v1beta2", "Machine"),
        ("cluster.x-k8s.io/v1beta2", "Cluster"),
        ("v1", "Service"),
        ("discovery.k8s.io/v1", "EndpointSlice"),
        ("v1", "Endpoints"),
    ];
    if events {
        wanted.push(("v1", "Event"));
        wanted.push(("events.k8s.io/v1", "Event"));
    }
    let mut out = Vec::new();
    for (api_version, kind) in wanted {
        let doc = json!({"apiVersion": api_version, "kind": kind});
        if let Ok(api) = dynamic_api(&t.client, Some(&t.ns), &doc).await {
            out.push((format!("{kind}.{api_version}"), api));
        }
    }
    out
}

/// `(kind, name) -> resourceVersion` of every object of `kinds`.
async fn snapshot(kinds: &Kinds) -> BTreeMap<(String, String), String> {
    let mut out = BTreeMap::new();
    for (kind, api) in kinds {
        for obj in api.list(&ListParams::default()).await.unwrap() {
            out.insert(
                (kind.clone(), obj.name_any()),
                obj.resource_version().unwrap_or_default(),
            );
        }
    }
    out
}

/// Wait until nothing of `kinds` was written for [`QUIET`].
async fn quiet(kinds: &Kinds) {
    let start = Instant::now();
    let mut before = snapshot(kinds).await;
    loop {
        tokio::time::sleep(QUIET).await;
        let after = snapshot(kinds).await;
        if after == before {
            return;
        }
        let changed: Vec<_> = after
            .iter()
            .filter(|(k, v)| before.get(*k) != Some(*v))
            .map(|(k, _)| format!("{} {}", k.0, k.1))
            .chain(
                before
                    .keys()
                    .filter(|k| !after.contains_key(*k))
                    .map(|k| format!("{} {} (deleted)", k.0, k.1)),
            )
            .collect();
        assert!(
            start.elapsed() < BOUND,
            "the namespace is still being written {:?} after the last change: {changed:?}",
            start.elapsed()
        );
        before = after;
    }
}

/// Every LoadBalancer at rest: paused, or Ready with its generation observed, no migration, no
/// target in a transitional state (those carry requeues: drain deadlines, provisioning), every
/// provider member `Active`.
async fn at_rest(t: &TestNs) -> Result<(), String> {
    let lbs = t.api::<LoadBalancer>().list(&ListParams::default()).await;
    let lbs = lbs.map_err(|e| e.to_string())?;
    let machines = match t.api::<Machine>().list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(_) => Vec::new(),
    };
    for lb in &lbs {
        let name = lb.name_any();
        if condition(lb, "Paused").is_some_and(|(s, _)| s == "True") {
            continue;
        }
        let status = lb
            .status
            .as_ref()
            .ok_or_else(|| format!("LoadBalancer {name} has no status"))?;
        expect(&format!("{name} ready"), status.ready, true)?;
        expect(
            &format!("{name} observedGeneration"),
            status.observed_generation,
            lb.metadata.generation,
        )?;
        expect(
            &format!("{name} migration"),
            status.migration.is_none(),
            true,
        )?;
        let key = TargetKeys::new(&t.ns, &name).state;
        for m in &machines {
            if let Some(state) = m.annotations().get(&key)
                && !["active", "disabled", "removed"].contains(&state.as_str())
            {
                return Err(format!("{} is {state} in {name}", m.name_any()));
            }
        }
        let infra = &lb.spec.infrastructure_ref.name;
        for (member, _, state) in members(t, infra).await? {
            expect(
                &format!("member {member} of {infra}"),
                state.as_str(),
                "Active",
            )?;
        }
    }
    Ok(())
}

/// Settle (see the module comment), make `change`, and require convergence within [`BOUND`].
async fn step(
    t: &TestNs,
    kinds: &Kinds,
    what: &str,
    change: impl AsyncFnOnce(),
    check: impl AsyncFnMut() -> Result<(), String>,
) {
    converge(&format!("at rest before: {what}"), BOUND, async || {
        at_rest(t).await
    })
    .await;
    quiet(kinds).await;
    change().await;
    let took = converge(what, BOUND, check).await;
    eprintln!("[trigger] {what}: converged in {took:?}");
}

// --- the tests ----------------------------------------------------------------------------------

/// A control-plane LoadBalancer follows, by watch alone, changes to its Machines (selection,
/// address, the `disabled` annotation, deletion), its infrastructure object, its Cluster's pause,
/// and hand edits and deletions of its `-ext` Service and EndpointSlice.
#[tokio::test]
async fn a_load_balancer_follows_every_watched_kind_within_seconds() {
    let mut t = TestNs::new("e2e-trig-lb").await;
    install_capi_crds(&t.client).await;
    t.start(t.options(&["inmemory"]));
    let kinds = kinds(&t, false).await;
    let (machines, infras, clusters) = (
        t.api::<Machine>(),
        t.api::<InMemoryLoadBalancer>(),
        t.api::<Cluster>(),
    );
    let (services, slices) = (t.api::<Service>(), t.api::<EndpointSlice>());
    t.create(cp_cluster("demo")).await;
    t.create(pool("cp", "203.0.113.0/24")).await;
    t.create(load_balancer(
        "cp",
        "cp",
        json!({"clusterName": "demo", "controlPlane": {}, "drainSeconds": 1}),
    ))
    .await;
    create_machine(&t, "m1", "10.0.0.1").await;
    create_machine(&t, "m2", "10.0.0.2").await;
    create_machine(&t, "m3", "10.0.0.3").await;
    let host = format!("cp-ext.{}.svc.cluster.local", t.ns);
    converge("initial convergence", TIMEOUT, async || {
        expect_members(
            &t,
            "cp",
            &[("m1", "10.0.0.1"), ("m2", "10.0.0.2"), ("m3", "10.0.0.3")],
        )
        .await?;
        let s = lb_status(&t, "cp").await?;
        expect(
            "active targets",
            s.active_targets,
            strings(&["m1", "m2", "m3"]),
        )?;
        expect_slice(&t, "cp-ext-ipv4", &["203.0.113.1"]).await?;
        let c = get(&clusters, "demo").await?;
        expect(
            "Cluster endpoint",
            c.spec.control_plane_endpoint.map(|e| e.host),
            Some(host.clone()),
        )
    })
    .await;

    // Machines.
    step(
        &t,
        &kinds,
        "Machine m3 deselected (control-plane label removed)",
        async || {
            merge(
                &machines,
                "m3",
                json!({"metadata": {"labels": {"cluster.x-k8s.io/control-plane": null}}}),
            )
            .await
        },
        async || {
            expect_members(&t, "cp", &[("m1", "10.0.0.1"), ("m2", "10.0.0.2")]).await?;
            expect(
                "targets",
                lb_status(&t, "cp").await?.targets,
                strings(&["m1", "m2"]),
            )?;
            let state = target_state(&t, "cp", "m3").await?;
            expect(
                "m3 removed",
                state.is_none() || state.as_deref() == Some("removed"),
                true,
            )
        },
    )
    .await;
    step(
        &t,
        &kinds,
        "Machine m3 selected again (label added)",
        async || {
            merge(
                &machines,
                "m3",
                json!({"metadata": {"labels": {"cluster.x-k8s.io/control-plane": ""}}}),
            )
            .await
        },
        async || {
            expect_members(
                &t,
                "cp",
                &[("m1", "10.0.0.1"), ("m2", "10.0.0.2"), ("m3", "10.0.0.3")],
            )
            .await?;
            let s = lb_status(&t, "cp").await?;
            expect(
                "active targets",
                s.active_targets,
                strings(&["m1", "m2", "m3"]),
            )
        },
    )
    .await;
    step(
        &t,
        &kinds,
        "Machine m2's status address changed",
        async || set_machine_ip(&t, "m2", "10.0.0.22").await,
        async || {
            expect_members(
                &t,
                "cp",
                &[("m1", "10.0.0.1"), ("m2", "10.0.0.22"), ("m3", "10.0.0.3")],
            )
            .await
        },
    )
    .await;
    step(
        &t,
        &kinds,
        "Machine m1 disabled (annotation)",
        async || {
            merge(
                &machines,
                "m1",
                json!({"metadata": {"annotations": {DISABLED: "true"}}}),
            )
            .await
        },
        async || {
            expect_members(&t, "cp", &[("m2", "10.0.0.22"), ("m3", "10.0.0.3")]).await?;
            expect(
                "m1 state",
                target_state(&t, "cp", "m1").await?.as_deref(),
                Some("disabled"),
            )?;
            let s = lb_status(&t, "cp").await?;
            expect("active targets", s.active_targets, strings(&["m2", "m3"]))
        },
    )
    .await;
    step(
        &t,
        &kinds,
        "Machine m1 enabled again (annotation removed)",
        async || {
            merge(
                &machines,
                "m1",
                json!({"metadata": {"annotations": {DISABLED: null}}}),
            )
            .await
        },
        async || {
            expect_members(
                &t,
                "cp",
                &[("m1", "10.0.0.1"), ("m2", "10.0.0.22"), ("m3", "10.0.0.3")],
            )
            .await?;
            let s = lb_status(&t, "cp").await?;
            expect(
                "active targets",
                s.active_targets,
                strings(&["m1", "m2", "m3"]),
            )
        },
    )
    .await;

    // The infrastructure object.
    step(
        &t,
        &kinds,
        "InMemoryLoadBalancer addressPools changed",
        async || {
            merge(
                &infras,
                "cp",
                json!({"spec": {"addressPools": ["198.51.100.0/24"]}}),
            )
            .await
        },
        async || {
            expect_slice(&t, "cp-ext-ipv4", &["198.51.100.1"]).await?;
            let s = lb_status(&t, "cp").await?;
            let addresses: Vec<String> = s.addresses.into_iter().map(|a| a.address).collect();
            expect(
                "LoadBalancer addresses",
                addresses,
                strings(&["198.51.100.1"]),
            )
        },
    )
    .await;

    // The owned -ext Service and EndpointSlice, edited and deleted by hand.
    let ext_ports = vec![port("kube-apiserver", 6443)];
    step(
        &t,
        &kinds,
        "-ext Service's targetPort edited by hand",
        async || {
            merge(
                &services,
                "cp-ext",
                json!({"spec": {"ports": [{"name": "kube-apiserver", "port": 6443, "targetPort": 8443}]}}),
            )
            .await
        },
        async || expect("cp-ext ports", service_ports(&t, "cp-ext").await?, ext_ports.clone()),
    )
    .await;
    step(
        &t,
        &kinds,
        "-ext Service's managed-by label removed by hand",
        async || {
            merge(
                &services,
                "cp-ext",
                json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": null}}}),
            )
            .await
        },
        async || expect_label(&t, "cp-ext", "app.kubernetes.io/managed-by", "capi-lb").await,
    )
    .await;
    let old = get(&services, "cp-ext").await.unwrap().uid();
    step(
        &t,
        &kinds,
        "-ext Service deleted by hand",
        async || delete(&services, "cp-ext").await,
        async || {
            let svc = get(&services, "cp-ext").await?;
            expect("a new cp-ext", svc.uid() != old, true)?;
            expect(
                "cp-ext ports",
                service_ports(&t, "cp-ext").await?,
                ext_ports.clone(),
            )?;
            let slice = get(&slices, "cp-ext-ipv4").await?;
            let owners: Vec<_> = slice
                .owner_references()
                .iter()
                .map(|o| o.uid.clone())
                .collect();
            expect("owner of cp-ext-ipv4", owners, vec![svc.uid().unwrap()])?;
            expect_slice(&t, "cp-ext-ipv4", &["198.51.100.1"]).await
        },
    )
    .await;
    step(
        &t,
        &kinds,
        "-ext EndpointSlice's addresses edited by hand",
        async || {
            merge(
                &slices,
                "cp-ext-ipv4",
                json!({"endpoints": [{"addresses": ["192.0.2.66"], "conditions": {"ready": true}}]}),
            )
            .await
        },
        async || expect_slice(&t, "cp-ext-ipv4", &["198.51.100.1"]).await,
    )
    .await;
    step(
        &t,
        &kinds,
        "-ext EndpointSlice deleted by hand",
        async || delete(&slices, "cp-ext-ipv4").await,
        async || expect_slice(&t, "cp-ext-ipv4", &["198.51.100.1"]).await,
    )
    .await;

    // The Cluster: paused, a change meanwhile is not acted on; unpaused, it is.
    step(
        &t,
        &kinds,
        "Cluster paused (spec.paused)",
        async || merge(&clusters, "demo", json!({"spec": {"paused": true}})).await,
        async || {
            let lb = get(&t.api::<LoadBalancer>(), "cp").await?;
            expect(
                "Paused",
                condition(&lb, "Paused").map(|c| c.0),
                Some("True".into()),
            )
        },
    )
    .await;
    merge(
        &infras,
        "cp",
        json!({"spec": {"addressPools": ["203.0.113.0/24"]}}),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    expect_slice(&t, "cp-ext-ipv4", &["198.51.100.1"])
        .await
        .unwrap_or_else(|e| panic!("a paused LoadBalancer acted on a change: {e}"));
    step(
        &t,
        &kinds,
        "Cluster unpaused (and the change made meanwhile acted on)",
        async || merge(&clusters, "demo", json!({"spec": {"paused": false}})).await,
        async || {
            let lb = get(&t.api::<LoadBalancer>(), "cp").await?;
            expect(
                "Paused",
                condition(&lb, "Paused").map(|c| c.0),
                Some("False".into()),
            )?;
            expect_slice(&t, "cp-ext-ipv4", &["203.0.113.1"]).await
        },
    )
    .await;

    // A Machine deleted: drained, hooks released; once Cluster API lets it go, no longer a target.
    // A real Cluster API manager (the harness runs one) lets it go as soon as the hooks are
    // released, so it may be gone already.
    let keys = TargetKeys::new(&t.ns, "cp");
    step(
        &t,
        &kinds,
        "Machine m3 deleted",
        async || delete(&machines, "m3").await,
        async || {
            expect_members(&t, "cp", &[("m1", "10.0.0.1"), ("m2", "10.0.0.22")]).await?;
            let m = machines
                .get_opt("m3")
                .await
                .map_err(|e| format!("get m3: {e}"))?;
            let hooks = m.is_some_and(|m| {
                [&keys.pre_drain, &keys.pre_terminate]
                    .iter()
                    .any(|k| m.annotations().contains_key(*k))
            });
            expect("m3's deletion hooks released", hooks, false)
        },
    )
    .await;
    step(
        &t,
        &kinds,
        "Machine m3 gone (Cluster API's finalizer released, here if Cluster API has not)",
        async || release_machine(&t, "m3").await,
        async || {
            let s = lb_status(&t, "cp").await?;
            expect("targets", s.targets, strings(&["m1", "m2"]))
        },
    )
    .await;

    t.finish().await;
}

/// A Service of capi-lb's load-balancer class drives the LoadBalancer that realises it, by watch
/// alone: created, its EndpointSlices changed, its ports changed, moved to another LoadBalancer,
/// no longer of the class, deleted.
#[tokio::test]
async fn a_class_service_and_its_endpoints_drive_the_load_balancer_within_seconds() {
    let mut t = TestNs::new("e2e-trig-class").await;
    // The realising LoadBalancers select Machines when no Service binds them (none exist): with
    // the kind served, an unbound LoadBalancer has no members (an unlistable kind would keep them).
    install_capi_crds(&t.client).await;
    t.start(t.options(&["inmemory"]));
    let kinds = kinds(&t, false).await;
    let (services, slices, lbs) = (
        t.api::<Service>(),
        t.api::<EndpointSlice>(),
        t.api::<LoadBalancer>(),
    );
    t.create(pool("tcp", "198.51.100.0/24")).await;
    t.create(realising("tcp", "tcp")).await;
    t.create(pool("alt", "192.0.2.0/24")).await;
    t.create(realising("alt", "tcp")).await;
    converge("initial convergence", TIMEOUT, async || {
        for name in ["tcp", "alt"] {
            expect(
                &format!("{name} ready"),
                lb_status(&t, name).await?.ready,
                true,
            )?;
        }
        Ok(())
    })
    .await;
    let bound_to = async |lb: &str| -> Result<Option<String>, String> {
        Ok(get(&lbs, lb)
            .await?
            .annotations()
            .get(BOUND_SERVICE)
            .cloned())
    };
    let infra_ports = async |infra: &str| -> Result<Vec<i32>, String> {
        Ok(get(&t.api::<InMemoryLoadBalancer>(), infra)
            .await?
            .status
            .map(|s| s.ports)
            .unwrap_or_default())
    };

    step(
        &t,
        &kinds,
        "class Service created",
        async || {
            t.create(class_service("tcp", 6443)).await;
        },
        async || {
            expect("tcp bound to", bound_to("tcp").await?, Some("tcp".into()))?;
            expect(
                "ingress of tcp",
                ingress(&t, "tcp").await?,
                strings(&["198.51.100.1"]),
            )?;
            expect("ports of tcp", infra_ports("tcp").await?, vec![6443])
        },
    )
    .await;
    step(
        &t,
        &kinds,
        "class Service's EndpointSlice created",
        async || {
            t.create(endpoint_slice("tcp-1", "tcp", &[("10.244.0.5", true)]))
                .await;
        },
        async || expect_members(&t, "tcp", &[("10.244.0.5", "10.244.0.5")]).await,
    )
    .await;
    step(
        &t,
        &kinds,
        "class Service's EndpointSlice: an endpoint added",
        async || {
            merge(
                &slices,
                "tcp-1",
                json!({"endpoints": [
                    {"addresses": ["10.244.0.5"], "conditions": {"ready": true}},
                    {"addresses": ["10.244.0.6"], "conditions": {"ready": true}}]}),
            )
            .await
        },
        async || {
            expect_members(
                &t,
                "tcp",
                &[("10.244.0.5", "10.244.0.5"), ("10.244.0.6", "10.244.0.6")],
            )
            .await
        },
    )
    .await;
    step(
        &t,
        &kinds,
        "class Service's EndpointSlice: an endpoint not ready",
        async || {
            merge(
                &slices,
                "tcp-1",
                json!({"endpoints": [
                    {"addresses": ["10.244.0.5"], "conditions": {"ready": false}},
                    {"addresses": ["10.244.0.6"], "conditions": {"ready": true}}]}),
            )
            .await
        },
        async || expect_members(&t, "tcp", &[("10.244.0.6", "10.244.0.6")]).await,
    )
    .await;
    step(
        &t,
        &kinds,
        "class Service's port changed",
        async || {
            merge(
                &services,
                "tcp",
                json!({"spec": {"ports": [{"name": "kube-apiserver", "port": 7443, "targetPort": 6443}]}}),
            )
            .await
        },
        async || {
            expect("ports of tcp", infra_ports("tcp").await?, vec![7443])?;
            expect(
                "tcp-ext ports",
                service_ports(&t, "tcp-ext").await?,
                vec![port("kube-apiserver", 7443)],
            )
        },
    )
    .await;
    step(
        &t,
        &kinds,
        "class Service moved to LoadBalancer alt (load-balancer-ref annotation)",
        async || {
            merge(
                &services,
                "tcp",
                json!({"metadata": {"annotations": {LB_REF: "alt"}}}),
            )
            .await
        },
        async || {
            expect("alt bound to", bound_to("alt").await?, Some("tcp".into()))?;
            expect_members(&t, "alt", &[("10.244.0.6", "10.244.0.6")]).await?;
            expect(
                "ingress of tcp",
                ingress(&t, "tcp").await?,
                strings(&["192.0.2.1"]),
            )?;
            // The LoadBalancer left behind lets the Service's endpoints go.
            expect_members(&t, "tcp", &[]).await
        },
    )
    .await;
    step(
        &t,
        &kinds,
        "class Service no longer of type LoadBalancer",
        async || {
            merge(
                &services,
                "tcp",
                json!({"spec": {"type": "ClusterIP", "loadBalancerClass": null}}),
            )
            .await
        },
        async || expect_members(&t, "alt", &[]).await,
    )
    .await;
    step(
        &t,
        &kinds,
        "class Service of type LoadBalancer again",
        async || {
            merge(
                &services,
                "tcp",
                json!({"spec": {"type": "LoadBalancer", "loadBalancerClass": CLASS}}),
            )
            .await
        },
        async || expect_members(&t, "alt", &[("10.244.0.6", "10.244.0.6")]).await,
    )
    .await;
    step(
        &t,
        &kinds,
        "class Service deleted",
        async || delete(&services, "tcp").await,
        async || expect_members(&t, "alt", &[]).await,
    )
    .await;

    t.finish().await;
}

/// The `-ext` publisher for plain Services of type LoadBalancer follows, by watch alone, the
/// source's ingress and ports, and restores its `-ext` Service and EndpointSlices after hand edits
/// and deletions.
#[tokio::test]
async fn the_ext_publisher_follows_services_and_restores_its_objects_within_seconds() {
    let mut t = TestNs::new("e2e-trig-svc").await;
    t.start(t.options(&["inmemory"]));
    let kinds = kinds(&t, false).await;
    let (services, slices) = (t.api::<Service>(), t.api::<EndpointSlice>());
    t.create(
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "etcd-lb"},
               "spec": {"type": "LoadBalancer", "selector": {"app": "etcd"},
                        "ports": [{"name": "etcd", "port": 2379, "targetPort": 2379}]}}),
    )
    .await;
    // No load-balancer implementation serves this Service: the test writes the ingress as one
    // would.
    let set_ingress = async |ips: &[&str]| {
        let ingress: Vec<Value> = ips.iter().map(|ip| json!({"ip": ip})).collect();
        merge_status(
            &services,
            "etcd-lb",
            json!({"status": {"loadBalancer": {"ingress": ingress}}}),
        )
        .await
    };
    let dns = format!("etcd-lb-ext.{}.svc.cluster.local", t.ns);
    let ext_ports = vec![port("etcd", 2379)];
    step(
        &t,
        &kinds,
        "Service of type LoadBalancer gets an ingress",
        async || set_ingress(&["198.51.100.7"]).await,
        async || {
            expect_slice(&t, "etcd-lb-ext-ipv4", &["198.51.100.7"]).await?;
            let svc = get(&services, "etcd-lb").await?;
            expect(
                "DNS name annotation",
                svc.annotations().get(DNS_NAME),
                Some(&dns),
            )
        },
    )
    .await;
    step(
        &t,
        &kinds,
        "ingress IP changed",
        async || set_ingress(&["198.51.100.8"]).await,
        async || expect_slice(&t, "etcd-lb-ext-ipv4", &["198.51.100.8"]).await,
    )
    .await;
    step(
        &t,
        &kinds,
        "ingress dual-stack",
        async || set_ingress(&["198.51.100.8", "2001:db8::8"]).await,
        async || {
            expect_slice(&t, "etcd-lb-ext-ipv4", &["198.51.100.8"]).await?;
            expect_slice(&t, "etcd-lb-ext-ipv6", &["2001:db8::8"]).await
        },
    )
    .await;
    step(
        &t,
        &kinds,
        "-ext Service's targetPort edited by hand",
        async || {
            merge(
                &services,
                "etcd-lb-ext",
                json!({"spec": {"ports": [{"name": "etcd", "port": 2379, "targetPort": 9999}]}}),
            )
            .await
        },
        async || {
            expect(
                "etcd-lb-ext ports",
                service_ports(&t, "etcd-lb-ext").await?,
                ext_ports.clone(),
            )
        },
    )
    .await;
    step(
        &t,
        &kinds,
        "-ext Service's managed-by label removed by hand",
        async || {
            merge(
                &services,
                "etcd-lb-ext",
                json!({"metadata": {"labels": {"loadbalancer.cluster.x-k8s.io/managed-by": null}}}),
            )
            .await
        },
        async || {
            expect_label(
                &t,
                "etcd-lb-ext",
                "loadbalancer.cluster.x-k8s.io/managed-by",
                "capi-lb",
            )
            .await
        },
    )
    .await;
    step(
        &t,
        &kinds,
        "-ext EndpointSlice's addresses edited by hand",
        async || {
            merge(
                &slices,
                "etcd-lb-ext-ipv4",
                json!({"endpoints": [{"addresses": ["192.0.2.66"], "conditions": {"ready": true}}]}),
            )
            .await
        },
        async || expect_slice(&t, "etcd-lb-ext-ipv4", &["198.51.100.8"]).await,
    )
    .await;
    step(
        &t,
        &kinds,
        "-ext EndpointSlice deleted by hand",
        async || delete(&slices, "etcd-lb-ext-ipv6").await,
        async || expect_slice(&t, "etcd-lb-ext-ipv6", &["2001:db8::8"]).await,
    )
    .await;
    let old = get(&services, "etcd-lb-ext").await.unwrap().uid();
    step(
        &t,
        &kinds,
        "-ext Service deleted by hand",
        async || delete(&services, "etcd-lb-ext").await,
        async || {
            let svc = get(&services, "etcd-lb-ext").await?;
            expect("a new etcd-lb-ext", svc.uid() != old, true)?;
            for slice in ["etcd-lb-ext-ipv4", "etcd-lb-ext-ipv6"] {
                let s = get(&slices, slice).await?;
                let owners: Vec<_> = s.owner_references().iter().map(|o| o.uid.clone()).collect();
                expect(
                    &format!("owner of {slice}"),
                    owners,
                    vec![svc.uid().unwrap()],
                )?;
            }
            expect_slice(&t, "etcd-lb-ext-ipv4", &["198.51.100.8"]).await?;
            expect_slice(&t, "etcd-lb-ext-ipv6", &["2001:db8::8"]).await
        },
    )
    .await;
    step(
        &t,
        &kinds,
        "source Service's port changed",
        async || {
            merge(
                &services,
                "etcd-lb",
                json!({"spec": {"ports": [{"name": "etcd", "port": 2380, "targetPort": 2379}]}}),
            )
            .await
        },
        async || {
            expect(
                "etcd-lb-ext ports",
                service_ports(&t, "etcd-lb-ext").await?,
                vec![port("etcd", 2380)],
            )
        },
    )
    .await;
    step(
        &t,
        &kinds,
        "ingress withdrawn",
        async || set_ingress(&[]).await,
        async || {
            expect(
                "etcd-lb-ext",
                services
                    .get_opt("etcd-lb-ext")
                    .await
                    .ok()
                    .flatten()
                    .is_none(),
                true,
            )?;
            let svc = get(&services, "etcd-lb").await?;
            expect("DNS name annotation", svc.annotations().get(DNS_NAME), None)
        },
    )
    .await;

    t.finish().await;
}

/// A port number of an `-ext` Service changed by hand is restored, for the LoadBalancer's and the
/// Service publisher's `-ext`. The hand-made port entry belongs to another field manager (ports are
/// a list keyed by port and protocol), so a server-side apply alone would keep it next to ours (or be
/// refused as a duplicate name, retried forever): the publisher replaces the whole list.
#[tokio::test]
async fn an_ext_service_port_number_changed_by_hand_is_restored() {
    let mut t = TestNs::new("e2e-trig-port").await;
    t.start(t.options(&["inmemory"]));
    let kinds = kinds(&t, false).await;
    let services = t.api::<Service>();
    t.create(pool("cp", "203.0.113.0/24")).await;
    t.create(load_balancer("cp", "cp", json!({}))).await;
    t.create(
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "etcd-lb"},
               "spec": {"type": "LoadBalancer", "selector": {"app": "etcd"},
                        "ports": [{"name": "etcd", "port": 2379, "targetPort": 2379}]}}),
    )
    .await;
    merge_status(
        &services,
        "etcd-lb",
        json!({"status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}]}}}),
    )
    .await;
    converge("initial convergence", TIMEOUT, async || {
        expect_slice(&t, "cp-ext-ipv4", &["203.0.113.1"]).await?;
        expect_slice(&t, "etcd-lb-ext-ipv4", &["198.51.100.7"]).await
    })
    .await;
    for (ext, name, port_number) in [
        ("cp-ext", "kube-apiserver", 6443),
        ("etcd-lb-ext", "etcd", 2379),
    ] {
        step(
            &t,
            &kinds,
            &format!("{ext}'s port number edited by hand"),
            async || {
                merge(
                    &services,
                    ext,
                    json!({"spec": {"ports": [{"name": name, "port": 9999, "targetPort": 9999}]}}),
                )
                .await
            },
            async || {
                expect(
                    &format!("{ext} ports"),
                    service_ports(&t, ext).await?,
                    vec![port(name, port_number)],
                )
            },
        )
        .await;
    }
    t.finish().await;
}

// --- idle ---------------------------------------------------------------------------------------

/// The paths where two JSON values differ (`metadata.resourceVersion` and `managedFields` aside).
fn differences(path: &str, old: &Value, new: &Value, out: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let p = format!("{path}.{k}");
                if p == ".metadata.resourceVersion" || p == ".metadata.managedFields" {
                    continue;
                }
                differences(
                    &p,
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (a, b) if a != b => out.push(format!("{path}: {a} -> {b}")),
        _ => {}
    }
}

/// The newest managedFields entry: who wrote last, how and when.
fn last_writer(obj: &DynamicObject) -> String {
    obj.metadata
        .managed_fields
        .iter()
        .flatten()
        .max_by_key(|m| m.time.as_ref().map(|t| t.0))
        .map(|m| {
            format!(
                "{} ({} {}) at {}",
                m.manager.as_deref().unwrap_or("?"),
                m.operation.as_deref().unwrap_or("?"),
                m.subresource.as_deref().unwrap_or("main"),
                m.time.as_ref().map(|t| t.0.to_string()).unwrap_or_default()
            )
        })
        .unwrap_or_else(|| "no managedFields".into())
}

/// A converged namespace — a control-plane LoadBalancer with three Machines (and its Cluster), a
/// Service of type LoadBalancer with an ingress and its `-ext`, and a Service of capi-lb's class
/// with its EndpointSlice — is not written any more: watches opened on every kind involved from
/// the resourceVersion of their list see no event for 10 s, and every resourceVersion is the same
/// afterwards.
#[tokio::test]
async fn a_converged_namespace_is_not_written_while_idle() {
    let mut t = TestNs::new("e2e-idle").await;
    install_capi_crds(&t.client).await;
    t.start(t.options(&["inmemory"]));
    t.create(cp_cluster("demo")).await;
    t.create(pool("cp", "203.0.113.0/24")).await;
    t.create(load_balancer(
        "cp",
        "cp",
        json!({"clusterName": "demo", "controlPlane": {}, "drainSeconds": 1}),
    ))
    .await;
    for (m, ip) in [("m1", "10.0.0.1"), ("m2", "10.0.0.2"), ("m3", "10.0.0.3")] {
        create_machine(&t, m, ip).await;
    }
    t.create(
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "etcd-lb"},
               "spec": {"type": "LoadBalancer", "selector": {"app": "etcd"},
                        "ports": [{"name": "etcd", "port": 2379, "targetPort": 2379}]}}),
    )
    .await;
    merge_status(
        &t.api::<Service>(),
        "etcd-lb",
        json!({"status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}]}}}),
    )
    .await;
    t.create(pool("tcp", "198.51.100.0/24")).await;
    t.create(realising("tcp", "tcp")).await;
    t.create(class_service("tcp", 6443)).await;
    t.create(endpoint_slice("tcp-1", "tcp", &[("10.244.0.5", true)]))
        .await;

    converge("convergence", TIMEOUT, async || {
        at_rest(&t).await?;
        expect_members(
            &t,
            "cp",
            &[("m1", "10.0.0.1"), ("m2", "10.0.0.2"), ("m3", "10.0.0.3")],
        )
        .await?;
        let s = lb_status(&t, "cp").await?;
        expect(
            "active targets",
            s.active_targets,
            strings(&["m1", "m2", "m3"]),
        )?;
        expect_slice(&t, "cp-ext-ipv4", &["203.0.113.1"]).await?;
        let c = get(&t.api::<Cluster>(), "demo").await?;
        expect(
            "Cluster endpoint set",
            c.spec.control_plane_endpoint.is_some(),
            true,
        )?;
        expect_slice(&t, "etcd-lb-ext-ipv4", &["198.51.100.7"]).await?;
        let svc = get(&t.api::<Service>(), "etcd-lb").await?;
        expect("DNS name", svc.annotations().contains_key(DNS_NAME), true)?;
        expect_members(&t, "tcp", &[("10.244.0.5", "10.244.0.5")]).await?;
        expect(
            "ingress of tcp",
            ingress(&t, "tcp").await?,
            strings(&["198.51.100.1"]),
        )?;
        expect_slice(&t, "tcp-ext-ipv4", &["198.51.100.1"]).await
    })
    .await;
    // Converged also means that the last writes are done: the Events that report them, the
    // reconciles they trigger (each controller sees its own writes). Nothing of these kinds may be
    // written for a second; a writer that never stops fails here (`quiet` gives up after 10 s).
    let kinds = kinds(&t, true).await;
    quiet(&kinds).await;

    // Record every object of every kind, and watch each kind from its list's resourceVersion.
    let mut recorded: BTreeMap<(String, String), DynamicObject> = BTreeMap::new();
    let mut watches = Vec::new();
    for (kind, api) in &kinds {
        let list = api.list(&ListParams::default()).await.unwrap();
        let rv = list.metadata.resource_version.clone().unwrap_or_default();
        for obj in list.items {
            recorded.insert((kind.clone(), obj.name_any()), obj);
        }
        let (kind, api) = (kind.clone(), api.clone());
        watches.push(async move {
            let stream = api
                .watch(
                    &WatchParams::default().timeout(IDLE.as_secs() as u32 + 30),
                    &rv,
                )
                .await
                .unwrap_or_else(|e| panic!("watching {kind}: {e}"));
            let events: Vec<WatchEvent<DynamicObject>> = stream
                .take_until(tokio::time::sleep(IDLE))
                .try_collect()
                .await
                .unwrap();
            (kind, events)
        });
    }
    let seen = futures::future::join_all(watches).await;
    let mut writes = Vec::new();
    // Cluster API's manager is not under test: its own status updates (a condition of the
    // Cluster's remote connection probe, which it revisits on its own schedule) are not counted.
    let mut by_capi = std::collections::BTreeSet::new();
    for (kind, events) in seen {
        for event in events {
            let (what, obj) = match event {
                WatchEvent::Added(o) => ("ADDED", o),
                WatchEvent::Modified(o) => ("MODIFIED", o),
                WatchEvent::Deleted(o) => ("DELETED", o),
                WatchEvent::Bookmark(_) => continue,
                WatchEvent::Error(e) => panic!("watching {kind}: {e:?}"),
            };
            let name = obj.name_any();
            if last_writer(&obj).starts_with("cluster-api-manager ") {
                by_capi.insert((kind.clone(), name.clone()));
                continue;
            }
            let mut changed = Vec::new();
            match recorded.get(&(kind.clone(), name.clone())) {
                Some(old) => differences(
                    "",
                    &serde_json::to_value(old).unwrap(),
                    &serde_json::to_value(&obj).unwrap(),
                    &mut changed,
                ),
                None => changed.push(format!("new: {}", serde_json::to_value(&obj.data).unwrap())),
            }
            writes.push(format!(
                "{kind} {name} {what} by {}: {}",
                last_writer(&obj),
                changed.join("; ")
            ));
        }
    }
    // And every resourceVersion is the one recorded.
    let after = snapshot(&kinds).await;
    let before: BTreeMap<_, _> = recorded
        .iter()
        .map(|(k, o)| (k.clone(), o.resource_version().unwrap_or_default()))
        .collect();
    for (k, rv) in &after {
        if before.get(k) != Some(rv) && !by_capi.contains(k) {
            writes.push(format!(
                "{} {}: resourceVersion {:?} -> {rv}",
                k.0,
                k.1,
                before.get(k)
            ));
        }
    }
    for k in before.keys().filter(|k| !after.contains_key(*k)) {
        writes.push(format!("{} {}: deleted", k.0, k.1));
    }
    assert!(
        writes.is_empty(),
        "written while idle ({} objects recorded):\n{}",
        recorded.len(),
        writes.join("\n")
    );
    let mut per_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for (kind, _) in recorded.keys() {
        *per_kind.entry(kind).or_default() += 1;
    }
    eprintln!(
        "[idle] {} objects unchanged for {IDLE:?}: {per_kind:?}",
        recorded.len()
    );
    t.finish().await;
}
