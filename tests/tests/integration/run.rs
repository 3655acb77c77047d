//! `capi-lb run` start-up, without a cluster: failures are clean errors, never panics.

use std::time::Duration;

use capi_lb::run::{RunError, RunOptions, providers, run_with_client};
use capi_lb_providers::clock::SystemClock;
use kube::config::{Config, KubeConfigOptions, Kubeconfig};

fn options(providers: &[&str]) -> RunOptions {
    RunOptions {
        namespace: None,
        cluster_domain: "cluster.local".into(),
        providers: providers.iter().map(|p| p.to_string()).collect(),
        concurrency: 1,
        resync: Duration::from_secs(60),
        drift_check: Duration::from_secs(60),
        provider_timeout: Duration::from_secs(30),
        reconcile_timeout: Duration::from_secs(120),
        address_deny: Vec::new(),
        address_allow: Vec::new(),
        address_allow_loopback: false,
        dns_domains: Vec::new(),
        dns_wildcards: false,
        credentials_secret_label: None,
        dns_resolver: None,
        external: Default::default(),
        metrics_address: None,
        metrics_secure: false,
        metrics_cert_dir: None,
        health_address: None,
        leader_election: Default::default(),
        watch_filter: None,
        inmemory_state: None,
        target_kinds: vec![Default::default()],
    }
}

/// A kubeconfig for an HTTPS API on a loopback port nothing listens on.
async fn unreachable_client() -> kube::Client {
    let yaml = r#"
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"#;
    let kubeconfig = Kubeconfig::from_yaml(yaml).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn an_unreachable_api_is_a_connection_error_not_a_panic() {
    // Two rustls crypto providers are compiled in; without choosing one, the first TLS connection
    // panics. This is the start-up path of `capi-lb run`.
    capi_lb::install_crypto_provider();
    let client = unreachable_client().await;
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        run_with_client(client, options(&["inmemory"]), std::future::pending()),
    )
    .await
    .expect("start-up must fail, not hang");
    assert!(matches!(result, Err(RunError::Connect(_))), "{result:?}");
}

#[tokio::test]
async fn unknown_providers_are_refused_with_the_available_ones() {
    capi_lb::install_crypto_provider();
    let client = unreachable_client().await;
    let clock = || std::sync::Arc::new(SystemClock);
    let err = providers(&["azure".to_string()], &client, clock(), None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown provider \"azure\"; available: inmemory, kubedc, octavia, service, dns, zoned"
    );
    let registry = providers(
        &[
            "inmemory".to_string(),
            "kubedc".to_string(),
            "octavia".to_string(),
        ],
        &client,
        clock(),
        None,
    )
    .unwrap();
    assert_eq!(registry.names(), vec!["inmemory", "kubedc", "octavia"]);
}

/// Leader election as `run` configures it (kube-lease-manager on a Lease), against the in-memory
/// API: one of two replicas leads, the other waits; when the leader gives the lease back (graceful
/// shutdown) the other takes over at once.
#[tokio::test]
async fn only_one_replica_leads_and_the_other_takes_over() {
    use capi_lb::sim::world::World;
    use kube_lease_manager::LeaseManagerBuilder;

    let world = World::new(Vec::new()).await.unwrap();
    let manager = |identity: &str| {
        LeaseManagerBuilder::new(world.client(), "capi-lb-leader")
            .with_namespace("capi-lb-system")
            .with_identity(identity)
            .with_duration(5)
            .with_grace(2)
            .with_field_manager("capi-lb-leader-election")
            .build()
    };
    let (mut a, a_task) = manager("replica-a").await.unwrap().watch().await;
    tokio::time::timeout(Duration::from_secs(10), async {
        while !*a.borrow_and_update() {
            a.changed().await.unwrap();
        }
    })
    .await
    .expect("the first replica leads");
    let (mut b, _b_task) = manager("replica-b").await.unwrap().watch().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!*b.borrow_and_update(), "two leaders");
    // The leader shuts down gracefully: it releases the lease, the standby takes it.
    drop(a);
    let _ = tokio::time::timeout(Duration::from_secs(5), a_task).await;
    tokio::time::timeout(Duration::from_secs(10), async {
        while !*b.borrow_and_update() {
            b.changed().await.unwrap();
        }
    })
    .await
    .expect("the standby takes over");
}
