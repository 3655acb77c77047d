//! The in-memory API's behaviours through a `kube::Client`, as callers see them: kinds served,
//! resourceVersions, status isolation, server-side apply, deletion, lists, watches, refusals and
//! the request counts.

use std::time::Duration;

use capi_lb_api::LoadBalancer;
use capi_lb_providers::clock::ManualClock;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::DynamicObject;
use kube::runtime::watcher;

use super::*;

fn clock() -> SharedClock {
    Arc::new(ManualClock::new("2026-01-01T00:00:00Z".parse().unwrap()))
}

async fn api(objects: Vec<Value>) -> InMemoryApi {
    InMemoryApiBuilder::new(clock())
        .with_objects(objects)
        .build()
        .await
        .unwrap()
}

fn configmaps(api: &InMemoryApi) -> Api<ConfigMap> {
    Api::namespaced(api.client.clone(), "default")
}

fn lbs(api: &InMemoryApi) -> Api<LoadBalancer> {
    Api::namespaced(api.client.clone(), "default")
}

fn lb(name: &str) -> Value {
    json!({"apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                          "kind": "InMemoryLoadBalancer", "name": name}}})
}

fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

fn rv<K: kube::Resource>(object: &K) -> String {
    object.meta().resource_version.clone().unwrap_or_default()
}

fn api_error(result: Result<impl std::fmt::Debug, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Every provider of the catalog has its infrastructure kind served by the in-memory API.
#[tokio::test]
async fn every_catalog_kind_is_served() {
    let api = api(Vec::new()).await;
    for entry in capi_lb_providers::catalog::CATALOG {
        let ar = (entry.infrastructure)();
        let objects: Api<DynamicObject> = Api::namespaced_with(api.client.clone(), "default", &ar);
        let object = DynamicObject::new("x", &ar).data(json!({"spec": {}}));
        objects
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", entry.name));
        assert_eq!(
            objects.list(&Default::default()).await.unwrap().items.len(),
            1
        );
    }
}

#[tokio::test]
async fn initial_objects_are_served_by_their_resource_namespaces_among_them() {
    let api = api(vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "labels": {"a": "b"}}}),
        cm("c", json!({"k": "v"})),
        lb("lb"),
    ])
    .await;
    let ns = Api::<Namespace>::all(api.client.clone())
        .get("team")
        .await
        .unwrap();
    assert_eq!(ns.metadata.labels.unwrap()["a"], "b");
    assert!(ns.metadata.namespace.is_none());
    let c = configmaps(&api).get("c").await.unwrap();
    assert_eq!(c.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(
        c.metadata.creation_timestamp.unwrap().0.to_string(),
        "2026-01-01T00:00:00Z"
    );
    let lb = lbs(&api).get("lb").await.unwrap();
    assert_eq!(lb.metadata.generation, Some(1));
    assert_ne!(lb.metadata.uid, c.metadata.uid);
    let missing = api_error(Api::<Namespace>::all(api.client.clone()).get("other").await);
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(missing.message, "namespaces \"other\" not found");
}

#[tokio::test]
async fn identical_writes_keep_the_resource_version_and_generation_counts_the_spec() {
    let api = api(vec![lb("lb")]).await;
    let lbs = lbs(&api);
    let params = PatchParams::apply("test");
    let first = lbs
        .patch("lb", &params, &Patch::Apply(lb("lb")))
        .await
        .unwrap();
    let again = lbs
        .patch("lb", &params, &Patch::Apply(lb("lb")))
        .await
        .unwrap();
    assert_eq!(rv(&again), rv(&first));
    let merged = lbs
        .patch(
            "lb",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"infrastructureRef": {"name": "lb"}}})),
        )
        .await
        .unwrap();
    assert_eq!(rv(&merged), rv(&first));
    let labelled = lbs
        .patch(
            "lb",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_ne!(rv(&labelled), rv(&first));
    assert_eq!(labelled.metadata.generation, Some(1));
    let changed = lbs
        .patch(
            "lb",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"drainSeconds": 7}})),
        )
        .await
        .unwrap();
    assert_eq!(changed.metadata.generation, Some(2));
    // A stale replace is refused.
    let mut stale = labelled.clone();
    stale.metadata.labels = None;
    let refused = api_error(lbs.replace("lb", &PostParams::default(), &stale).await);
    assert_eq!((refused.code, refused.reason.as_str()), (409, "Conflict"));
}

#[tokio::test]
async fn the_status_subresource_is_isolated() {
    let api = api(vec![lb("lb")]).await;
    let lbs = lbs(&api);
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "R",
        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}, "spec": {"drainSeconds": 9}});
    let written = lbs
        .patch_status("lb", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    assert_eq!(
        written.spec.drain_seconds,
        lbs.get("lb").await.unwrap().spec.drain_seconds
    );
    assert_ne!(written.spec.drain_seconds, 9);
    assert_eq!(written.status.as_ref().unwrap().conditions.len(), 1);
    assert_eq!(written.metadata.generation, Some(1));
    let main = lbs
        .patch(
            "lb",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": []}})),
        )
        .await
        .unwrap();
    assert_eq!(main.status.as_ref().unwrap().conditions.len(), 1);
    assert_eq!(rv(&main), rv(&written));
}

#[tokio::test]
async fn server_side_apply_conflicts_forces_and_removes() {
    let api = api(Vec::new()).await;
    let cms = configmaps(&api);
    let one = PatchParams::apply("one");
    let two = PatchParams::apply("two");
    cms.patch(
        "c",
        &one,
        &Patch::Apply(cm("c", json!({"a": "1", "b": "2"}))),
    )
    .await
    .unwrap();
    let conflict = api_error(
        cms.patch("c", &two, &Patch::Apply(cm("c", json!({"a": "9"}))))
            .await,
    );
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        conflict.message,
        "Apply failed with 1 conflict: conflict with \"one\": .data.a"
    );
    let forced = cms
        .patch(
            "c",
            &two.clone().force(),
            &Patch::Apply(cm("c", json!({"a": "9"}))),
        )
        .await
        .unwrap();
    let managers: Vec<String> = forced
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, ["one", "two"]);
    let removed = cms
        .patch("c", &one, &Patch::Apply(cm("c", json!({}))))
        .await
        .unwrap();
    assert_eq!(
        removed.data.unwrap().into_iter().collect::<Vec<_>>(),
        [("a".to_string(), "9".to_string())]
    );
    // An update takes the fields it changes.
    let updated = cms
        .patch(
            "c",
            &PatchParams {
                field_manager: Some("editor".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"data": {"a": "10"}})),
        )
        .await
        .unwrap();
    let entries = updated.metadata.managed_fields.unwrap();
    assert!(entries.iter().any(
        |e| e.manager.as_deref() == Some("editor") && e.operation.as_deref() == Some("Update")
    ));
}

#[tokio::test]
async fn strategic_merge_patches_are_taken_for_core_kinds_only() {
    let api = api(vec![cm("c", json!({"a": "1", "b": "2"})), lb("lb")]).await;
    let patched = configmaps(&api)
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Strategic(json!({"data": {"a": null, "c": "3"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.data.unwrap().into_keys().collect::<Vec<_>>(),
        ["b", "c"]
    );
    let refused = api_error(
        lbs(&api)
            .patch(
                "lb",
                &PatchParams::default(),
                &Patch::Strategic(json!({"spec": {}})),
            )
            .await,
    );
    assert_eq!(refused.code, 415);
}

#[tokio::test]
async fn finalizers_hold_a_deletion_until_they_are_gone() {
    let mut object = lb("lb");
    object["metadata"]["finalizers"] = json!(["x"]);
    let api = api(vec![object]).await;
    let lbs = lbs(&api);
    lbs.delete("lb", &DeleteParams::default()).await.unwrap();
    let deleting = lbs.get("lb").await.unwrap();
    assert_eq!(
        deleting.metadata.deletion_timestamp.unwrap().0.to_string(),
        "2026-01-01T00:00:00Z"
    );
    assert_eq!(deleting.metadata.generation, Some(2));
    let added = api_error(
        lbs.patch(
            "lb",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["x", "y"]}})),
        )
        .await,
    );
    assert_eq!((added.code, added.reason.as_str()), (422, "Invalid"));
    lbs.patch(
        "lb",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(api_error(lbs.get("lb").await).code, 404);
}

#[tokio::test]
async fn lists_select_and_page() {
    let mut objects = Vec::new();
    for i in 0..5 {
        let mut c = cm(&format!("c{i}"), json!({}));
        c["metadata"]["labels"] = json!({"n": i.to_string(), "even": (i % 2 == 0).to_string()});
        objects.push(c);
    }
    let mut other = cm("elsewhere", json!({}));
    other["metadata"]["namespace"] = json!("other");
    objects.push(other);
    let api = api(objects).await;
    let cms = configmaps(&api);
    let names = |list: kube::core::ObjectList<ConfigMap>| {
        list.items
            .into_iter()
            .map(|c| c.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("even=true,n notin (4)"))
                .await
                .unwrap()
        ),
        ["c0", "c2"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().fields("metadata.name=c3"))
                .await
                .unwrap()
        ),
        ["c3"]
    );
    let first = cms.list(&ListParams::default().limit(2)).await.unwrap();
    let token = first.metadata.continue_.clone().unwrap();
    assert_eq!(names(first), ["c0", "c1"]);
    let rest = cms
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap();
    assert!(rest.metadata.continue_.is_none());
    assert_eq!(names(rest), ["c2", "c3", "c4"]);
    let all = Api::<ConfigMap>::all(api.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(all.items.len(), 6);
    let metadata = cms
        .list_metadata(&ListParams::default().limit(1))
        .await
        .unwrap();
    assert_eq!(metadata.items[0].metadata.name.as_deref(), Some("c0"));
}

#[tokio::test]
async fn kube_runtime_watchers_see_changes_as_they_happen() {
    let api = api(vec![cm("before", json!({}))]).await;
    let cms = configmaps(&api);
    let events = watcher(cms.clone(), watcher::Config::default().labels("w=1"));
    let mut events = Box::pin(events);
    let mut seen = Vec::new();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(5), events.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
    };
    assert!(matches!(next().await, watcher::Event::Init));
    assert!(matches!(next().await, watcher::Event::InitDone));
    let mut w = cm("w", json!({"k": "1"}));
    w["metadata"]["labels"] = json!({"w": "1"});
    cms.create(&PostParams::default(), &serde_json::from_value(w).unwrap())
        .await
        .unwrap();
    cms.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    cms.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    cms.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"w": "0"}}})),
    )
    .await
    .unwrap();
    cms.patch(
        "before",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "y"}})),
    )
    .await
    .unwrap();
    for _ in 0..3 {
        seen.push(match next().await {
            watcher::Event::Apply(c) => format!("apply {}", c.data.unwrap()["k"]),
            watcher::Event::Delete(c) => format!("delete {}", c.metadata.name.unwrap()),
            other => format!("{other:?}"),
        });
    }
    assert_eq!(seen, ["apply 1", "apply 2", "delete w"]);
}

#[tokio::test]
async fn streaming_lists_end_their_initial_events_with_a_bookmark() {
    let api = api(vec![cm("a", json!({})), cm("b", json!({}))]).await;
    let initial = watcher(
        configmaps(&api),
        watcher::Config::default().streaming_lists(),
    )
    .try_take_while(|e| std::future::ready(Ok(!matches!(e, watcher::Event::InitDone))))
    .try_filter_map(|e| async move {
        Ok(match e {
            watcher::Event::InitApply(c) => c.metadata.name,
            _ => None,
        })
    })
    .try_collect::<Vec<String>>();
    let seen = tokio::time::timeout(Duration::from_secs(5), initial)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen, ["a", "b"]);
}

#[tokio::test]
async fn watches_from_a_resource_version_no_longer_kept_expire() {
    let api = api(Vec::new()).await;
    let cms = configmaps(&api);
    let first = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(cm("c", json!({}))).unwrap(),
        )
        .await
        .unwrap();
    for i in 0..=store::HISTORY {
        cms.patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"i": i.to_string()}})),
        )
        .await
        .unwrap();
    }
    let mut stream = cms
        .watch(&WatchParams::default().timeout(1), &rv(&first))
        .await
        .unwrap()
        .boxed();
    match stream.next().await {
        Some(Ok(WatchEvent::Error(status))) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"))
        }
        other => panic!("expected 410 Expired, got {other:?}"),
    }
}

#[tokio::test]
async fn refusals_are_shaped_like_the_apiservers() {
    let api = api(vec![cm("c", json!({}))]).await;
    let cms = configmaps(&api);
    let exists = api_error(
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(cm("c", json!({}))).unwrap(),
        )
        .await,
    );
    assert_eq!(
        (exists.code, exists.reason.as_str()),
        (409, "AlreadyExists")
    );
    assert_eq!(exists.message, "configmaps \"c\" already exists");
    let missing = api_error(lbs(&api).get("none").await);
    assert_eq!(
        missing.message,
        "loadbalancers.loadbalancer.cluster.x-k8s.io \"none\" not found"
    );
    let no_status = api_error(
        cms.patch_status("c", &PatchParams::default(), &Patch::Merge(json!({})))
            .await,
    );
    assert_eq!(no_status.code, 404);
    // A custom resource whose kind is not registered is not served, as without its CRD.
    let ar = kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "x.io", "v1", "Thing",
    ));
    let things: Api<DynamicObject> = Api::namespaced_with(api.client.clone(), "default", &ar);
    let missing_crd = api_error(things.list(&ListParams::default()).await);
    assert_eq!(
        (missing_crd.code, missing_crd.reason.as_str()),
        (404, "NotFound")
    );
}

#[tokio::test]
async fn requests_are_counted_and_applies_that_create_recorded() {
    let api = api(vec![lb("lb")]).await;
    let cms = configmaps(&api);
    api.stats.set_recording(true);
    cms.patch(
        "c",
        &PatchParams::apply("t"),
        &Patch::Apply(cm("c", json!({}))),
    )
    .await
    .unwrap();
    cms.patch(
        "c",
        &PatchParams::apply("t"),
        &Patch::Apply(cm("c", json!({}))),
    )
    .await
    .unwrap();
    let _ = cms.get("c").await.unwrap();
    api.stats.set_recording(false);
    let _ = cms.list(&ListParams::default()).await.unwrap();
    let created: Vec<bool> = api
        .stats
        .requests()
        .iter()
        .map(|r| r.creates_by_apply)
        .collect();
    assert_eq!(created, [true, false, false]);
    assert_eq!((api.stats.reads(), api.stats.writes()), (2, 2));
    assert_eq!(
        api.stats.log(),
        ["PATCH /api/v1/namespaces/default/configmaps/c"; 2]
    );
}

/// The store alone: revisions, generations, status, deletion, the history.
mod store_alone {
    use super::super::kinds::Kinds;
    use super::super::store::*;
    use super::*;
    use capi_lb_providers::clock::ManualClock;
    use jiff::Timestamp;
    use serde_json::json;

    fn store() -> Store {
        let clock: SharedClock = Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH));
        Store::new(clock, Kinds::builtin())
    }

    fn key(resource: &str, name: &str) -> Key {
        Key {
            group: "x.io".into(),
            resource: resource.into(),
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn rv(object: &Value) -> &str {
        object["metadata"]["resourceVersion"].as_str().unwrap()
    }

    #[test]
    fn writes_bump_the_revision_and_the_generation_only_when_they_change_something() {
        let mut store = store();
        let k = key("things", "a");
        let created = store
            .create(&k, json!({"metadata": {}, "spec": {"x": 1}}))
            .unwrap();
        assert_eq!(
            (rv(&created), created["metadata"]["generation"].as_i64()),
            ("1", Some(1))
        );
        let same = store.update(&k, (*created).clone(), false).unwrap();
        assert_eq!(rv(&same), "1");
        let mut labelled = (*created).clone();
        labelled["metadata"]["labels"] = json!({"a": "b"});
        let labelled = store.update(&k, labelled, false).unwrap();
        assert_eq!(
            (rv(&labelled), labelled["metadata"]["generation"].as_i64()),
            ("2", Some(1))
        );
        let mut changed = (*labelled).clone();
        changed["spec"]["x"] = json!(2);
        changed["status"] = json!({"ignored": true});
        let changed = store.update(&k, changed, false).unwrap();
        assert_eq!(
            (rv(&changed), changed["metadata"]["generation"].as_i64()),
            ("3", Some(2))
        );
        assert_eq!(changed.get("status"), None);
        let mut stale = (*changed).clone();
        stale["metadata"]["resourceVersion"] = json!("2");
        assert_eq!(store.update(&k, stale, false).unwrap_err().code, 409);
        assert_eq!(store.changes_since(1).unwrap().len(), 2);
    }

    #[test]
    fn status_writes_change_only_the_status() {
        let mut store = store();
        let k = key("things", "a");
        let created = store
            .create(&k, json!({"metadata": {}, "spec": {"x": 1}}))
            .unwrap();
        let mut write = (*created).clone();
        write["spec"]["x"] = json!(5);
        write["status"] = json!({"ok": true});
        let written = store.update(&k, write, true).unwrap();
        assert_eq!(written["spec"]["x"], 1);
        assert_eq!(written["status"], json!({"ok": true}));
        assert_eq!(written["metadata"]["generation"], 1);
    }

    #[test]
    fn finalizers_hold_a_deletion_and_dependents_follow_their_owner() {
        let mut store = store();
        let owner = store
            .create(
                &key("things", "owner"),
                json!({"metadata": {"finalizers": ["f"]}}),
            )
            .unwrap();
        let uid = owner["metadata"]["uid"].as_str().unwrap().to_string();
        let reference =
            json!([{"apiVersion": "x.io/v1", "kind": "Thing", "name": "owner", "uid": uid}]);
        store
            .create(
                &key("parts", "dep"),
                json!({"metadata": {"ownerReferences": reference}}),
            )
            .unwrap();
        let (marked, gone) = store
            .delete(&key("things", "owner"), &Preconditions::default(), true)
            .unwrap();
        assert!(!gone);
        assert_eq!(
            marked["metadata"]["deletionTimestamp"],
            "1970-01-01T00:00:00Z"
        );
        assert_eq!(marked["metadata"]["generation"], 2);
        let mut more = (*marked).clone();
        more["metadata"]["finalizers"] = json!(["f", "g"]);
        assert_eq!(
            store
                .update(&key("things", "owner"), more, false)
                .unwrap_err()
                .code,
            422
        );
        let mut done = (*marked).clone();
        done["metadata"]["finalizers"] = json!([]);
        store.update(&key("things", "owner"), done, false).unwrap();
        assert!(store.get(&key("things", "owner")).is_none());
        assert!(store.get(&key("parts", "dep")).is_none());
        let kinds: Vec<ChangeType> = store
            .changes_since(0)
            .unwrap()
            .iter()
            .map(|c| c.kind)
            .collect();
        use ChangeType::*;
        assert_eq!(kinds, [Added, Added, Modified, Deleted, Deleted]);
    }

    #[test]
    fn delete_preconditions_are_checked() {
        let mut store = store();
        store
            .create(&key("things", "a"), json!({"metadata": {}}))
            .unwrap();
        let wrong = Preconditions {
            uid: Some("other".into()),
            resource_version: None,
        };
        let refused = store.delete(&key("things", "a"), &wrong, true).unwrap_err();
        assert_eq!(refused.code, 409);
        assert!(
            refused
                .message
                .contains("Precondition failed: UID in precondition: other")
        );
    }

    #[test]
    fn the_history_is_bounded() {
        let mut store = store();
        for i in 0..HISTORY + 5 {
            store
                .create(&key("things", &format!("t{i}")), json!({"metadata": {}}))
                .unwrap();
        }
        assert_eq!(store.changes_since(0).err(), Some(5));
        assert_eq!(store.changes_since(5).unwrap().len(), HISTORY);
        assert_eq!(
            store.objects("x.io", "things", Some("ns"), None).count(),
            HISTORY + 5
        );
    }
}
