//! `capi-lb simulate`: the shipped examples settle to Ready, the output is reproducible YAML, and
//! invalid manifests get errors naming the file, the object and the field.

use capi_lb::sim::simulate::{Options, SimulateError, Source, load, read, simulate};
use capi_lb_tests::repo;
use serde_json::{Value, json};

fn source(name: &str, text: &str) -> Source {
    Source {
        name: name.into(),
        text: text.into(),
    }
}

fn invalid<T: std::fmt::Debug>(result: Result<T, SimulateError>) -> Vec<String> {
    match result {
        Err(SimulateError::Invalid(problems)) => problems,
        other => panic!("expected invalid manifests, got {other:?}"),
    }
}

#[tokio::test]
async fn the_quickstart_settles_ready_with_its_ext_endpoint() {
    let sources = read(&[repo("examples/quickstart.yaml")]).unwrap();
    let sim = simulate(
        &sources,
        &Options {
            expect_ready: true,
            ..Options::default()
        },
    )
    .await
    .unwrap();
    assert!(sim.not_ready.is_empty(), "{}", sim.output);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&sim.output).unwrap();
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "LoadBalancer",
            "Service",
            "EndpointSlice",
            "InMemoryLoadBalancer",
            "Cluster"
        ]
    );
    let lb = &docs[0];
    assert_eq!(lb["status"]["ready"], Value::Bool(true));
    assert_eq!(
        lb["status"]["endpoint"]["host"],
        "demo-cp-ext.default.svc.cluster.local"
    );
    assert_eq!(
        lb["status"]["activeTargets"].as_array().unwrap().len(),
        3,
        "the worker is not selected"
    );
    assert_eq!(docs[2]["endpoints"][0]["addresses"][0], "203.0.113.1");
    assert!(sim.output.contains("LoadBalancerCreated"));
    // The provisioning delay of 5s per step shows in simulated time, not wall-clock time.
    assert_eq!(sim.run.elapsed.as_secs(), 10, "{:?}", sim.run);
    // The summary, as docs/simulate.md shows it: the endpoint and where it comes from, the targets,
    // the Warnings, and the Cluster's endpoint with who wrote it.
    let summary = sim.output.split("\n# Summary:\n").nth(1).unwrap();
    let doc = std::fs::read_to_string(repo("docs/simulate.md")).unwrap();
    assert!(
        doc.contains(&format!("# Summary:\n{summary}")),
        "docs/simulate.md lacks:\n{summary}"
    );
    assert!(
        summary.contains("3/3 targets active; no Warning"),
        "{summary}"
    );
    assert!(
        summary.contains("Cluster default/demo: spec.controlPlaneEndpoint demo-cp-ext.default.svc.cluster.local:6443, written by capi-lb"),
        "{summary}"
    );
}

#[tokio::test]
async fn output_is_reproducible() {
    let sources = read(&[repo("examples/quickstart.yaml")]).unwrap();
    let a = simulate(&sources, &Options::default())
        .await
        .unwrap()
        .output;
    let b = simulate(&sources, &Options::default())
        .await
        .unwrap()
        .output;
    assert_eq!(a, b);
}

#[tokio::test]
async fn the_embedded_quickstart_is_the_shipped_file() {
    // main.rs embeds examples/quickstart.yaml; simulate it the same way the binary does.
    let text = std::fs::read_to_string(repo("examples/quickstart.yaml")).unwrap();
    let sim = simulate(&[source("<embedded>", &text)], &Options::default())
        .await
        .unwrap();
    assert!(sim.not_ready.is_empty());
}

#[test]
fn invalid_manifests_name_the_file_the_object_and_the_field() {
    let text = r#"
apiVersion: loadbalancer.cluster.x-k8s.io/v1alpha1
kind: LoadBalancer
metadata: {name: cp, namespace: team-a}
spec:
  ports: [{name: api, port: 70000}]
  infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: InMemoryLoadBalancer, name: cp}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: InMemoryLoadBalancer
metadata: {name: cp, namespace: team-a}
spec:
  addressPools: [300.0.0.0/24]
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata: {name: m1, namespace: team-a}
status:
  addresses: [{type: InternalIP}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
"#;
    let problems = invalid(load(&[source("bad.yaml", text)]));
    let expect = [
        "bad.yaml: document 1 (LoadBalancer team-a/cp): spec.ports[0].port",
        "bad.yaml: document 2 (InMemoryLoadBalancer team-a/cp): spec.addressPools",
        "bad.yaml: document 3 (Machine team-a/m1): status.addresses[0]",
        "bad.yaml: document 4 (Deployment default/web): apiVersion/kind",
    ];
    for e in expect {
        assert!(
            problems.iter().any(|p| p.starts_with(e)),
            "missing {e:?} in {problems:#?}"
        );
    }
    assert_eq!(problems.len(), 4, "{problems:#?}");
}

#[test]
fn yaml_errors_and_duplicates_are_reported() {
    match load(&[source("broken.yaml", "kind: [unclosed")]) {
        Err(SimulateError::Yaml { file, .. }) => assert_eq!(file, "broken.yaml"),
        other => panic!("expected a YAML error, got {other:?}"),
    }
    let lb = "apiVersion: loadbalancer.cluster.x-k8s.io/v1alpha1\nkind: LoadBalancer\nmetadata: {name: cp}\nspec:\n  infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: InMemoryLoadBalancer, name: cp}\n";
    let problems = invalid(load(&[source("a.yaml", lb), source("b.yaml", lb)]));
    assert!(
        problems[0].contains("b.yaml") && problems[0].contains("defined more than once"),
        "{problems:?}"
    );
    assert!(matches!(
        load(&[source("empty.yaml", "---\n")]),
        Err(SimulateError::NothingToDo)
    ));
}

#[tokio::test]
async fn expect_ready_reports_what_is_not_ready() {
    let text = "apiVersion: loadbalancer.cluster.x-k8s.io/v1alpha1\nkind: LoadBalancer\nmetadata: {name: cp}\nspec:\n  infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: InMemoryLoadBalancer, name: missing}\n";
    let sim = simulate(
        &[source("x.yaml", text)],
        &Options {
            expect_ready: true,
            ..Options::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(sim.not_ready, vec!["default/cp"]);
    assert!(sim.output.contains("InfrastructureNotFound"));
}

/// The committed folder `dir` (from the repository's root) holds exactly the generated `files`.
fn assert_folder_is_generated(dir: &str, files: &[(std::path::PathBuf, String)]) {
    let root = repo(dir);
    for (path, content) in files {
        let committed = std::fs::read_to_string(root.join(path)).unwrap_or_default();
        assert_eq!(
            &committed,
            content,
            "{dir}/{} is stale: run `cargo run -- manifests`",
            path.display()
        );
    }
    // Nothing in the folder that the generator does not produce.
    fn walk(dir: &std::path::Path, base: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, base, out);
            } else {
                out.push(path.strip_prefix(base).unwrap().to_path_buf());
            }
        }
    }
    let mut on_disk = Vec::new();
    walk(&root, &root, &mut on_disk);
    on_disk.sort();
    let mut generated: Vec<_> = files.iter().map(|(p, _)| p.clone()).collect();
    generated.sort();
    assert_eq!(
        on_disk, generated,
        "{dir}/ holds files the generator does not write"
    );
}

#[test]
fn committed_manifests_match_the_generated_ones() {
    let files = capi_lb::install::manifests::files().unwrap();
    assert_folder_is_generated("config", &files);
    // The CRDs are the same with `capi-lb crds`.
    for crd in capi_lb::install::crds::shipped() {
        let committed = std::fs::read_to_string(
            repo("config/crd/bases").join(capi_lb::install::crds::file_name(&crd)),
        )
        .unwrap();
        assert_eq!(committed, capi_lb::install::crds::to_yaml(&crd).unwrap());
    }
}

/// The committed Helm chart is what `capi-lb manifests` writes (`--chart-dir charts/capi-lb`), and
/// nothing else is in its folder.
#[test]
fn committed_chart_matches_the_generated_one() {
    use clap::Args;
    let run = capi_lb::run::RunOptions::augment_args(clap::Command::new("run"));
    let files = capi_lb::install::chart::files(&run).unwrap();
    assert_folder_is_generated("charts/capi-lb", &files);
}

/// The committed flag reference is what `capi-lb manifests` writes (`--flags-doc docs/flags.md`):
/// the help of every command's flags.
#[test]
fn committed_flag_reference_matches_the_generated_one() {
    use clap::CommandFactory;
    let generated = capi_lb::install::flags::render(&capi_lb::cli::Cli::command());
    let committed = std::fs::read_to_string(repo(capi_lb::cli::FLAGS_DOC)).unwrap_or_default();
    assert_eq!(
        committed,
        generated,
        "{} is stale: run `cargo run -- manifests`",
        capi_lb::cli::FLAGS_DOC
    );
    // It is the reference of every command and every flag, generated from the command line.
    assert!(generated.starts_with(capi_lb::install::flags::HEADER));
    for section in [
        "## Global flags",
        "## `capi-lb run`",
        "## `capi-lb manifests`",
        "## `capi-lb crds`",
        "## `capi-lb simulate`",
    ] {
        assert!(generated.contains(&format!("\n{section}\n")), "{section}");
    }
    assert!(
        generated
            .contains("### `--leader-elect`\n\n`--leader-elect[=true|false]`; default `false`.\n"),
        "{generated}"
    );
    assert!(
        generated.contains("`--resync-seconds=<SECONDS>`; default `600`.\n\nSeconds between"),
        "{generated}"
    );
}

/// Every shipped example simulates; each says in its comments what it shows, and this checks it.
/// A stand-in honours the address its object pins, as the real provider would: a ServiceLoadBalancer's
/// `loadBalancerIP` is the load balancer's address, the header says so, and the summary shows it.
#[tokio::test]
async fn a_stand_in_uses_the_address_its_object_pins() {
    let text = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: ServiceLoadBalancer
metadata: {name: metal, namespace: bare}
spec:
  loadBalancerClass: metallb.io/metallb
  loadBalancerIP: 192.0.2.10
---
apiVersion: loadbalancer.cluster.x-k8s.io/v1alpha1
kind: LoadBalancer
metadata: {name: metal, namespace: bare}
spec:
  ports: [{name: kube-apiserver, port: 6443}]
  infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: ServiceLoadBalancer, name: metal}
"#;
    let sim = simulate(&[source("pinned.yaml", text)], &Options::default())
        .await
        .unwrap();
    assert!(sim.not_ready.is_empty(), "{}", sim.output);
    assert!(
        sim.output
            .contains("its address is the one it pins, 192.0.2.10)"),
        "{}",
        sim.output
    );
    assert!(
        sim.output.contains(
            "#   LoadBalancer bare/metal: Ready, endpoint metal-ext.bare.svc.cluster.local:6443 (the stable -ext name, resolving to 192.0.2.10); 0/0 targets active; no Warning"
        ),
        "{}",
        sim.output
    );
}

#[tokio::test]
async fn every_example_simulates_and_shows_what_it_says() {
    let mut seen = Vec::new();
    for path in example_files() {
        let name = path
            .strip_prefix(repo("examples"))
            .unwrap()
            .to_string_lossy()
            .to_string();
        let sim = simulate(
            &read(std::slice::from_ref(&path)).unwrap(),
            &Options::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        // Ready unless the file says at its top that it is not Ready on purpose; then it is not.
        assert_eq!(
            sim.not_ready.is_empty(),
            !sim.not_ready_on_purpose,
            "{name}: {}",
            sim.output
        );
        assert!(sim.output.contains("\n# Summary:\n"), "{name}");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&sim.output)
            .unwrap_or_else(|e| panic!("{name}: the output is not YAML: {e}"));
        match name.as_str() {
            "quickstart.yaml" => assert!(sim.not_ready.is_empty(), "{}", sim.output),
            "dual-stack.yaml" => {
                assert!(sim.not_ready.is_empty(), "{}", sim.output);
                let docs: Vec<Value> = serde_saphyr::from_multiple(&sim.output).unwrap();
                let families: Vec<&str> = docs
                    .iter()
                    .filter(|d| d["kind"] == "EndpointSlice")
                    .filter_map(|d| d["addressType"].as_str())
                    .collect();
                assert_eq!(families, ["IPv4", "IPv6"]);
                assert!(
                    sim.output.contains("Warning ProviderError"),
                    "{}",
                    sim.output
                );
                assert!(sim.output.contains("LoadBalancerCreated"), "{}", sim.output);
                assert!(
                    sim.output.contains("added member edge-1 (192.0.2.1)"),
                    "ExternalIP preferred"
                );
            }
            "name-conflict.yaml" => {
                assert_eq!(sim.not_ready, vec!["tenant-a/etcd"]);
                assert!(sim.not_ready_on_purpose);
                assert!(
                    sim.output.contains("Warning NameConflict"),
                    "{}",
                    sim.output
                );
                assert!(
                    sim.output.contains(
                        "#   LoadBalancer tenant-a/etcd: not Ready: EndpointPublished is False (NameConflict): Service tenant-a/etcd-ext already exists"
                    ),
                    "{}",
                    sim.output
                );
                assert!(sim.output.contains("#   (not Ready on purpose"));
            }
            "control-plane.yaml" => {
                let cluster = docs.iter().find(|d| d["kind"] == "Cluster").unwrap();
                assert_eq!(
                    cluster["spec"]["controlPlaneEndpoint"],
                    json!({"host": "203.0.113.1", "port": 6443})
                );
                assert!(
                    sim.output.contains(
                        "# Cluster prod/prod: spec.controlPlaneEndpoint 203.0.113.1:6443"
                    ),
                    "{}",
                    sim.output
                );
                assert!(sim.output.contains("ClusterEndpointSet"), "{}", sim.output);
                let lb = docs.iter().find(|d| d["kind"] == "LoadBalancer").unwrap();
                assert_eq!(
                    lb["status"]["activeTargets"],
                    json!(["prod-cp-a", "prod-cp-b"]),
                    "the worker is not selected"
                );
            }
            "kamaji-service.yaml" => {
                let service = docs
                    .iter()
                    .find(|d| d["kind"] == "Service" && d["metadata"]["name"] == "tenant-a")
                    .unwrap_or_else(|| panic!("Kamaji's Service not printed: {}", sim.output));
                assert_eq!(
                    service["status"]["loadBalancer"]["ingress"],
                    json!([{"ip": "203.0.113.1", "ipMode": "VIP"}])
                );
                assert_eq!(
                    service["metadata"]["annotations"]["loadbalancer.cluster.x-k8s.io/external-endpoint-dns-name"],
                    "tenant-a-cp-ext.tenant-a.svc.cluster.local"
                );
                let ext = docs.iter().find(|d| d["kind"] == "EndpointSlice").unwrap();
                assert_eq!(
                    ext["metadata"]["labels"]["kubernetes.io/service-name"],
                    "tenant-a-cp-ext"
                );
                assert_eq!(ext["endpoints"][0]["addresses"][0], "203.0.113.1");
                assert!(sim.output.contains("ServiceBound"), "{}", sim.output);
                assert!(
                    sim.output.contains("added member 10.244.1.10"),
                    "Kamaji's pods are the members: {}",
                    sim.output
                );
                assert!(
                    sim.output.contains(
                        "#   Service tenant-a/tenant-a: ingress 203.0.113.1, external endpoint tenant-a-cp-ext.tenant-a.svc.cluster.local"
                    ),
                    "{}",
                    sim.output
                );
            }
            "dns/dns-loadbalancer.yaml" => {
                assert!(sim.not_ready.is_empty(), "{}", sim.output);
                let endpoint = docs
                    .iter()
                    .find(|d| d["kind"] == "DNSEndpoint")
                    .unwrap_or_else(|| panic!("no DNSEndpoint: {}", sim.output));
                let records = &endpoint["spec"]["endpoints"][0];
                assert_eq!(records["dnsName"], "api.demo.example.com");
                assert_eq!(records["targets"], json!(["10.0.0.11", "10.0.0.12"]));
                assert_eq!(records["recordTTL"], 30);
                for line in [
                    "#   target Machine/cp-a: active, deletion hooks held",
                    "#   target Machine/cp-b: active, deletion hooks held",
                    "#   target Machine/cp-c: disabled",
                    "# ExternalDNS: played",
                ] {
                    assert!(sim.output.contains(line), "{line}: {}", sim.output);
                }
            }
            "dns/externaldns.yaml" => {
                assert!(
                    docs.iter().any(|d| d["kind"] == "DNSEndpoint"),
                    "{}",
                    sim.output
                );
            }
            "kubedc/control-plane.yaml"
            | "kubedc/bring-your-own-eip.yaml"
            | "octavia/control-plane.yaml"
            | "octavia/given-floating-ip.yaml"
            | "service/metallb-control-plane.yaml" => {
                let kind = match name.split('/').next().unwrap() {
                    "kubedc" => "KubeDCLoadBalancer",
                    "octavia" => "OctaviaLoadBalancer",
                    _ => "ServiceLoadBalancer",
                };
                let stand_in = sim
                    .output
                    .lines()
                    .find(|l| l.starts_with(&format!("# {kind} ")))
                    .unwrap_or_else(|| panic!("{name}: no stand-in note: {}", sim.output));
                assert!(
                    stand_in
                        .contains(": simulated by the in-memory provider (no cloud is contacted;"),
                    "{stand_in}"
                );
                // The provider's object is printed as written, with the stand-in's status.
                let infra = docs.iter().find(|d| d["kind"] == kind).unwrap();
                // The address the object pins (a given floating IP), else the stand-in's first.
                let expected = if name == "octavia/given-floating-ip.yaml" {
                    assert!(stand_in.contains("its address is the one it pins, 203.0.113.200)"));
                    "203.0.113.200"
                } else {
                    "203.0.113.1"
                };
                assert_eq!(
                    infra["status"]["addresses"][0]["address"], expected,
                    "{name}"
                );
                let lb = docs.iter().find(|d| d["kind"] == "LoadBalancer").unwrap();
                assert_eq!(lb["spec"]["infrastructureRef"]["kind"], kind);
                if name == "octavia/control-plane.yaml" {
                    assert!(
                        stand_in.contains("Octavia-specific settings are not simulated"),
                        "{stand_in}"
                    );
                    assert!(
                        sim.output.contains(
                            "# Not simulated (accepted as context; no controller of theirs runs): Secret tenants/openstack-cloud"
                        ),
                        "{}",
                        sim.output
                    );
                    assert_eq!(
                        infra["spec"]["floatingIP"]["networkID"],
                        "66666666-7777-4888-9999-000000000000"
                    );
                }
            }
            "target-lifecycle.yaml" => {
                assert!(sim.not_ready.is_empty(), "{}", sim.output);
                for line in [
                    "#   target Machine/cp-a: active, deletion hooks held",
                    "#   target Machine/cp-b: disabled\n",
                    "#   target Machine/cp-c: not joined yet (no state written; TargetsReady says what it waits for)",
                ] {
                    assert!(sim.output.contains(line), "{line:?} in {}", sim.output);
                }
                let docs: Vec<Value> = serde_saphyr::from_multiple(&sim.output).unwrap();
                let lb = docs.iter().find(|d| d["kind"] == "LoadBalancer").unwrap();
                let ready = lb["status"]["conditions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|c| c["type"] == "TargetsReady")
                    .unwrap();
                assert_eq!(ready["reason"], "TargetsNotAdmitted");
                assert!(
                    ready["message"]
                        .as_str()
                        .unwrap()
                        .contains("disabled: cp-b")
                );
                assert_eq!(lb["status"]["activeTargets"], json!(["cp-a"]));
            }
            "external-endpoints.yaml" => {
                for line in [
                    "# Service tenant/etcd-lb (type LoadBalancer): external endpoint etcd-lb-ext.tenant.svc.cluster.local",
                    "# Service tenant/tenant-api (type LoadBalancer): external endpoint tenant-api-public.tenant.svc.cluster.local",
                    "# Service tenant/aws-style (type LoadBalancer): external endpoint aws-style-ext.tenant.svc.cluster.local",
                    "# Service tenant/internal (type LoadBalancer): no external endpoint",
                ] {
                    assert!(sim.output.contains(line), "{line:?} in {}", sim.output);
                }
                let docs: Vec<Value> = serde_saphyr::from_multiple(&sim.output).unwrap();
                let families: Vec<&str> = docs
                    .iter()
                    .filter(|d| d["kind"] == "EndpointSlice")
                    .filter_map(|d| d["addressType"].as_str())
                    .collect();
                assert_eq!(families, ["IPv4", "IPv6", "IPv4"]);
                assert!(docs.iter().any(|d| d["spec"]["type"] == "ExternalName"));
            }
            "zoned/octavia-per-zone.yaml" => {
                assert!(sim.not_ready.is_empty(), "{}", sim.output);
                for line in [
                    "# LoadBalancer default/demo: Ready\n#   target Machine/cp-a: active, deletion hooks held\n#   target Machine/cp-b: active, deletion hooks held\n#   target Machine/cp-c: active, deletion hooks held",
                    "# LoadBalancer default/demo-az1: Ready\n#   target Machine/cp-a: active\n#   target Machine/cp-c: active",
                    "# LoadBalancer default/demo-az2: Ready\n#   target Machine/cp-b: active",
                    "DNSEndpoint demo: api.demo.example.com A 203.0.113.1,203.0.113.2",
                ] {
                    assert!(sim.output.contains(line), "{line:?} in {}", sim.output);
                }
                let lb = docs
                    .iter()
                    .find(|d| d["kind"] == "LoadBalancer" && d["metadata"]["name"] == "demo")
                    .unwrap();
                assert_eq!(lb["status"]["addresses"].as_array().map(Vec::len), Some(2));
            }
            other => panic!("examples/{other} has no check here: add one"),
        }
        seen.push(name);
    }
    assert_eq!(seen.len(), 15, "{seen:?}");
}

/// Every `.yaml` under examples/, in its folders too, sorted.
fn example_files() -> Vec<std::path::PathBuf> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().and_then(|e| e.to_str()) == Some("yaml") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&repo("examples"), &mut files);
    files.sort();
    files
}

/// docs/troubleshooting.md lists every condition reason and Event reason capi-lb and its providers
/// use (the providers' from the provider catalog), and names no other in its tables (a reason
/// named in the docs that the code does not have, as `HostnameNotAllowed` once was, sends the
/// reader after an Event that never comes).
#[test]
fn every_reason_is_documented() {
    let docs = std::fs::read_to_string(repo("docs/troubleshooting.md")).unwrap();
    let mut missing = Vec::new();
    let mut known = std::collections::BTreeSet::new();
    let file = "api/src/constants.rs";
    let text = std::fs::read_to_string(repo(file)).unwrap();
    for module in ["condition", "reason", "event"] {
        let start = text
            .find(&format!("pub mod {module} {{"))
            .unwrap_or_else(|| panic!("{file}: mod {module}"));
        let body = &text[start..];
        let body = &body[..body.find("\n}").unwrap()];
        for line in body.lines() {
            if let Some(value) = line
                .trim()
                .strip_prefix("pub const ")
                .and_then(|rest| rest.split('"').nth(1))
            {
                known.insert(value.to_string());
                if !docs.contains(&format!("`{value}`")) {
                    missing.push(format!("{file} {module}: {value}"));
                }
            }
        }
    }
    for entry in capi_lb_providers::catalog::CATALOG {
        for reason in entry.reasons {
            known.insert(reason.name.to_string());
            if !docs.contains(&format!("`{}`", reason.name)) {
                missing.push(format!("{} provider: {}", entry.name, reason.name));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not in docs/troubleshooting.md: {missing:#?}"
    );
    // The first column of every table row: a condition type or a reason the code has.
    let mut unknown = Vec::new();
    let mut rows = 0;
    for line in docs.lines() {
        let Some(first) = line.strip_prefix("| `").and_then(|r| r.split('`').next()) else {
            continue;
        };
        rows += 1;
        if !known.contains(first) {
            unknown.push(first.to_string());
        }
    }
    assert!(rows > 50, "only {rows} rows: is the scan broken?");
    assert!(
        unknown.is_empty(),
        "docs/troubleshooting.md names reasons the code does not have: {unknown:?}"
    );
}

/// A provider's object is still checked against its CRD schema while the in-memory provider stands
/// in for it; a kind that looks like one of capi-lb's is refused; other projects' kinds and Secrets
/// are kept as context.
#[test]
fn provider_objects_are_checked_and_other_projects_kinds_are_context() {
    let text = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: OctaviaLoadBalancer
metadata: {name: cp, namespace: t}
spec:
  credentials: {secretName: cloud}
  vip: {subnetId: 11111111-2222-4333-8444-555555555555}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: OctaviaLoadBalancr
metadata: {name: cp2, namespace: t}
---
apiVersion: loadbalancer.cluster.x-k8s.io/v1alpha1
kind: LoadBalancerPool
metadata: {name: pool, namespace: t}
---
apiVersion: loadbalancer.cluster.x-k8s.io/v1beta1
kind: LoadBalancer
metadata: {name: old, namespace: t}
"#;
    let problems = invalid(load(&[source("bad.yaml", text)]));
    let expect = [
        "bad.yaml: document 1 (OctaviaLoadBalancer t/cp): spec.vip.subnetId",
        "bad.yaml: document 2 (OctaviaLoadBalancr t/cp2): kind: \"OctaviaLoadBalancr\" is not a kind of infrastructure.cluster.x-k8s.io; did you mean OctaviaLoadBalancer?",
        "bad.yaml: document 3 (LoadBalancerPool t/pool): apiVersion/kind",
        "bad.yaml: document 4 (LoadBalancer t/old): apiVersion: LoadBalancer is loadbalancer.cluster.x-k8s.io/v1alpha1",
    ];
    for e in expect {
        assert!(
            problems.iter().any(|p| p.starts_with(e)),
            "missing {e:?} in {problems:#?}"
        );
    }
    // The typo of subnetID is refused as an unknown field, as the apiserver would.
    assert_eq!(problems.len(), 4, "{problems:#?}");

    let good = r#"
apiVersion: v1
kind: Secret
metadata: {name: cloud, namespace: t}
stringData: {clouds.yaml: "clouds: {}"}
---
apiVersion: controlplane.cluster.x-k8s.io/v1alpha2
kind: KamajiControlPlane
metadata: {name: t, namespace: t}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: OpenStackCluster
metadata: {name: t, namespace: t}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {name: t-md, namespace: t}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: OctaviaLoadBalancer
metadata: {name: cp, namespace: t}
spec:
  credentials: {secretName: cloud}
  vip: {subnetID: 11111111-2222-4333-8444-555555555555}
---
apiVersion: loadbalancer.cluster.x-k8s.io/v1alpha1
kind: LoadBalancer
metadata: {name: cp, namespace: t}
spec:
  infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: OctaviaLoadBalancer, name: cp}
"#;
    let loaded = load(&[source("good.yaml", good)]).unwrap();
    assert_eq!(
        loaded.context,
        [
            "Secret t/cloud",
            "KamajiControlPlane t/t",
            "OpenStackCluster t/t",
            "MachineDeployment t/t-md"
        ]
    );
    let kinds: Vec<&str> = loaded
        .objects
        .iter()
        .filter_map(|o| o["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["OctaviaLoadBalancer", "LoadBalancer"]);
    // Checked as the apiserver stores it: the schema's defaults applied.
    assert_eq!(
        loaded.objects[0]["spec"]["credentials"]["key"],
        "clouds.yaml"
    );
}

/// The in-memory provider stands in for Octavia: the LoadBalancer keeps its OctaviaLoadBalancer,
/// becomes Ready at an address of the documentation range, and the timeline says so at its top.
#[tokio::test]
async fn a_stand_in_says_so_at_the_top_and_the_load_balancer_becomes_ready() {
    let sources = read(&[repo("examples/octavia/control-plane.yaml")]).unwrap();
    let sim = simulate(
        &sources,
        &Options {
            expect_ready: true,
            ..Options::default()
        },
    )
    .await
    .unwrap();
    assert!(sim.not_ready.is_empty(), "{}", sim.output);
    let mut lines = sim.output.lines();
    assert_eq!(
        lines.next(),
        Some("# capi-lb simulate -f ".to_string() + &sources[0].name).as_deref()
    );
    assert_eq!(
        lines.next(),
        Some(
            "# OctaviaLoadBalancer tenants/tenant-a-cp: simulated by the in-memory provider (no cloud is contacted; Octavia-specific settings are not simulated; a floating IP or VIP address the spec gives is the address, as Octavia would make it; addresses come from the documentation range 203.0.113.0/24)"
        )
    );
    assert!(
        sim.output.contains(
            "#   LoadBalancer tenants/tenant-a-cp: Ready, endpoint tenant-a-cp-ext.tenants.svc.cluster.local:6443"
        ),
        "{}",
        sim.output
    );
}

/// `spec.workloadEndpoints` sits beside `spec.controlPlane`, not under it, so the LoadBalancer that
/// realises a Kamaji tenant's Service can keep the tenant's `default/kubernetes` too: with the
/// field, the Service is still taken (a LoadBalancer with `spec.controlPlane` never is: it selects
/// Machines of its own).
#[tokio::test]
async fn a_kamaji_service_is_realised_by_a_load_balancer_that_keeps_the_workload_endpoints() {
    let text = std::fs::read_to_string(repo("examples/kamaji-service.yaml")).unwrap();
    let with = text.replacen(
        "  clusterName: tenant-a\n",
        "  clusterName: tenant-a\n  workloadEndpoints: {enabled: true}\n",
        1,
    );
    assert_ne!(with, text, "the example's LoadBalancer changed shape");
    let sim = simulate(&[source("kamaji.yaml", &with)], &Options::default())
        .await
        .unwrap();
    assert!(
        sim.output.contains(
            "#   Service tenant-a/tenant-a: ingress 203.0.113.1, external endpoint tenant-a-cp-ext.tenant-a.svc.cluster.local"
        ),
        "{}",
        sim.output
    );
    let under_control_plane = text.replacen(
        "  clusterName: tenant-a\n",
        "  clusterName: tenant-a\n  controlPlane: {publishEndpoint: false}\n",
        1,
    );
    let refused = simulate(
        &[source("kamaji.yaml", &under_control_plane)],
        &Options::default(),
    )
    .await
    .unwrap();
    assert!(
        !refused
            .output
            .contains("#   Service tenant-a/tenant-a: ingress"),
        "{}",
        refused.output
    );
}
