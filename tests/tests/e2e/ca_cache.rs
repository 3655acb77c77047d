//! The probes' Cluster CA cache under churn, on the real apiserver: a tenant whose LoadBalancers
//! name one Cluster CA Secret after another (as one that creates and deletes LoadBalancers of new
//! Clusters does) makes the prober read each, and the cache stays within its bounds
//! (`reachability::ca`: 256 CAs, 64 KiB each, 5 minutes), while another tenant's endpoint is probed
//! on time. Before, the cache kept every CA it read, of any size, for ever.

use std::sync::Arc;
use std::time::{Duration, Instant};

use capi_lb::reachability::{CA_CACHE_MAX, CA_MAX};
use capi_lb::reachability::{Port, Prober, Wanted};
use capi_lb_tests::k8s::TestNs;
use serde_json::json;
use tokio::net::TcpListener;

/// A listener that takes connections and closes them (a probe of it fails at once).
async fn closing_listener() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            drop(socket);
        }
    });
    at
}

fn wanted(namespace: &str, name: &str, at: std::net::SocketAddr, ca: Option<String>) -> Wanted {
    Wanted {
        namespace: namespace.into(),
        name: name.into(),
        host: at.ip().to_string(),
        ports: vec![Port {
            port: at.port(),
            readyz: ca.is_some(),
        }],
        ca_secret: ca,
        period: Duration::from_secs(3600),
        timeout: Duration::from_secs(2),
        thresholds: None,
    }
}

// The churn below writes CA_CACHE_MAX + 64 Secrets of 64 KiB into the shared apiserver: a bound
// raised far beyond this would fill its etcd (a million of them took 10 GiB and the apiserver with
// it, 2026-11-29) before the test could say anything.
const _: () = assert!(
    CA_CACHE_MAX <= 4096,
    "ca_cache.rs: CA_CACHE_MAX too large to churn"
);

#[tokio::test]
async fn a_tenant_cycling_cluster_cas_keeps_the_cache_bounded() {
    const CYCLED: usize = CA_CACHE_MAX + 64;
    const OVERSIZED: usize = 16;
    let t = TestNs::new("ca-churn").await;
    let bystander = TestNs::new("ca-bystander").await;
    let pem = "x".repeat(CA_MAX);
    let big = "y".repeat(8 * CA_MAX);
    for i in 0..CYCLED {
        t.create(json!({"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": format!("c{i}-ca"), "namespace": t.ns},
                        "stringData": {"tls.crt": pem}}))
            .await;
    }
    for i in 0..OVERSIZED {
        t.create(json!({"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": format!("big{i}-ca"), "namespace": t.ns},
                        "stringData": {"tls.crt": big}}))
            .await;
    }
    let target = closing_listener().await;
    let jobs = capi_lb::jobs::Jobs::new(24, None);
    let (prober, _changes) = Prober::new(t.client.clone(), jobs, None, None);
    let running = tokio::spawn({
        let prober = Arc::clone(&prober);
        async move { prober.run(std::future::pending::<()>()).await }
    });

    // The tenant's LoadBalancers come and go, each naming a new Cluster's CA; the oversized CAs
    // are asked for among them.
    let mut names: Vec<(String, String)> = (0..CYCLED)
        .map(|i| (format!("lb{i}"), format!("c{i}-ca")))
        .collect();
    names.extend((0..OVERSIZED).map(|i| (format!("big{i}"), format!("big{i}-ca"))));
    let mut most_kept = 0;
    let mut most_bytes = 0;
    let mut bystander_took = None;
    let started = Instant::now();
    // In batches, as a tenant creating and deleting LoadBalancers would: each is probed once (its
    // CA read), then goes.
    for (batch, chunk) in names.chunks(32).enumerate() {
        for (name, ca) in chunk {
            prober.want(
                &format!("uid-{name}"),
                wanted(&t.ns, name, target, Some(ca.clone())),
            );
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while chunk
            .iter()
            .any(|(name, _)| prober.finding(&format!("uid-{name}")).is_none())
        {
            assert!(Instant::now() < deadline, "batch {batch} was never probed");
            most_kept = most_kept.max(prober.cas_kept());
            most_bytes = most_bytes.max(prober.ca_bytes_kept());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for (name, _) in chunk {
            prober.forget(&format!("uid-{name}"));
        }
        most_kept = most_kept.max(prober.cas_kept());
        most_bytes = most_bytes.max(prober.ca_bytes_kept());
        if batch == 4 {
            // Another tenant's endpoint, asked for in the middle of the churn.
            let asked = Instant::now();
            let open = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let at = open.local_addr().unwrap();
            let _accepting = tokio::spawn(async move {
                while let Ok((socket, _)) = open.accept().await {
                    drop(socket);
                }
            });
            prober.want("uid-bystander", wanted(&bystander.ns, "web", at, None));
            loop {
                if let Some(f) = prober.finding("uid-bystander") {
                    assert!(f.reachable, "{f:?}");
                    break;
                }
                assert!(
                    asked.elapsed() < Duration::from_secs(10),
                    "the bystander waited"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            bystander_took = Some(asked.elapsed());
        }
    }
    println!(
        "{} CAs read in {:?}: at most {most_kept} kept, {most_bytes} bytes; the bystander's probe took {bystander_took:?}",
        names.len(),
        started.elapsed()
    );
    assert!(
        most_kept <= CA_CACHE_MAX,
        "{most_kept} CAs kept at once, over {CA_CACHE_MAX}"
    );
    assert!(
        most_bytes <= CA_CACHE_MAX * CA_MAX,
        "{most_bytes} bytes of CAs kept"
    );
    assert!(
        most_kept >= CA_CACHE_MAX / 2,
        "the churn never filled the cache: {most_kept}"
    );
    // The oversized CAs were read (their probes ran) and none is kept whole.
    assert!(prober.ca_bytes_kept() <= CA_CACHE_MAX * CA_MAX);
    running.abort();
    t.finish().await;
    bystander.finish().await;
}
