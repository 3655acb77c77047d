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
        stderr.contains("[possible values: inmemory, kubedc, octavia, service, dns, zoned]"),
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

#[test]
fn a_boolean_flag_alone_is_a_switch_and_takes_no_separate_value() {
    let refused = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_capi-lb"))
            .args(args)
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .env_remove("POD_NAMESPACE")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // `--leader-elect` alone turns leader election on: refused for want of a Lease namespace.
    let stderr = refused(&["run", "--leader-elect", "--metrics-bind-address=off"]);
    assert!(
        stderr.contains("--leader-elect needs --leader-election-namespace"),
        "{stderr}"
    );
    // A value must be joined with `=`: the next argument is not taken as one.
    let stderr = refused(&["run", "--leader-elect", "false"]);
    assert!(stderr.contains("unexpected argument 'false'"), "{stderr}");
}
