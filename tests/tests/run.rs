//! `capi-lb run` start-up, without a cluster: failures are clean errors, never panics.
// Integration tests: helpers panic on broken fixtures, which is the failure we want.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

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
        external: Default::default(),
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
    let err = providers(&["octavia".to_string()], &client, clock()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown provider \"octavia\"; available: inmemory, kubedc"
    );
    let registry = providers(
        &["inmemory".to_string(), "kubedc".to_string()],
        &client,
        clock(),
    )
    .unwrap();
    assert_eq!(registry.names(), vec!["inmemory", "kubedc"]);
}
