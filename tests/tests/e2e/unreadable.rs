//! A LoadBalancer this version of capi-lb cannot read, on a real apiserver: it must not stop the
//! LoadBalancer watch (neither a live watch event nor the initial list of a restarted controller),
//! it gets a Warning Event, nothing is done for it until it changes, and once it is readable again it
//! is reconciled as before.
//!
//! The object is made the way it happens in practice: the CRD is newer than the controller (here:
//! the LoadBalancer CRD with one more protocol), e.g. after capi-lb was rolled back but its CRDs were
//! not. Changing the CRD affects the whole apiserver, so this test is alone in its test binary (cargo
//! runs test binaries one after another) and restores the CRD before it ends (every other test
//! re-applies the CRDs when it starts, too).

use std::time::Duration;

use capi_lb_api::LoadBalancer;
use capi_lb_tests::k8s::{
    TestNs, apply_crd, dynamic_api, eventually, in_memory, install_crds, load_balancer, wait_for,
    wait_ready,
};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;

/// The LoadBalancer CRD as a newer capi-lb might ship it: ports may also be `QUIC`.
fn newer_crd() -> CustomResourceDefinition {
    let crd = capi_lb_api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == "LoadBalancer")
        .unwrap();
    let mut value = serde_json::to_value(&crd).unwrap();
    for version in value["spec"]["versions"].as_array_mut().unwrap() {
        let protocol = &mut version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["ports"]["items"]["properties"]["protocol"];
        assert_eq!(protocol["enum"], json!(["TCP", "UDP"]), "the CRD changed");
        protocol["enum"] = json!(["TCP", "UDP", "QUIC"]);
    }
    serde_json::from_value(value).unwrap()
}

async fn set_protocol(client: &Client, ns: &str, name: &str, protocol: &str) {
    let doc = load_balancer(name, name, json!({}));
    let api = dynamic_api(client, Some(ns), &doc).await.unwrap();
    let patch = json!({"spec": {"ports": [{"name": "api", "port": 6443, "protocol": protocol}]}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("setting protocol {protocol} on {name}: {e}"));
}

/// The `Unreadable` Events about `name`, as (count, note).
async fn unreadable_events(t: &TestNs, name: &str) -> Vec<(i32, String)> {
    t.api::<Event>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("Unreadable")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .map(|e| {
            let count = e.series.as_ref().map_or(1, |s| s.count);
            (count, e.note.unwrap_or_default())
        })
        .collect()
}

#[tokio::test]
async fn a_load_balancer_this_version_cannot_read_stops_nothing_and_waits_for_a_change() {
    let mut t = TestNs::new("e2e-unreadable").await;
    apply_crd(&t.client, &newer_crd()).await;
    let first = t.spawn(t.options(&["inmemory"]));
    for name in ["newer", "other"] {
        t.create(in_memory(name, json!({"addressPools": ["203.0.113.0/24"]})))
            .await;
    }
    t.create(load_balancer("newer", "newer", json!({}))).await;
    let ready = wait_ready(&t, "newer").await;
    let endpoint = ready.status.as_ref().unwrap().endpoint.clone();

    // A live watch event this version cannot read: a Warning Event, nothing else.
    set_protocol(&t.client, &t.ns, "newer", "QUIC").await;
    let events = eventually("an Unreadable Event", || async {
        let events = unreadable_events(&t, "newer").await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert!(events[0].1.contains("Unknown variant QUIC"), "{events:?}");

    // A controller started now meets it in its initial list, and goes on with the others.
    first.stop().await;
    t.start(t.options(&["inmemory"]));
    t.create(load_balancer("other", "other", json!({}))).await;
    wait_ready(&t, "other").await;

    // Nothing retries it on a timer: once the watches' initial lists have each triggered it (a
    // restart reconciles everything), the Events stop, and its status and cloud load balancer are
    // as they were. A retry with back-off (1 s, 2 s, 4 s, ...) would repeat them at least three
    // times within ten seconds; one more is allowed, because a watch the apiserver expires ("too
    // old resource version", seen on a busy harness) is listed again, which triggers it once.
    let total = async || -> i32 {
        let events = unreadable_events(&t, "newer").await;
        events.iter().map(|(count, _)| count).sum()
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let settled = total().await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let later = total().await;
    assert!(
        later - settled <= 1,
        "{} more within 10 s: {:?}",
        later - settled,
        unreadable_events(&t, "newer").await
    );
    let doc = load_balancer("newer", "newer", json!({}));
    let raw = dynamic_api(&t.client, Some(&t.ns), &doc)
        .await
        .unwrap()
        .get("newer")
        .await
        .unwrap();
    assert_eq!(raw.data["status"]["ready"], json!(true));

    // Readable again: reconciled at once, with the same endpoint.
    set_protocol(&t.client, &t.ns, "newer", "TCP").await;
    let again = wait_for(
        &t.api::<LoadBalancer>(),
        "newer",
        "reconciled with the new spec",
        |lb| {
            lb.and_then(|lb| lb.status.as_ref()).is_some_and(|s| {
                s.ready && s.observed_generation == lb.and_then(|lb| lb.metadata.generation)
            })
        },
    )
    .await
    .unwrap();
    assert_eq!(again.status.unwrap().endpoint, endpoint);

    install_crds(&t.client).await;
    t.finish().await;
}
