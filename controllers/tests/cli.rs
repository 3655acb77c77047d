//! The command line refuses bad flags before it connects to anything.
// Integration tests: a broken fixture should panic.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

#[test]
fn an_unknown_provider_is_refused_with_the_available_ones_before_connecting() {
    let out = Command::new(env!("CARGO_BIN_EXE_capi-lb"))
        .args(["run", "--providers", "inmemory,azure"])
        // Would be used if the flag were accepted; it must not get that far.
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("CAPI_LB_PROVIDERS")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("invalid value 'azure'"), "{stderr}");
    assert!(
        stderr.contains("[possible values: inmemory, kubedc, octavia, service]"),
        "{stderr}"
    );
    assert!(!stderr.contains("Kubernetes"), "{stderr}");
}

#[test]
fn leader_election_without_a_lease_namespace_is_refused_before_connecting() {
    let out = Command::new(env!("CARGO_BIN_EXE_capi-lb"))
        .args(["run", "--leader-elect=true", "--metrics-bind-address=off"])
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("POD_NAMESPACE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--leader-elect needs --leader-election-namespace (or POD_NAMESPACE)"),
        "{stderr}"
    );
    assert!(!stderr.contains("Kubernetes"), "{stderr}");
}

#[test]
fn a_bad_metrics_address_is_refused_before_connecting() {
    let out = Command::new(env!("CARGO_BIN_EXE_capi-lb"))
        .args(["run", "--metrics-bind-address", "8080"])
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("CAPI_LB_METRICS_BIND_ADDRESS")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--metrics-bind-address"), "{stderr}");
    assert!(stderr.contains("not an address and port"), "{stderr}");
    assert!(!stderr.contains("Kubernetes"), "{stderr}");
}
