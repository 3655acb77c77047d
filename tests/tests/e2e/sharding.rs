//! Sharding capi-lb across replicas when one process is not enough (docs/operations.md, "More
//! than one controller"): each replica runs with its own `--watch-filter` value and its own Lease
//! (`--leader-election-id`), so both lead at once, each converges the LoadBalancers of its shard,
//! and neither ever touches the other's.

use std::time::Duration;

use capi_lb::run::LeaderElection;
use capi_lb_api::{InMemoryLoadBalancer, LoadBalancer};
use capi_lb_tests::k8s::{TestNs, in_memory, load_balancer, unique_name, wait_for, wait_ready};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

/// Create the LoadBalancer `name` of shard `shard` (its watch-filter label) and its
/// InMemoryLoadBalancer.
async fn create(t: &TestNs, name: &str, shard: &str) {
    t.create(in_memory(name, json!({}))).await;
    let mut lb = load_balancer(name, name, json!({}));
    lb["metadata"]["labels"] = json!({"cluster.x-k8s.io/watch-filter": shard});
    t.create(lb).await;
}

/// The LoadBalancer `name` and its infrastructure object carry nothing of a controller's: no
/// finalizer, no status, no claim.
async fn untouched(t: &TestNs, name: &str) {
    let lb = t.api::<LoadBalancer>().get(name).await.unwrap();
    assert!(lb.finalizers().is_empty(), "{name} got a finalizer");
    assert!(lb.status.is_none(), "{name} got a status: {:?}", lb.status);
    let infra = t.api::<InMemoryLoadBalancer>().get(name).await.unwrap();
    assert!(
        infra.owner_references().is_empty() && infra.finalizers().is_empty(),
        "{name}'s infrastructure object was claimed"
    );
}

/// Set the `-ext` Service suffix of `name` (a change its controller acts on).
async fn resuffix(t: &TestNs, name: &str) {
    t.api::<LoadBalancer>()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"publication": {"suffix": "-moved"}}})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn two_replicas_on_disjoint_watch_filters_each_converge_their_own_and_never_the_others() {
    let t = TestNs::new("e2e-shards").await;
    let leases: Api<Lease> = Api::namespaced(t.client.clone(), "capi-lb-system");
    // The Service controller is not sharded by the label: it runs in shard A only.
    let replica = |shard: &str, lease_name: &str| {
        let mut options = t.options(&["inmemory"]);
        options.watch_filter = Some(shard.into());
        options.external.enabled = shard.starts_with("shard-a");
        options.leader_election = LeaderElection {
            enabled: true,
            namespace: Some("capi-lb-system".into()),
            lease_name: lease_name.into(),
            identity: format!("replica-{shard}"),
            duration_seconds: 6,
            grace_seconds: 2,
        };
        t.spawn(options)
    };
    let (lease_a, lease_b) = (
        unique_name("capi-lb-shard-a"),
        unique_name("capi-lb-shard-b"),
    );
    let (shard_a, shard_b) = (unique_name("shard-a"), unique_name("shard-b"));

    // Only shard A's replica runs: its LoadBalancers converge, shard B's are not touched.
    let a = replica(&shard_a, &lease_a);
    for name in ["a1", "a2"] {
        create(&t, name, &shard_a).await;
    }
    for name in ["b1", "b2"] {
        create(&t, name, &shard_b).await;
    }
    for name in ["a1", "a2"] {
        wait_ready(&t, name).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for name in ["b1", "b2"] {
        untouched(&t, name).await;
    }

    // Shard B's replica starts with a Lease of its own: both lead at once, and B's converge.
    let b = replica(&shard_b, &lease_b);
    for name in ["b1", "b2"] {
        wait_ready(&t, name).await;
    }
    for (lease, holder) in [(&lease_a, &shard_a), (&lease_b, &shard_b)] {
        let holder = format!("replica-{holder}");
        let held = leases.get(lease).await.unwrap();
        assert_eq!(
            held.spec.and_then(|s| s.holder_identity).as_deref(),
            Some(holder.as_str())
        );
    }

    // With A stopped, a change to A's LoadBalancer waits for A: B does not act on it, and still
    // acts on its own.
    a.stop().await;
    resuffix(&t, "a1").await;
    resuffix(&t, "b1").await;
    let services: Api<Service> = t.api();
    wait_for(&services, "b1-moved", "B acts on its own change", |s| {
        s.is_some()
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        services.get_opt("a1-moved").await.unwrap().is_none(),
        "shard B's replica acted on shard A's LoadBalancer"
    );

    // A comes back and catches up.
    let a = replica(&shard_a, &lease_a);
    wait_for(&services, "a1-moved", "A acts on its change", |s| {
        s.is_some()
    })
    .await
    .unwrap();

    for name in ["a1", "a2", "b1", "b2"] {
        let _ = t
            .api::<LoadBalancer>()
            .delete(name, &DeleteParams::default())
            .await;
    }
    for name in ["a1", "a2", "b1", "b2"] {
        wait_for(&t.api::<LoadBalancer>(), name, "deleted", |l| l.is_none()).await;
    }
    a.stop().await;
    b.stop().await;
    for lease in [&lease_a, &lease_b] {
        let _ = leases.delete(lease, &DeleteParams::default()).await;
    }
    t.finish().await;
}

/// A name has one holder in the whole cluster, whatever the shard. Two controllers, one per
/// namespace (`--namespace`, as the shard table offers, without `--dns-domains`), and a
/// LoadBalancer in each asking for the same name through the real ExternalDNS and BIND: the first
/// keeps it (its address is BIND's only answer), the second is told `HostnameConflict` and
/// publishes no record. Each shard watched only its own namespace's DNSEndpoints before, and BIND
/// answered both addresses.
#[tokio::test]
async fn one_name_asked_for_by_two_namespace_shards_has_one_holder() {
    let mut first = TestNs::new("shard-name-a").await;
    let mut second = TestNs::new("shard-name-b").await;
    let host = format!("{}.capi-lb.test", unique_name("shared"));
    for (t, pool) in [(&first, "203.0.113.80/32"), (&second, "203.0.113.81/32")] {
        t.create(in_memory("api", json!({"addressPools": [pool]})))
            .await;
    }
    let asking = || {
        let mut lb = load_balancer("api", "api", json!({}));
        lb["spec"]["dns"] = json!({"hostnames": [host.clone()]});
        lb
    };
    for t in [&mut first, &mut second] {
        let mut options = t.options(&["inmemory"]);
        options.external.enabled = false;
        t.start(options);
    }
    first.create(asking()).await;
    let lbs: Api<LoadBalancer> = first.api();
    wait_for(
        &lbs,
        "api",
        "the first LoadBalancer's name published",
        |l| {
            l.and_then(|l| capi_lb_tests::k8s::condition(l, "DNSPublished"))
                .is_some_and(|(s, _)| s == "True")
        },
    )
    .await
    .unwrap();
    second.create(asking()).await;
    let lbs: Api<LoadBalancer> = second.api();
    let refused = wait_for(&lbs, "api", "the second told HostnameConflict", |l| {
        l.and_then(|l| capi_lb_tests::k8s::condition(l, "DNSPublished"))
            .is_some_and(|(s, r)| s == "False" && r == "HostnameConflict")
    })
    .await
    .unwrap();
    let message = refused
        .status
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "DNSPublished")
        .map(|c| c.message)
        .unwrap_or_default();
    assert!(message.contains(&first.ns), "{message}");
    // BIND answers the holder's address alone, now and after ExternalDNS's next syncs.
    let mut answer = Vec::new();
    for _ in 0..50 {
        answer = capi_lb_tests::k8s::dig(&host);
        if answer == ["203.0.113.80"] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(answer, ["203.0.113.80"]);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(capi_lb_tests::k8s::dig(&host), ["203.0.113.80"]);
    second.finish().await;
    first.finish().await;
}
