//! The smallest run of `capi-lb-bench capi` on the real apiserver and Cluster API manager of
//! `tests/k8s/harness.sh` (started here when it is installed but not running): 2 Clusters with 3
//! Machines each must settle under Cluster API alone and again with capi-lb, so the fake
//! provider's writes are accepted by the apiserver (the benchmark's CRDs, merge patches of spec and
//! status), Cluster API takes the Machines to `Provisioned` with the copied providerID and
//! addresses, capi-lb brings every LoadBalancer to Ready, and the cleanup leaves no namespace.
//! About 40 s; no time goal (the figures of docs/benchmarks.md come from larger runs).
// Integration tests: a broken fixture should panic.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn harness(action: &str) -> bool {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    Command::new(repo.join("tests/k8s/harness.sh"))
        .arg(action)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .status()
        .unwrap()
        .success()
}

#[test]
fn two_clusters_settle_under_cluster_api_alone_and_with_capi_lb() {
    assert!(
        harness("env") || harness("start"),
        "the Kubernetes harness is not installed: tests/k8s/harness.sh install"
    );
    let log = std::env::temp_dir().join("capi-lb-capi-bench-test-controller.log");
    let out = Command::new(env!("CARGO_BIN_EXE_capi-lb-bench"))
        .args(["capi", "--clusters", "2", "--quiet-seconds", "3"])
        .args(["--timeout-seconds", "180", "--controller-log"])
        .arg(PathBuf::from(&log))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "capi-lb-bench capi failed ({}): {stdout}\n{}\n(controller log: {})",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        log.display()
    );
    assert!(
        stdout.contains("2 Clusters x 3 Machines, with capi-lb: created in"),
        "{stdout}"
    );
    assert!(stdout.contains("patch machines"), "{stdout}");
    // When each kind was all in its state, and capi-lb's reconciles read from its real metrics
    // (a metric name that does not match would read 0).
    assert!(
        stdout.contains("  all LoadBalancers in their state at "),
        "{stdout}"
    );
    assert!(
        stdout.contains("  all Machines in their state at "),
        "{stdout}"
    );
    let reconciles: f64 = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("capi-lb reconciles "))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no reconcile count: {stdout}"));
    assert!(reconciles >= 2.0, "{reconciles} reconciles: {stdout}");
}
