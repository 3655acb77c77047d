//! capi-lb's in-memory API (`capi_lb::sim::inmemory_api`, what `simulate` and the reconcile tests
//! run against) compared with a real kube-apiserver (`tests/k8s/harness.sh`): the same requests go
//! to both, and what capi-lb depends on must come back the same: whether a write bumps the
//! resourceVersion (an identical apply or merge patch does not), `metadata.generation`, the status
//! subresource's isolation, server-side apply's conflicts (409 naming the manager), `force` and the
//! removal of fields no longer applied, the managers in `managedFields` with their fields,
//! finalizers holding a deletion, label and field selectors, pages, watch events, and the shapes
//! of 404, 409 and 422 refusals.
//!
//! Each step notes what it saw as JSON (no resourceVersions, UIDs or times: only whether they
//! changed); the test fails listing every step where the two differ.

use std::sync::Arc;
use std::time::Duration;

use capi_lb::sim::inmemory_api::InMemoryApiBuilder;
use capi_lb_api::LoadBalancer;
use capi_lb_providers::clock::{SharedClock, SystemClock};
use capi_lb_tests::k8s::{TestNs, load_balancer};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

/// What one side saw, step by step.
#[derive(Debug, Default)]
struct Seen(Vec<(String, Value)>);

impl Seen {
    fn note(&mut self, step: &str, what: Value) {
        self.0.push((step.to_string(), what));
    }
}

/// A request's outcome: `ok`, or the refusal's code, reason, message and details.
fn outcome<T>(result: &Result<T, kube::Error>) -> Value {
    match result {
        Ok(_) => json!("ok"),
        Err(kube::Error::Api(status)) => json!({
            "code": status.code, "reason": status.reason, "message": status.message,
            "details": serde_json::to_value(&status.details).unwrap(),
        }),
        Err(e) => json!({"error": e.to_string()}),
    }
}

/// A refusal's code and reason only (where the apiserver's message names library internals).
fn code<T>(result: &Result<T, kube::Error>) -> Value {
    match result {
        Ok(_) => json!("ok"),
        Err(kube::Error::Api(status)) => json!([status.code, status.reason]),
        Err(e) => json!({"error": e.to_string()}),
    }
}

/// The managers of `object`'s `managedFields` with their operation, subresource and fields, in
/// the order of their names (their times may fall in different seconds on the two sides).
fn managers<K: Resource>(object: &K) -> Value {
    let mut entries: Vec<Value> = object
        .meta()
        .managed_fields
        .iter()
        .flatten()
        .map(|e| {
            json!([
                e.manager,
                e.operation,
                e.subresource,
                e.fields_v1.as_ref().map(|f| &f.0)
            ])
        })
        .collect();
    entries.sort_by_key(|e| e.to_string());
    Value::Array(entries)
}

fn rv<K: Resource>(object: &K) -> String {
    object.meta().resource_version.clone().unwrap_or_default()
}

fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

fn by(manager: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(manager.into()),
        ..PatchParams::default()
    }
}

/// Server-side apply, resourceVersions, managed fields, refusals and finalizers on a ConfigMap (a
/// core kind without a status or a generation).
async fn configmap(client: &Client, ns: &str, seen: &mut Seen) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let one = PatchParams::apply("one");
    let created = cms
        .patch(
            "c",
            &one,
            &Patch::Apply(cm("c", json!({"a": "1", "b": "2"}))),
        )
        .await
        .unwrap();
    seen.note(
        "apply creates",
        json!({"managers": managers(&created), "generation": created.metadata.generation}),
    );
    let again = cms
        .patch(
            "c",
            &one,
            &Patch::Apply(cm("c", json!({"a": "1", "b": "2"}))),
        )
        .await
        .unwrap();
    seen.note(
        "identical apply keeps the resourceVersion",
        json!(rv(&again) == rv(&created)),
    );
    let same = cms
        .patch(
            "c",
            &by("editor"),
            &Patch::Merge(json!({"data": {"a": "1"}})),
        )
        .await
        .unwrap();
    seen.note(
        "identical merge patch keeps the resourceVersion",
        json!(rv(&same) == rv(&created)),
    );
    let merged = cms
        .patch(
            "c",
            &by("editor"),
            &Patch::Merge(json!({"data": {"c": "3"}})),
        )
        .await
        .unwrap();
    seen.note(
        "merge patch",
        json!({"bumped": rv(&merged) != rv(&created), "managers": managers(&merged)}),
    );
    let two = PatchParams::apply("two");
    let conflict = cms
        .patch("c", &two, &Patch::Apply(cm("c", json!({"a": "9"}))))
        .await;
    seen.note("conflicting apply", outcome(&conflict));
    let forced = cms
        .patch(
            "c",
            &two.clone().force(),
            &Patch::Apply(cm("c", json!({"a": "9"}))),
        )
        .await
        .unwrap();
    seen.note(
        "forced apply",
        json!({"data": forced.data, "managers": managers(&forced)}),
    );
    let bare = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    let dropped = cms.patch("c", &one, &Patch::Apply(&bare)).await.unwrap();
    seen.note(
        "fields no longer applied",
        json!({"data": dropped.data, "managers": managers(&dropped)}),
    );
    let ops = |rv: &str, value: &str| -> json_patch::Patch {
        serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "replace", "path": "/data/c", "value": value}]))
        .unwrap()
    };
    let patched = cms
        .patch(
            "c",
            &by("editor"),
            &Patch::Json::<()>(ops(&rv(&dropped), "4")),
        )
        .await
        .unwrap();
    seen.note(
        "json patch",
        json!({"bumped": rv(&patched) != rv(&dropped), "data": patched.data}),
    );
    let failed = cms
        .patch(
            "c",
            &by("editor"),
            &Patch::Json::<()>(ops(&rv(&dropped), "5")),
        )
        .await;
    seen.note("json patch whose test fails", code(&failed));
    let stale = cms.replace("c", &PostParams::default(), &dropped).await;
    seen.note("replace at a stale resourceVersion", outcome(&stale));
    seen.note(
        "get of a missing object",
        outcome(&cms.get("missing").await),
    );
    let exists = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(cm("c", json!({}))).unwrap(),
        )
        .await;
    seen.note("create of an existing object", outcome(&exists));

    let hold = json!({"metadata": {"finalizers": ["example.com/hold"]}});
    cms.patch("c", &by("editor"), &Patch::Merge(&hold))
        .await
        .unwrap();
    let deleted = cms.delete("c", &DeleteParams::default()).await.unwrap();
    let held = cms.get("c").await.unwrap();
    seen.note(
        "delete with a finalizer",
        json!({"answer": deleted.is_left(), "deleting": held.metadata.deletion_timestamp.is_some(),
               "grace": held.metadata.deletion_grace_period_seconds, "generation": held.metadata.generation}),
    );
    let more = json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}});
    let added = cms.patch("c", &by("editor"), &Patch::Merge(&more)).await;
    seen.note("finalizer added while deleting", outcome(&added));
    let released = cms
        .patch(
            "c",
            &by("editor"),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
    seen.note(
        "last finalizer removed",
        json!([code(&released), code(&cms.get("c").await)]),
    );

    cms.create(
        &PostParams::default(),
        &serde_json::from_value(cm("plain", json!({}))).unwrap(),
    )
    .await
    .unwrap();
    let gone = cms.delete("plain", &DeleteParams::default()).await.unwrap();
    let answer = match gone.clone().right() {
        Some(status) => {
            json!({"status": status.status, "details": status.details.map(|d| (d.name, d.kind, d.group))})
        }
        None => json!({"object": gone.left().map(|o| o.name_any())}),
    };
    seen.note("delete without finalizers", answer);
}

/// Generation, the status subresource and deletion on capi-lb's LoadBalancer (a custom resource
/// with a status subresource).
async fn loadbalancer(client: &Client, ns: &str, seen: &mut Seen) {
    let lbs: Api<LoadBalancer> = Api::namespaced(client.clone(), ns);
    let one = PatchParams::apply("one");
    let applied = load_balancer("lb", "lb", json!({}));
    let created = lbs
        .patch("lb", &one, &Patch::Apply(&applied))
        .await
        .unwrap();
    seen.note(
        "apply creates",
        json!({"generation": created.metadata.generation, "managers": managers(&created)}),
    );
    let again = lbs
        .patch("lb", &one, &Patch::Apply(&applied))
        .await
        .unwrap();
    seen.note(
        "identical apply keeps the resourceVersion",
        json!(rv(&again) == rv(&created)),
    );
    let labelled = lbs
        .patch(
            "lb",
            &by("editor"),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    seen.note(
        "a label bumps the resourceVersion, not the generation",
        json!([rv(&labelled) != rv(&created), labelled.metadata.generation]),
    );
    let spec = lbs
        .patch(
            "lb",
            &by("editor"),
            &Patch::Merge(json!({"spec": {"drainSeconds": 7}})),
        )
        .await
        .unwrap();
    seen.note(
        "a spec change bumps the generation",
        json!(spec.metadata.generation),
    );
    // The status's other fields at their CRD defaults, which only the real apiserver fills in.
    let status = json!({"spec": {"drainSeconds": 99}, "status": {
        "activeTargets": [], "addresses": [], "ready": false, "targets": [],
        "conditions": [{"type": "Ready", "status": "False", "reason": "Waiting", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    let written = lbs
        .patch_status("lb", &by("editor"), &Patch::Merge(&status))
        .await
        .unwrap();
    seen.note("a status write changes only the status", json!({"drain": written.spec.drain_seconds,
        "conditions": written.status.as_ref().map(|s| s.conditions.len()), "generation": written.metadata.generation,
        "bumped": rv(&written) != rv(&spec)}));
    let ignored = lbs
        .patch(
            "lb",
            &by("editor"),
            &Patch::Merge(json!({"status": {"conditions": []}})),
        )
        .await
        .unwrap();
    seen.note(
        "a status in a write to the object is ignored",
        json!([
            ignored.status.as_ref().map(|s| s.conditions.len()),
            rv(&ignored) == rv(&written)
        ]),
    );
    let ctl = PatchParams::apply("ctl");
    let conditions = json!({"apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
        "metadata": {"name": "lb"}, "status": {"conditions": [{"type": "Ready", "status": "True",
        "reason": "Ready", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    let refused = lbs
        .patch_status("lb", &ctl, &Patch::Apply(&conditions))
        .await;
    seen.note(
        "status apply over another manager's status",
        outcome(&refused),
    );
    let status_applied = lbs
        .patch_status("lb", &ctl.clone().force(), &Patch::Apply(&conditions))
        .await
        .unwrap();
    seen.note("status apply", json!({"managers": managers(&status_applied), "generation": status_applied.metadata.generation}));
    let hold = json!({"metadata": {"finalizers": ["example.com/hold"]}});
    lbs.patch("lb", &by("editor"), &Patch::Merge(&hold))
        .await
        .unwrap();
    let deleted = lbs.delete("lb", &DeleteParams::default()).await.unwrap();
    let held = lbs.get("lb").await.unwrap();
    seen.note("delete with a finalizer", json!({"answer": deleted.is_left(),
        "deleting": held.metadata.deletion_timestamp.is_some(),
        "grace": held.metadata.deletion_grace_period_seconds, "generation": held.metadata.generation}));
    lbs.patch(
        "lb",
        &by("editor"),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    seen.note("last finalizer removed", code(&lbs.get("lb").await));
}

/// A watch with a label selector through a short sequence: created, changed, changed to the same,
/// out of the selector, back in, deleted.
async fn watch(client: &Client, ns: &str, seen: &mut Seen) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let list = cms
        .list(&ListParams::default().labels("w=1"))
        .await
        .unwrap();
    let from = list.metadata.resource_version.unwrap_or_default();
    let mut events = cms
        .watch(&WatchParams::default().labels("w=1").timeout(30), &from)
        .await
        .unwrap()
        .boxed();
    let mut w = cm("w", json!({"k": "1"}));
    w["metadata"]["labels"] = json!({"w": "1"});
    cms.create(&PostParams::default(), &serde_json::from_value(w).unwrap())
        .await
        .unwrap();
    for patch in [
        json!({"data": {"k": "2"}}),
        json!({"data": {"k": "2"}}),
        json!({"metadata": {"labels": {"w": "0"}}}),
        json!({"metadata": {"labels": {"w": "1"}}}),
    ] {
        cms.patch("w", &by("editor"), &Patch::Merge(patch))
            .await
            .unwrap();
    }
    cms.delete("w", &DeleteParams::default()).await.unwrap();
    let mut got = Vec::new();
    while got.len() < 5 {
        let next = tokio::time::timeout(Duration::from_secs(10), events.next()).await;
        let event = match next {
            Ok(Some(Ok(event))) => event,
            other => {
                got.push(json!(format!("no event: {other:?}")));
                break;
            }
        };
        got.push(match event {
            WatchEvent::Added(c) => json!(["ADDED", c.data.unwrap_or_default().get("k")]),
            WatchEvent::Modified(c) => json!(["MODIFIED", c.data.unwrap_or_default().get("k")]),
            WatchEvent::Deleted(c) => json!(["DELETED", c.data.unwrap_or_default().get("k")]),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => json!(["ERROR", e.code, e.reason]),
        });
    }
    seen.note("watch events", Value::Array(got));
}

/// Lists with label and field selectors, and in pages.
async fn lists(client: &Client, ns: &str, seen: &mut Seen) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for (name, tier) in [("l0", "a"), ("l1", "b"), ("l2", "a"), ("l3", "c")] {
        let mut object = cm(name, json!({}));
        object["metadata"]["labels"] = json!({"tier": tier});
        if name != "l3" {
            object["metadata"]["labels"]["list"] = json!("yes");
        }
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(object).unwrap(),
        )
        .await
        .unwrap();
    }
    let names = |list: kube::core::ObjectList<ConfigMap>| {
        let more = list.metadata.continue_.is_some();
        let names: Vec<String> = list.items.iter().map(|c| c.name_any()).collect();
        (names, more)
    };
    for selector in [
        "list=yes,tier in (a,c)",
        "list,tier!=a",
        "tier,tier notin (a)",
        "tier,!list",
    ] {
        let listed = cms
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap();
        seen.note(&format!("list {selector}"), json!(names(listed)));
    }
    let by_name = cms
        .list(&ListParams::default().fields("metadata.name=l1"))
        .await
        .unwrap();
    seen.note("list metadata.name=l1", json!(names(by_name)));
    let first = cms
        .list(&ListParams::default().labels("tier").limit(3))
        .await
        .unwrap();
    let token = first.metadata.continue_.clone().unwrap_or_default();
    seen.note("first page", json!(names(first)));
    let rest = cms
        .list(
            &ListParams::default()
                .labels("tier")
                .limit(3)
                .continue_token(&token),
        )
        .await
        .unwrap();
    seen.note("second page", json!(names(rest)));
}

async fn scenario(client: Client, ns: &str) -> Seen {
    let mut seen = Seen::default();
    configmap(&client, ns, &mut seen).await;
    loadbalancer(&client, ns, &mut seen).await;
    lists(&client, ns, &mut seen).await;
    watch(&client, ns, &mut seen).await;
    seen
}

#[tokio::test]
async fn the_in_memory_api_answers_as_the_apiserver_does() {
    let t = TestNs::new("e2e-inmemory").await;
    let real = scenario(t.client.clone(), &t.ns).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": t.ns}});
    let memory = InMemoryApiBuilder::new(clock)
        .with_objects(vec![namespace])
        .build()
        .await
        .unwrap();
    let simulated = scenario(memory.client.clone(), &t.ns).await;

    let mut differences = Vec::new();
    for ((step, r), (_, m)) in real.0.iter().zip(&simulated.0) {
        if r != m {
            differences.push(format!(
                "{step}:\n  kube-apiserver: {r}\n  in-memory:      {m}"
            ));
        }
    }
    assert_eq!(real.0.len(), simulated.0.len(), "{real:?}\n{simulated:?}");
    assert!(
        differences.is_empty(),
        "the in-memory API differs:\n{}",
        differences.join("\n")
    );
    t.finish().await;
}
