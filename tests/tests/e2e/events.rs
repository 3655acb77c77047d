//! capi-lb's Events on a real apiserver (`tests/k8s/harness.sh`), published with capi-lb's
//! ServiceAccount: a new Event per object, reason and note; a repeat within the window counts in the
//! first one's `series` (one PATCH, not another Event); a repeat whose Event is gone is published
//! again; and the fields `kubectl describe` and `kubectl events` show are set.

use std::sync::Arc;

use capi_lb::events::EventSink;
use capi_lb_api::LoadBalancer;
use capi_lb_providers::clock::SystemClock;
use capi_lb_tests::k8s::{TestNs, load_balancer};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

/// The Events with `reason`, sorted by note.
async fn events(t: &TestNs, reason: &str) -> Vec<Event> {
    let mut events: Vec<Event> = t
        .api::<Event>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect();
    events.sort_by(|a, b| a.note.cmp(&b.note));
    events
}

/// A `MembersChanged` Event about `reference` with `note`.
async fn members_changed(sink: &EventSink, reference: &ObjectReference, note: &str) {
    sink.publish(reference, false, "MembersChanged", "Reconcile", note.into())
        .await;
}

fn summary(events: &[Event]) -> Vec<(String, i32)> {
    events
        .iter()
        .map(|e| {
            (
                e.note.clone().unwrap_or_default(),
                e.series.as_ref().map_or(1, |s| s.count),
            )
        })
        .collect()
}

#[tokio::test]
async fn repeats_count_in_a_series_and_other_notes_are_new_events() {
    let t = TestNs::new("e2e-events").await;
    t.create(load_balancer("lb", "lb", json!({}))).await;
    let lb = t.api::<LoadBalancer>().get("lb").await.unwrap();
    let reference = lb.object_ref(&());
    let sink = EventSink::new(
        t.controller_client(),
        Some("capi-lb-0".into()),
        Arc::new(SystemClock),
    );

    for note in ["added m0", "added m0", "removed m0", "added m0"] {
        members_changed(&sink, &reference, note).await;
    }
    sink.publish(
        &reference,
        true,
        "ProviderError",
        "Reconcile",
        "quota".into(),
    )
    .await;

    let members = events(&t, "MembersChanged").await;
    assert_eq!(
        summary(&members),
        [("added m0".to_string(), 3), ("removed m0".to_string(), 1)]
    );
    let repeated = &members[0];
    let series = repeated.series.as_ref().unwrap();
    assert!(series.last_observed_time.0 >= repeated.event_time.as_ref().unwrap().0);
    assert_eq!(repeated.type_.as_deref(), Some("Normal"));
    assert_eq!(repeated.action.as_deref(), Some("Reconcile"));
    assert_eq!(repeated.reporting_controller.as_deref(), Some("capi-lb"));
    assert_eq!(repeated.reporting_instance.as_deref(), Some("capi-lb-0"));
    let regarding = repeated.regarding.as_ref().unwrap();
    assert_eq!(regarding.kind.as_deref(), Some("LoadBalancer"));
    assert_eq!(regarding.name.as_deref(), Some("lb"));
    assert_eq!(regarding.uid, lb.metadata.uid);
    assert!(
        repeated.name_any().starts_with("lb."),
        "{}",
        repeated.name_any()
    );
    let warnings = events(&t, "ProviderError").await;
    assert_eq!(summary(&warnings), [("quota".to_string(), 1)]);
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));

    // The repeated Event is gone (the apiserver's event TTL, someone deleting it): the next repeat
    // is a new Event, and the one after counts in its series.
    t.api::<Event>()
        .delete(&repeated.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    for _ in 0..2 {
        members_changed(&sink, &reference, "added m0").await;
    }
    let members = events(&t, "MembersChanged").await;
    assert_eq!(
        summary(&members),
        [("added m0".to_string(), 2), ("removed m0".to_string(), 1)]
    );
    assert_ne!(members[0].name_any(), repeated.name_any());

    t.finish().await;
}
