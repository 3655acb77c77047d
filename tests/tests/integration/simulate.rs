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

fn invalid(result: Result<Vec<Value>, SimulateError>) -> Vec<String> {
    match result {
        Err(SimulateError::Invalid(problems)) => problems,
        other => panic!("expected invalid manifests, got {other:?}"),
    }
}

#[tokio::test]
async fn the_quickstart_settles_ready_with_its_ext_endpoint() {
    let sources = read(&[repo("examples/quickstart.yaml")]).unwrap();
    let sim = simulate(&sources, &Options { expect_ready: true })
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
            "InMemoryLoadBalancer"
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
    let sim = simulate(&[source("x.yaml", text)], &Options { expect_ready: true })
        .await
        .unwrap();
    assert_eq!(sim.not_ready, vec!["default/cp"]);
    assert!(sim.output.contains("InfrastructureNotFound"));
}

#[test]
fn committed_manifests_match_the_generated_ones() {
    let files = capi_lb::install::manifests::files().unwrap();
    for (path, content) in &files {
        let committed = std::fs::read_to_string(repo("config").join(path)).unwrap_or_default();
        assert_eq!(
            &committed,
            content,
            "config/{} is stale: run `cargo run -- manifests`",
            path.display()
        );
    }
    // Nothing under config/ that the generator does not produce.
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
    walk(&repo("config"), &repo("config"), &mut on_disk);
    on_disk.sort();
    let mut generated: Vec<_> = files.into_iter().map(|(p, _)| p).collect();
    generated.sort();
    assert_eq!(on_disk, generated);
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
    let chart = repo("charts/capi-lb");
    for (path, content) in &files {
        let committed = std::fs::read_to_string(chart.join(path)).unwrap_or_default();
        assert_eq!(
            &committed,
            content,
            "charts/capi-lb/{} is stale: run `cargo run -- manifests`",
            path.display()
        );
    }
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
    walk(&chart, &chart, &mut on_disk);
    on_disk.sort();
    let mut generated: Vec<_> = files.into_iter().map(|(p, _)| p).collect();
    generated.sort();
    assert_eq!(on_disk, generated);
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
#[tokio::test]
async fn every_example_simulates_and_shows_what_it_says() {
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(repo("examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let sim = simulate(
            &read(std::slice::from_ref(&path)).unwrap(),
            &Options::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
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
                assert!(
                    sim.output.contains("Warning NameConflict"),
                    "{}",
                    sim.output
                );
            }
            "target-lifecycle.yaml" => {
                assert!(sim.not_ready.is_empty(), "{}", sim.output);
                for line in [
                    "#   target Machine/cp-a: active, deletion hooks held",
                    "#   target Machine/cp-b: disabled\n",
                    "#   target Machine/cp-c: adding, deletion hooks held",
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
            other => panic!("examples/{other} has no check here: add one"),
        }
        seen.push(name);
    }
    assert_eq!(seen.len(), 5, "{seen:?}");
}

/// docs/operations.md lists every condition reason and Event reason capi-lb and its providers use
/// (the providers' from the provider catalog).
#[test]
fn every_reason_is_documented() {
    let docs = std::fs::read_to_string(repo("docs/operations.md")).unwrap();
    let mut missing = Vec::new();
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
                && !docs.contains(&format!("`{value}`"))
            {
                missing.push(format!("{file} {module}: {value}"));
            }
        }
    }
    for entry in capi_lb_providers::catalog::CATALOG {
        for reason in entry.reasons {
            if !docs.contains(&format!("`{}`", reason.name)) {
                missing.push(format!("{} provider: {}", entry.name, reason.name));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not in docs/operations.md: {missing:#?}"
    );
}
