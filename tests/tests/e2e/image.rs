//! capi-lb's container image (`hack/image.sh`: the release binary, the libraries `ldd` names, the CA
//! bundle, user 65532, built from scratch) run with podman against the harness as the generated
//! Deployment (`config/manager/manager.yaml`) runs it: host network, read-only root file system,
//! user 65532, every capability dropped, no new privileges, the default seccomp profile, `/tmp` a
//! small tmpfs, the memory limit; the ServiceAccount's kubeconfig mounted read-only and named by
//! `KUBECONFIG`; the Deployment's own arguments, with `--namespace <the test namespace>`,
//! `--providers=inmemory`, free ports for health and metrics, and the leader Lease in the test
//! namespace (`POD_NAMESPACE`, with the generated leader-election Role bound there).
//!
//! It starts, `/readyz` answers 200, it holds the Lease (identity `POD_NAME`), the container's
//! process really runs as 65532 with no capability, no new privileges, seccomp and a read-only root
//! (read from `/proc` on the host), a LoadBalancer on the in-memory provider becomes Ready and is
//! deleted, and on SIGTERM (`podman stop -t <grace period>`) capi-lb exits 0 within the
//! Deployment's termination grace period.
//!
//! The image is built (or found current) by `hack/image.sh build` at the start of the test: it
//! builds the release binary when the sources changed and commits a new image only when the binary,
//! the CA bundle or the script changed (a few seconds when nothing did). Without podman the test
//! fails, saying to run `hack/image.sh install`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use capi_lb::install::manifests;
use capi_lb_tests::k8s::{
    TestNs, apply_value, eventually, in_memory, inline_controller_kubeconfig, load_balancer,
    wait_for, wait_gone, wait_ready,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../hack/image.sh")
}

/// `hack/image.sh ARGS...`: its stdout, or a panic with what failed and how to fix it.
fn image_sh(args: &[&str]) -> String {
    let out = Command::new(script())
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running hack/image.sh: {e}"));
    assert!(
        out.status.success(),
        "hack/image.sh {} failed ({}): podman, buildah and runc are installed with \
         `hack/image.sh install` (Debian packages; root), the image is built with \
         `hack/image.sh build`",
        args.join(" "),
        out.status
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `podman ARGS...` with the script's storage and settings: (success, stdout, stderr).
fn podman(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(script())
        .arg("podman")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running hack/image.sh podman: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    )
}

/// The container, removed (with its logs printed) when the test ends, also on a panic.
struct Container(String);

impl Container {
    fn logs(&self) -> String {
        let (_, out, err) = podman(&["logs", &self.0]);
        format!("{out}\n{err}")
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- logs of container {} ---\n{}", self.0, self.logs());
        }
        let _ = podman(&["rm", "-f", "-t", "0", &self.0]);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// HTTP status of `GET url` (0 when nothing answered); asynchronous, as the other e2e tests' curl.
async fn status_of(url: &str) -> u16 {
    let out = tokio::process::Command::new("curl")
        .args([
            "-sk",
            "--max-time",
            "5",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            url,
        ])
        .output()
        .await
        .expect("curl");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// The generated Deployment (the code under test, as `capi-lb manifests` writes it).
fn deployment() -> Deployment {
    let files = manifests::files().unwrap();
    let (_, text) = files
        .iter()
        .find(|(p, _)| p.ends_with("manager/manager.yaml"))
        .expect("capi-lb manifests writes manager/manager.yaml");
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap()
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .map(|d| serde_json::from_value(d).unwrap())
        .expect("a Deployment in manager/manager.yaml")
}

/// A field of `/proc/<pid>/status`.
fn proc_status(pid: &str, field: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

#[tokio::test]
async fn the_image_runs_as_the_deployment_does_and_stops_on_sigterm() {
    // The image: built now when missing or older than the sources.
    let started = Instant::now();
    let image = image_sh(&["build"]);
    assert_eq!(image, manifests::image(), "the script's image name");
    eprintln!(
        "hack/image.sh build: {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // What the Deployment runs and how.
    let deployment = deployment();
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let grace = pod.termination_grace_period_seconds.unwrap_or(30);
    let manager = pod
        .containers
        .iter()
        .find(|c| c.name == "manager")
        .expect("the manager container");
    assert_eq!(manager.image.as_deref(), Some(image.as_str()));
    let security = manager.security_context.clone().unwrap();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(security.run_as_user, Some(65532));
    assert_eq!(
        security.capabilities.and_then(|c| c.drop),
        Some(vec!["ALL".to_string()])
    );
    let seccomp = pod.security_context.and_then(|s| s.seccomp_profile);
    assert_eq!(seccomp.map(|s| s.type_).as_deref(), Some("RuntimeDefault"));
    let memory = manager
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref()?.get("memory").cloned())
        .expect("a memory limit")
        .0;
    let memory_mib: u64 = memory
        .strip_suffix("Mi")
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("memory limit {memory}: expected <n>Mi"));
    let tmp = pod
        .volumes
        .unwrap_or_default()
        .into_iter()
        .find(|v| v.name == "tmp")
        .and_then(|v| v.empty_dir?.size_limit)
        .expect("the tmp emptyDir's sizeLimit")
        .0;
    let tmp_mib: u64 = tmp
        .strip_suffix("Mi")
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("tmp sizeLimit {tmp}: expected <n>Mi"));

    let t = TestNs::new("image").await;
    // The leader Lease in the test namespace: the generated leader-election Role and its binding,
    // there instead of capi-lb-system.
    let files = manifests::files().unwrap();
    let (_, rbac) = files
        .iter()
        .find(|(p, _)| p.ends_with("rbac/rbac.yaml"))
        .expect("rbac/rbac.yaml");
    let mut leader_objects = 0;
    for mut doc in serde_saphyr::from_multiple::<Value>(rbac).unwrap() {
        if doc["kind"] == "Role" || doc["kind"] == "RoleBinding" {
            doc["metadata"]["namespace"] = json!(t.ns);
            apply_value(&t.client, "capi-lb-e2e-image", Some(&t.ns), &doc, false)
                .await
                .unwrap();
            leader_objects += 1;
        }
    }
    assert_eq!(
        leader_objects, 2,
        "the leader-election Role and RoleBinding"
    );

    // The Deployment's arguments, with this test's namespace, provider and ports.
    let (health, metrics) = (free_port(), free_port());
    let mut args: Vec<String> = Vec::new();
    for arg in manager.args.clone().unwrap_or_default() {
        let arg = match arg.split_once('=') {
            Some(("--providers", _)) => "--providers=inmemory".to_string(),
            Some(("--health-probe-bind-address", _)) => {
                format!("--health-probe-bind-address=127.0.0.1:{health}")
            }
            Some(("--metrics-bind-address", _)) => {
                format!("--metrics-bind-address=127.0.0.1:{metrics}")
            }
            _ => arg,
        };
        args.push(arg);
    }
    assert_eq!(args.first().map(String::as_str), Some("run"), "{args:?}");
    assert!(args.iter().any(|a| a == "--leader-elect=true"), "{args:?}");
    let lease_name = args
        .iter()
        .find_map(|a| a.strip_prefix("--leader-election-id="))
        .unwrap_or("capi-lb-leader")
        .to_string();
    args.push(format!("--namespace={}", t.ns));

    // The ServiceAccount's kubeconfig (the CA inlined: the harness's names a file), readable only
    // by the container's user.
    let dir = tempfile_dir();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, inline_controller_kubeconfig()).unwrap();
    std::os::unix::fs::chown(&kubeconfig, Some(65532), Some(65532)).unwrap();
    std::fs::set_permissions(&kubeconfig, std::fs::Permissions::from_mode(0o400)).unwrap();

    let name = format!("capi-lb-e2e-{}", t.ns);
    let mut run: Vec<String> = vec![
        "run".into(),
        "--detach".into(),
        "--pull=never".into(),
        format!("--name={name}"),
        "--network=host".into(),
        "--read-only".into(),
        // Only the Deployment's own tmpfs on /tmp (podman would add /run, /var/tmp, ...).
        "--read-only-tmpfs=false".into(),
        format!("--tmpfs=/tmp:rw,size={tmp_mib}m,mode=1777"),
        "--user=65532:65532".into(),
        "--cap-drop=ALL".into(),
        "--security-opt=no-new-privileges".into(),
        format!("--memory={memory_mib}m"),
        format!(
            "--volume={}:/etc/capi-lb/kubeconfig:ro",
            kubeconfig.display()
        ),
        "--env=KUBECONFIG=/etc/capi-lb/kubeconfig".into(),
        format!("--env=POD_NAME={name}"),
        format!("--env=POD_NAMESPACE={}", t.ns),
    ];
    for env in manager.env.iter().flatten() {
        if let Some(value) = &env.value {
            run.push(format!("--env={}={value}", env.name));
        }
    }
    run.push(image.clone());
    run.extend(args);
    let run: Vec<&str> = run.iter().map(String::as_str).collect();
    let launched = Instant::now();
    let (ok, id, err) = podman(&run);
    assert!(ok, "podman {}: {err}", run.join(" "));
    let container = Container(name.clone());
    eprintln!("container {name} ({id})");

    // Ready.
    eventually("/readyz of the container answers 200", || async {
        (status_of(&format!("http://127.0.0.1:{health}/readyz")).await == 200).then_some(())
    })
    .await;
    eprintln!(
        "ready {:.1} s after podman run",
        launched.elapsed().as_secs_f64()
    );
    // It leads, with the Lease in the test namespace and the Pod name as its identity.
    let leases: Api<Lease> = t.api();
    wait_for(&leases, &lease_name, "the container holds the Lease", |l| {
        l.and_then(|l| l.spec.as_ref()?.holder_identity.as_deref()) == Some(name.as_str())
    })
    .await;
    // The secure metrics listener runs too (a self-signed certificate, no token: 401).
    assert_eq!(
        status_of(&format!("https://127.0.0.1:{metrics}/metrics")).await,
        401
    );

    // The process really runs as the Deployment says.
    let (_, pid, _) = podman(&["inspect", "--format", "{{.State.Pid}}", &name]);
    let uid = proc_status(&pid, "Uid");
    assert!(uid.split_whitespace().all(|u| u == "65532"), "uids: {uid}");
    let gid = proc_status(&pid, "Gid");
    assert!(gid.split_whitespace().all(|g| g == "65532"), "gids: {gid}");
    for caps in ["CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(proc_status(&pid, caps), "0000000000000000", "{caps}");
    }
    assert_eq!(proc_status(&pid, "NoNewPrivs"), "1");
    assert_eq!(proc_status(&pid, "Seccomp"), "2", "seccomp filter mode");
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let root = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .expect("the root mount");
    assert!(
        root.split_whitespace()
            .nth(5)
            .unwrap()
            .split(',')
            .any(|o| o == "ro"),
        "the root file system is not read-only: {root}"
    );
    let tmp_mount = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/tmp"))
        .expect("the /tmp mount");
    assert!(tmp_mount.contains(" - tmpfs "), "{tmp_mount}");

    // It reconciles: a LoadBalancer on the in-memory provider becomes Ready, and is deleted (its
    // finalizer removed by the container).
    t.create(in_memory("image", json!({}))).await;
    t.create(load_balancer("image", "image", json!({}))).await;
    let lb = wait_ready(&t, "image").await;
    eprintln!(
        "LoadBalancer Ready {:.1} s after podman run, endpoint {:?}",
        launched.elapsed().as_secs_f64(),
        lb.status.and_then(|s| s.endpoint)
    );
    let lbs = t.api::<capi_lb_api::LoadBalancer>();
    lbs.delete("image", &DeleteParams::default()).await.unwrap();
    wait_gone(&lbs, "image").await;

    // SIGTERM, as the kubelet sends it, with the Deployment's grace period.
    let stopping = Instant::now();
    let grace_arg = grace.to_string();
    let (ok, _, err) = podman(&["stop", "-t", &grace_arg, &name]);
    let stopped = stopping.elapsed();
    assert!(ok, "podman stop: {err}");
    let (_, state, _) = podman(&[
        "inspect",
        "--format",
        "{{.State.Status}} {{.State.ExitCode}}",
        &name,
    ]);
    let logs = container.logs();
    eprintln!(
        "stopped {:.2} s after SIGTERM: {state}",
        stopped.as_secs_f64()
    );
    assert_eq!(state, "exited 0", "after SIGTERM; logs:\n{logs}");
    assert!(
        stopped < Duration::from_secs(grace as u64),
        "took {stopped:?} to stop (grace period {grace} s)"
    );
    // Nothing was refused to the ServiceAccount (the in-process tests record refusals; here the
    // controller's own log tells).
    assert!(
        !logs.contains("is forbidden"),
        "the apiserver refused a request of capi-lb's ServiceAccount:\n{logs}"
    );
    drop(container);
    let _ = std::fs::remove_dir_all(&dir);
    t.finish().await;
}

/// A private temporary folder (only root may list it; the kubeconfig in it belongs to 65532).
fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(capi_lb_tests::k8s::unique_name("capi-lb-e2e-image"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    dir
}
