//! The Helm chart (`charts/capi-lb/`, written by `capi-lb manifests` from the objects of `config/`)
//! with the real helm (`tests/tools.sh install helm`: v3.22.0 built from the Go module proxy):
//!
//! - `helm lint --strict` with the default values and with every value changed; the schema and the
//!   templates refuse bad values (an unknown provider, a resync under 10 s, a misspelt key, two
//!   replicas without leader election);
//! - `helm template` with the default values gives `config/default`'s objects, but for the
//!   documented differences (`DIFFERENCES`); with other values, the objects follow them (the
//!   Deployment's arguments parsed by `run`'s own flags, the RBAC of the chosen providers);
//! - on the harness: `helm install` into a namespace of the test's own, under a release name of
//!   its own (the harness has no nodes: the Deployment's Pods stay Pending); capi-lb run in the
//!   test process as the chart's ServiceAccount (a token from the TokenRequest API) reconciles a
//!   LoadBalancer of the in-memory provider to Ready with the chart's RBAC alone (a refused
//!   request fails the test); `helm upgrade` with other providers and resync (the aggregated role
//!   and the arguments follow); `helm uninstall` leaves no object of the release, cluster-scoped
//!   ones included, but the user's LoadBalancer and the CRDs.
//!
//! The cluster-scoped objects of a release carry its name, and its manager role aggregates only its
//! own parts, so the release disturbs neither `config/`'s objects the other tests use nor them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use capi_lb::install::chart::{RELEASE_LABEL, RELEASE_PART_LABEL};
use capi_lb::install::rbac::{self, Enabled, PART_LABEL};
use capi_lb::run::RunOptions;
use capi_lb_tests::k8s::{
    TestNs, cluster, dynamic_api, eventually, in_memory, kubectl, load_balancer, spawn_controller,
    unique_name, wait_ready,
};
use clap::Parser;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn chart() -> PathBuf {
    repo().join("charts/capi-lb")
}

/// The Kubernetes version `helm template` renders for: the oldest capi-lb supports.
const KUBE_VERSION: &str = "v1.33.0";

/// Labels Helm's objects carry that `config/`'s do not.
const HELM_LABELS: &[&str] = &[
    "helm.sh/chart",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
];

/// The real helm, with its own cache, configuration and data folders (not the user's).
struct Helm {
    bin: PathBuf,
    home: PathBuf,
}

/// What helm answered.
struct Answer {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Helm {
    fn new() -> Self {
        let out = std::process::Command::new(repo().join("tests/tools.sh"))
            .args(["path", "helm"])
            .output()
            .expect("running tests/tools.sh");
        assert!(
            out.status.success(),
            "helm is missing: run `tests/tools.sh install helm` (builds helm v3.22.0 with Go): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // One folder per test (tests run in parallel in one process).
        let home = std::env::temp_dir().join(unique_name("capi-lb-e2e-helm"));
        std::fs::create_dir_all(&home).unwrap();
        Self {
            bin: String::from_utf8_lossy(&out.stdout).trim().into(),
            home,
        }
    }

    async fn run(&self, args: &[&str]) -> Answer {
        let out = tokio::process::Command::new(&self.bin)
            .args(args)
            .env("HELM_CACHE_HOME", self.home.join("cache"))
            .env("HELM_CONFIG_HOME", self.home.join("config"))
            .env("HELM_DATA_HOME", self.home.join("data"))
            .env_remove("KUBECONFIG")
            .output()
            .await
            .unwrap();
        Answer {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `helm ARGS`, which must succeed: its output.
    async fn ok(&self, args: &[&str]) -> String {
        let answer = self.run(args).await;
        assert!(
            answer.ok,
            "helm {} failed:\n{}\n{}",
            args.join(" "),
            answer.stdout,
            answer.stderr
        );
        answer.stdout
    }

    /// `helm ARGS` against the cluster under test (admin kubeconfig), which must succeed.
    async fn on_cluster(&self, args: &[&str]) -> String {
        let kubeconfig = cluster().kubeconfig.display().to_string();
        let mut all = args.to_vec();
        all.extend(["--kubeconfig", &kubeconfig]);
        self.ok(&all).await
    }

    /// A values file with `values` (JSON is YAML).
    fn values(&self, name: &str, values: &Value) -> String {
        let path = self.home.join(format!("{name}.yaml"));
        std::fs::write(&path, values.to_string()).unwrap();
        path.display().to_string()
    }

    /// `helm template` of the chart: its objects.
    async fn template(&self, release: &str, namespace: &str, extra: &[&str]) -> Vec<Value> {
        let chart = chart().display().to_string();
        // A helm built with `go install` assumes Kubernetes v1.20.0 unless told (the chart needs
        // 1.33).
        let mut args = vec![
            "template",
            release,
            &chart,
            "--namespace",
            namespace,
            "--kube-version",
            KUBE_VERSION,
        ];
        args.extend(extra);
        docs(&self.ok(&args).await, "helm template")
    }
}

impl Drop for Helm {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

fn docs(text: &str, what: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap_or_else(|e| panic!("{what}: {e}\n{text}"))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} among {:?}", names(objects)))
}

fn names(objects: &[Value]) -> BTreeSet<(String, String)> {
    objects
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap_or_default().to_string(),
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

/// Each (group, resource, verb) `rules` grant.
fn triples(rules: &Value) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(String::from))
            .collect()
    };
    for rule in rules.as_array().into_iter().flatten() {
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    out.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    out
}

/// The rules of `part` as `rbac.rs` generates them.
fn part_rules(part: &str, enabled: &Enabled) -> Value {
    let (_, rules) = rbac::parts(enabled)
        .into_iter()
        .find(|(p, _)| p == part)
        .unwrap_or_else(|| panic!("no part {part}"));
    serde_json::to_value(rules).unwrap()
}

fn args(deployment: &Value) -> Vec<String> {
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// `capi-lb run ARGS` parsed as the binary does (`--log-format` is a global flag of the binary).
#[derive(Parser, Debug)]
struct Run {
    #[arg(long)]
    log_format: Option<String>,
    #[command(flatten)]
    options: RunOptions,
}

fn parse_run(args: &[String]) -> Run {
    assert_eq!(args[0], "run", "{args:?}");
    Run::try_parse_from(args).unwrap_or_else(|e| panic!("capi-lb would refuse {args:?}: {e}"))
}

// --- lint ---------------------------------------------------------------------------------------

/// Every value of the chart changed (what `template_follows_the_values` checks).
fn other_values() -> Value {
    json!({
        "nameOverride": "lb",
        "image": {"repository": "registry.example/capi-lb", "tag": "dev", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "pull"}],
        "replicaCount": 2,
        "providers": ["inmemory", "octavia"],
        "watchNamespace": "tenants",
        "watchFilter": "blue",
        "resyncSeconds": 30,
        "driftCheckSeconds": 20,
        "concurrency": 8,
        "logFormat": "json",
        "leaderElection": {"enabled": true},
        "externalEndpoints": {"enabled": false},
        "metrics": {"bindAddress": "[::]", "port": 9443, "secure": false,
                    "readerSubjects": [{"kind": "ServiceAccount", "name": "prometheus",
                                        "namespace": "monitoring"}]},
        "healthProbe": {"port": 9081},
        "extraArgs": ["--address-deny=10.96.0.0/12"],
        "serviceAccount": {"name": "lb-sa", "annotations": {"example.com/role": "lb"}},
        "podAnnotations": {"example.com/scrape": "yes"},
        "podLabels": {"team": "lb"},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
        "terminationGracePeriodSeconds": 45,
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
             "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "lb"}}}}]}},
        "priorityClassName": "system-cluster-critical",
        "monitoring": {"serviceMonitor": {"enabled": true, "interval": "15s",
                                          "labels": {"release": "prometheus"}}},
    })
}

#[tokio::test]
async fn lint_strict_passes_and_bad_values_are_refused() {
    let helm = Helm::new();
    let chart = chart().display().to_string();
    helm.ok(&["lint", "--strict", &chart]).await;
    let other = helm.values("other", &other_values());
    helm.ok(&["lint", "--strict", &chart, "-f", &other]).await;

    for (name, values, says) in [
        ("provider", json!({"providers": ["nope"]}), "providers"),
        ("resync", json!({"resyncSeconds": 5}), "resyncSeconds"),
        ("misspelt", json!({"replicas": 2}), "replicas"),
        ("none", json!({"providers": []}), "providers"),
    ] {
        let file = helm.values(name, &values);
        let answer = helm.run(&["lint", "--strict", &chart, "-f", &file]).await;
        let said = format!("{}{}", answer.stdout, answer.stderr);
        assert!(!answer.ok, "{values} was accepted:\n{said}");
        assert!(said.contains(says), "{values}: no word of {says}:\n{said}");
    }
    // The templates' own check: `helm lint` reports a template's `fail` only as information, so
    // rendering is what must refuse it (as `helm install` does).
    let election = helm.values(
        "election",
        &json!({"replicaCount": 2, "leaderElection": {"enabled": false}}),
    );
    let answer = helm
        .run(&[
            "template",
            &chart,
            "--kube-version",
            KUBE_VERSION,
            "-f",
            &election,
        ])
        .await;
    assert!(!answer.ok, "two replicas without leader election rendered");
    assert!(
        answer.stderr.contains("needs leaderElection.enabled"),
        "{}",
        answer.stderr
    );
}

// --- template -----------------------------------------------------------------------------------

/// What the chart rendered with its default values, as release `capi-lb` in `capi-lb-system`,
/// differs in from `config/default` (docs/operations.md lists the same):
const DIFFERENCES: &str = "no Namespace; Helm's labels (helm.sh/chart, app.kubernetes.io/instance, \
    app.kubernetes.io/version, app.kubernetes.io/managed-by) on every object, and \
    app.kubernetes.io/component on the Cluster API role; app.kubernetes.io/instance in the \
    Deployment's selector and Pod labels; the part roles labelled with the release \
    (aggregate-to-release, release-part) instead of aggregate-to-manager, and the manager role \
    selecting those; imagePullPolicy IfNotPresent; the metrics Service capi-lb-metrics";

/// A chart object of release `capi-lb` as it would be in `config/`, after checking what is
/// documented to differ; `config` is `config/`'s object of that kind and name.
fn as_in_config(mut object: Value, config: &Value) -> Value {
    if object["kind"] == "CustomResourceDefinition" {
        return object;
    }
    let drop_labels = |labels: &mut Value, config_labels: &Value| {
        let Some(map) = labels.as_object_mut() else {
            return;
        };
        for key in HELM_LABELS {
            assert!(map.remove(*key).is_some(), "no {key} label: {map:?}");
        }
        if config_labels.get("app.kubernetes.io/component").is_none() {
            map.remove("app.kubernetes.io/component");
        }
        if let Some(release) = map.remove(RELEASE_LABEL) {
            assert_eq!(release, "capi-lb");
            let part = map.remove(RELEASE_PART_LABEL).expect("the part's label");
            map.insert(PART_LABEL.into(), part);
        }
    };
    drop_labels(
        &mut object["metadata"]["labels"],
        &config["metadata"]["labels"],
    );
    if let Some(selector) = object
        .pointer_mut("/aggregationRule/clusterRoleSelectors/0")
        .and_then(Value::as_object_mut)
    {
        let labels = selector.remove("matchLabels").expect("the release's label");
        assert_eq!(labels, json!({RELEASE_LABEL: "capi-lb"}));
        selector["matchExpressions"][0]["key"] = json!(PART_LABEL);
    }
    if object["kind"] == "Deployment" {
        let spec = &mut object["spec"];
        for pointer in ["/selector/matchLabels", "/template/metadata/labels"] {
            let labels = spec.pointer_mut(pointer).unwrap().as_object_mut().unwrap();
            let instance = labels.remove("app.kubernetes.io/instance");
            assert_eq!(instance, Some(json!("capi-lb")), "{pointer}");
        }
        let container = spec["template"]["spec"]["containers"][0]
            .as_object_mut()
            .unwrap();
        assert_eq!(
            container.remove("imagePullPolicy"),
            Some(json!("IfNotPresent"))
        );
    }
    object
}

/// `value` with every whole number as an integer.
fn integral(value: Value) -> Value {
    match value {
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && n.as_i64().is_none() && n.as_u64().is_none() => {
                json!(f as i64)
            }
            _ => Value::Number(n),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(integral).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, integral(v))).collect())
        }
        other => other,
    }
}

#[tokio::test]
async fn template_with_default_values_is_config_default() {
    let helm = Helm::new();
    let chart_objects = helm
        .template("capi-lb", "capi-lb-system", &["--include-crds"])
        .await;
    let config = docs(
        &kubectl(
            &[
                "kustomize",
                &repo().join("config/default").display().to_string(),
            ],
            None,
        ),
        "kubectl kustomize config/default",
    );
    let key = |o: &Value| {
        (
            o["kind"].as_str().unwrap().to_string(),
            o["metadata"]["name"].as_str().unwrap().to_string(),
        )
    };
    let mut config: BTreeMap<_, _> = config.into_iter().map(|o| (key(&o), o)).collect();
    assert!(
        config
            .remove(&("Namespace".into(), "capi-lb-system".into()))
            .is_some(),
        "config/default has no Namespace"
    );
    let mut chart: BTreeMap<_, _> = chart_objects.into_iter().map(|o| (key(&o), o)).collect();
    let service = chart
        .remove(&("Service".into(), "capi-lb-metrics".into()))
        .expect("the metrics Service");
    assert_eq!(service["spec"]["ports"][0]["port"], 8443);
    assert_eq!(
        config.keys().collect::<Vec<_>>(),
        chart.keys().collect::<Vec<_>>(),
        "other objects than config/default, beyond: {DIFFERENCES}"
    );
    for (key, config_object) in &config {
        // kubectl kustomize writes the CRDs' `minimum: 1.0` as 1: compare numbers by value.
        let config_object = &integral(config_object.clone());
        let object = integral(as_in_config(chart[key].clone(), config_object));
        assert!(
            &object == config_object,
            "{key:?} differs from config/default beyond: {DIFFERENCES}\nchart (normalized):\n{}\nconfig/default:\n{}",
            serde_json::to_string_pretty(&object).unwrap(),
            serde_json::to_string_pretty(config_object).unwrap()
        );
    }
    // Without values asking for them: no PodDisruptionBudget, ServiceMonitor or reader binding.
    for kind in ["PodDisruptionBudget", "ServiceMonitor"] {
        assert!(!chart.keys().any(|(k, _)| k == kind), "{kind} by default");
    }
}

#[tokio::test]
async fn template_follows_the_values() {
    let helm = Helm::new();
    let file = helm.values("other", &other_values());
    let objects = helm.template("edge", "lb-system", &["-f", &file]).await;
    // nameOverride "lb": the full name is <release>-lb.
    let deployment = find(&objects, "Deployment", "edge-lb-controller-manager");
    let run = parse_run(&args(deployment));
    let o = &run.options;
    assert_eq!(run.log_format.as_deref(), Some("json"));
    assert_eq!(o.providers, ["inmemory", "octavia"]);
    assert_eq!(o.namespace.as_deref(), Some("tenants"));
    assert_eq!(o.watch_filter.as_deref(), Some("blue"));
    assert_eq!(o.resync.as_secs(), 30);
    assert_eq!(o.drift_check.as_secs(), 20);
    assert_eq!(o.concurrency, 8);
    assert!(!o.external.enabled);
    assert!(o.leader_election.enabled);
    assert!(!o.metrics_secure);
    assert_eq!(o.metrics_address, Some("[::]:9443".parse().unwrap()));
    assert_eq!(o.health_address, Some("0.0.0.0:9081".parse().unwrap()));
    assert_eq!(o.address_deny, ["10.96.0.0/12".parse().unwrap()]);

    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 2);
    let pod = &spec["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "registry.example/capi-lb:dev");
    assert_eq!(container["imagePullPolicy"], "Always");
    // Helm merges the maps: the requests asked for, the default limit kept.
    assert_eq!(
        container["resources"],
        json!({"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}})
    );
    assert_eq!(
        container["ports"][0],
        json!({"name": "metrics", "containerPort": 9443, "protocol": "TCP"})
    );
    assert_eq!(container["ports"][1]["containerPort"], 9081);
    // config/'s hardening stays unless asked otherwise.
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["serviceAccountName"], "lb-sa");
    assert_eq!(pod["terminationGracePeriodSeconds"], 45);
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "pull"}]));
    for key in [
        "nodeSelector",
        "tolerations",
        "affinity",
        "priorityClassName",
    ] {
        assert_eq!(pod[key], other_values()[key], "{key}");
    }
    let template_meta = &spec["template"]["metadata"];
    assert_eq!(
        template_meta["annotations"],
        json!({"example.com/scrape": "yes"})
    );
    assert_eq!(template_meta["labels"]["team"], "lb");
    assert_eq!(
        spec["selector"]["matchLabels"]["app.kubernetes.io/name"],
        "lb"
    );
    assert!(spec["selector"]["matchLabels"].get("team").is_none());

    let account = find(&objects, "ServiceAccount", "lb-sa");
    assert_eq!(account["metadata"]["namespace"], "lb-system");
    assert_eq!(account["metadata"]["annotations"]["example.com/role"], "lb");

    // RBAC: the controller's part without the -ext publisher and secure metrics, the chosen
    // providers' parts and no other, aggregated by the release's label.
    let parts: BTreeSet<String> = objects
        .iter()
        .filter_map(|o| o["metadata"]["labels"][RELEASE_PART_LABEL].as_str())
        .map(String::from)
        .collect();
    assert_eq!(
        parts,
        ["controller", "inmemory", "octavia"]
            .map(String::from)
            .into()
    );
    assert!(
        !objects
            .iter()
            .any(|o| o["metadata"]["labels"].get(PART_LABEL).is_some())
    );
    let manager = find(&objects, "ClusterRole", "edge-lb-manager-role");
    assert_eq!(
        manager["aggregationRule"]["clusterRoleSelectors"][0],
        json!({"matchLabels": {RELEASE_LABEL: "edge-lb"},
               "matchExpressions": [{"key": RELEASE_PART_LABEL, "operator": "In",
                                     "values": ["controller", "inmemory", "octavia"]}]})
    );
    let lean = Enabled {
        providers: Vec::new(),
        external_endpoints: false,
        secure_metrics: false,
    };
    let controller = find(&objects, "ClusterRole", "edge-lb-manager-role-controller");
    assert_eq!(controller["rules"], part_rules("controller", &lean));
    let octavia = find(&objects, "ClusterRole", "edge-lb-manager-role-octavia");
    assert_eq!(octavia["rules"], part_rules("octavia", &Enabled::all()));
    for binding in [
        "edge-lb-manager-rolebinding",
        "edge-lb-leader-election-rolebinding",
    ] {
        let kind = if binding.contains("leader") {
            "RoleBinding"
        } else {
            "ClusterRoleBinding"
        };
        assert_eq!(
            find(&objects, kind, binding)["subjects"],
            json!([{"kind": "ServiceAccount", "name": "lb-sa", "namespace": "lb-system"}])
        );
    }
    let reader = find(&objects, "ClusterRoleBinding", "edge-lb-metrics-reader");
    assert_eq!(reader["roleRef"]["name"], "edge-lb-metrics-reader");
    assert_eq!(
        reader["subjects"],
        other_values()["metrics"]["readerSubjects"]
    );

    // Two replicas: a PodDisruptionBudget; the metrics Service and a ServiceMonitor over HTTP.
    let pdb = find(&objects, "PodDisruptionBudget", "edge-lb");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        spec["selector"]["matchLabels"]
    );
    let service = find(&objects, "Service", "edge-lb-metrics");
    assert_eq!(service["spec"]["ports"][0]["port"], 9443);
    assert_eq!(service["spec"]["selector"], spec["selector"]["matchLabels"]);
    let monitor = find(&objects, "ServiceMonitor", "edge-lb");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(
        (endpoint["scheme"].as_str(), endpoint["interval"].as_str()),
        (Some("http"), Some("15s"))
    );
    for (key, value) in service["metadata"]["labels"].as_object().unwrap() {
        if let Some(wanted) = monitor["spec"]["selector"]["matchLabels"].get(key) {
            assert_eq!(wanted, value);
        }
    }
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"],
        json!(["lb-system"])
    );

    // The PodDisruptionBudget's own switch, either way.
    let one = helm.values("pdb-on", &json!({"podDisruptionBudget": {"enabled": true}}));
    let objects = helm.template("edge", "lb-system", &["-f", &one]).await;
    assert!(objects.iter().any(|o| o["kind"] == "PodDisruptionBudget"));
    let off = helm.values(
        "pdb-off",
        &json!({"replicaCount": 3, "podDisruptionBudget": {"enabled": false}}),
    );
    let objects = helm.template("edge", "lb-system", &["-f", &off]).await;
    assert!(!objects.iter().any(|o| o["kind"] == "PodDisruptionBudget"));
}

// --- on the harness -----------------------------------------------------------------------------

/// The kinds a release may make, and whether they are namespaced.
const KINDS: &[(&str, &str, bool)] = &[
    ("v1", "ServiceAccount", true),
    ("v1", "Service", true),
    ("apps/v1", "Deployment", true),
    ("apps/v1", "ReplicaSet", true),
    ("v1", "Pod", true),
    ("policy/v1", "PodDisruptionBudget", true),
    ("rbac.authorization.k8s.io/v1", "Role", true),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", true),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", false),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", false),
];

/// The objects of `release` (by Helm's instance label), of every kind it may make.
async fn objects_of(t: &TestNs, release: &str) -> Vec<String> {
    let mut out = Vec::new();
    let selector = ListParams::default().labels(&format!("app.kubernetes.io/instance={release}"));
    for (api_version, kind, namespaced) in KINDS {
        let probe = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}});
        let api = dynamic_api(&t.client, namespaced.then_some(t.ns.as_str()), &probe)
            .await
            .unwrap();
        for o in api.list(&selector).await.unwrap().items {
            out.push(format!("{kind} {}", o.metadata.name.unwrap_or_default()));
        }
    }
    out
}

/// The rules kube-controller-manager aggregated into ClusterRole `name`.
async fn aggregated(t: &TestNs, name: &str) -> BTreeSet<(String, String, String)> {
    let role = Api::<ClusterRole>::all(t.client.clone())
        .get(name)
        .await
        .unwrap();
    triples(&serde_json::to_value(role.rules.unwrap_or_default()).unwrap())
}

/// Wait until the aggregated role `name` grants exactly what `parts` of `enabled` do.
async fn wait_aggregated(t: &TestNs, name: &str, parts: &[&str], enabled: &Enabled) {
    let mut wanted = BTreeSet::new();
    for part in parts {
        wanted.extend(triples(&part_rules(part, enabled)));
    }
    eventually(&format!("{name} aggregating {parts:?}"), || async {
        (aggregated(t, name).await == wanted).then_some(())
    })
    .await;
}

/// A client with a token of ServiceAccount `account` of `t`'s namespace, whose refused requests
/// fail the test (`TestNs::finish`).
async fn client_as(t: &TestNs, account: &str) -> kube::Client {
    let token = capi_lb_tests::k8s::service_account_token(&t.client, &t.ns, account).await;
    let config = capi_lb_tests::k8s::config_with_token(&cluster().kubeconfig, token).await;
    kube::client::ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&t.refusals)
        .with_layer(&t.requests)
        .build()
}

/// Wait until the authorizer grants `user` every rule of `rules` (in `namespace` for a Role's).
async fn wait_granted(
    t: &TestNs,
    user: &str,
    rules: &BTreeSet<(String, String, String)>,
    namespace: Option<&str>,
) {
    let reviews: Api<SubjectAccessReview> = Api::all(t.client.clone());
    for (group, full, verb) in rules {
        let (resource, subresource) = full.split_once('/').unwrap_or((full, ""));
        let review: SubjectAccessReview = serde_json::from_value(json!({"spec": {"user": user,
            "resourceAttributes": {"group": group, "resource": resource, "subresource": subresource,
                                   "verb": verb, "namespace": namespace}}}))
        .unwrap();
        eventually(&format!("{user} may {verb} {full}"), || async {
            let answer = reviews
                .create(&PostParams::default(), &review)
                .await
                .unwrap();
            answer.status.is_some_and(|s| s.allowed).then_some(())
        })
        .await;
    }
}

/// Removes a release's cluster-scoped objects (and the decoy role) when the test fails before
/// `helm uninstall`: the namespace `TestNs` deletes holds Helm's record of the release, so nothing
/// else would, and the harness is shared.
struct ClusterScoped {
    release: String,
    decoy: String,
}

impl Drop for ClusterScoped {
    fn drop(&mut self) {
        let c = cluster();
        let kubectl = |args: &[&str]| {
            let _ = std::process::Command::new(&c.kubectl)
                .arg("--kubeconfig")
                .arg(&c.kubeconfig)
                .args(args)
                .output();
        };
        let selector = format!("app.kubernetes.io/instance={}", self.release);
        kubectl(&[
            "delete",
            "clusterrole,clusterrolebinding",
            "-l",
            &selector,
            "--wait=false",
        ]);
        kubectl(&[
            "delete",
            "clusterrole",
            &self.decoy,
            "--ignore-not-found",
            "--wait=false",
        ]);
    }
}

#[tokio::test]
async fn install_reconcile_as_the_charts_account_upgrade_and_uninstall() {
    let helm = Helm::new();
    let mut t = TestNs::new("helm").await;
    // The release's name contains the chart's: it is the prefix of every object's name.
    let release = format!("capi-lb-{}", t.ns);
    let chart = chart().display().to_string();
    let ns = t.ns.clone();
    let roles: Api<ClusterRole> = Api::all(t.client.clone());

    // Another release's part (by its label): this release's manager role must not take it.
    let decoy = format!("{release}-decoy");
    let _cleanup = ClusterScoped {
        release: release.clone(),
        decoy: decoy.clone(),
    };
    roles
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": decoy, "labels": {
                RELEASE_LABEL: "another-release", RELEASE_PART_LABEL: "controller"}},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}))
            .unwrap(),
        )
        .await
        .unwrap();

    let values = |providers: Value, more: Value| {
        let mut v = json!({"providers": providers, "watchNamespace": ns,
                           "podDisruptionBudget": {"enabled": true},
                           "metrics": {"readerSubjects": [{"kind": "ServiceAccount",
                                       "name": "scraper", "namespace": ns}]}});
        for (k, value) in more.as_object().unwrap() {
            v[k] = value.clone();
        }
        v
    };
    let first = helm.values(
        &format!("{ns}-install"),
        &values(json!(["inmemory"]), json!({})),
    );
    let notes = helm
        .on_cluster(&[
            "install",
            &release,
            &chart,
            "--namespace",
            &ns,
            "-f",
            &first,
        ])
        .await;
    assert!(notes.contains("in-memory provider is enabled"), "{notes}");
    let manifest = docs(
        &helm
            .on_cluster(&["get", "manifest", &release, "--namespace", &ns])
            .await,
        "helm get manifest",
    );
    let kinds: BTreeSet<&str> = manifest.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount"
        ]
        .into()
    );
    // Accepted as asked: every object is there, namespaced ones in the release's namespace.
    for object in &manifest {
        let api = dynamic_api(&t.client, Some(&ns), object).await.unwrap();
        let name = object["metadata"]["name"].as_str().unwrap();
        let there = api
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("{} {name}: {e}", object["kind"]));
        if let Some(namespace) = there.metadata.namespace {
            assert_eq!(namespace, ns);
        }
    }
    let deployment = find(
        &manifest,
        "Deployment",
        &format!("{release}-controller-manager"),
    );
    let run = parse_run(&args(deployment));
    assert_eq!(run.options.providers, ["inmemory"]);
    assert_eq!(run.options.namespace.as_deref(), Some(ns.as_str()));
    let part_names: BTreeSet<String> = manifest
        .iter()
        .filter(|o| o["metadata"]["labels"][RELEASE_PART_LABEL].is_string())
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        part_names,
        [
            format!("{release}-manager-role-controller"),
            format!("{release}-manager-role-inmemory")
        ]
        .into()
    );

    // kube-controller-manager aggregates the release's parts, and only those.
    let manager_role = format!("{release}-manager-role");
    let all = Enabled::all();
    wait_aggregated(&t, &manager_role, &["controller", "inmemory"], &all).await;
    assert!(
        !aggregated(&t, &manager_role)
            .await
            .iter()
            .any(|(_, r, _)| r == "configmaps")
    );

    // capi-lb as the chart's ServiceAccount, with the chart's RBAC alone.
    let account = format!("{release}-manager");
    let user = format!("system:serviceaccount:{ns}:{account}");
    wait_granted(&t, &user, &aggregated(&t, &manager_role).await, None).await;
    let lease_rules = triples(&serde_json::to_value(rbac::leader_election_rules()).unwrap());
    wait_granted(&t, &user, &lease_rules, Some(&ns)).await;
    let mut options = t.options(&["inmemory"]);
    options.leader_election.enabled = true;
    options.leader_election.namespace = Some(ns.clone());
    let controller = spawn_controller(client_as(&t, &account).await, options);
    t.create(in_memory(
        "web",
        json!({"addressPools": ["203.0.113.0/24"]}),
    ))
    .await;
    t.create(load_balancer("web", "web", json!({}))).await;
    let ready = wait_ready(&t, "web").await;
    assert_eq!(
        ready.status.unwrap().endpoint.unwrap().host,
        format!("web-ext.{ns}.svc.cluster.local")
    );
    controller.stop().await;
    assert_eq!(
        t.refusals.list(),
        Vec::<String>::new(),
        "the chart's RBAC refused capi-lb"
    );

    // helm upgrade: other providers and resync; the aggregated role and the arguments follow.
    let second = helm.values(
        &format!("{ns}-upgrade"),
        &values(json!(["kubedc", "service"]), json!({"resyncSeconds": 30})),
    );
    helm.on_cluster(&[
        "upgrade",
        &release,
        &chart,
        "--namespace",
        &ns,
        "-f",
        &second,
    ])
    .await;
    let upgraded = docs(
        &helm
            .on_cluster(&["get", "manifest", &release, "--namespace", &ns])
            .await,
        "helm get manifest",
    );
    let deployment = dynamic_api(
        &t.client,
        Some(&ns),
        find(
            &upgraded,
            "Deployment",
            &format!("{release}-controller-manager"),
        ),
    )
    .await
    .unwrap()
    .get(&format!("{release}-controller-manager"))
    .await
    .unwrap();
    let run = parse_run(&args(&serde_json::to_value(&deployment).unwrap()));
    assert_eq!(run.options.providers, ["kubedc", "service"]);
    assert_eq!(run.options.resync.as_secs(), 30);
    assert!(
        roles
            .get_opt(&format!("{manager_role}-inmemory"))
            .await
            .unwrap()
            .is_none(),
        "the in-memory part outlived the upgrade"
    );
    wait_aggregated(
        &t,
        &manager_role,
        &["controller", "kubedc", "service"],
        &all,
    )
    .await;

    // helm uninstall: nothing of the release is left, but the user's LoadBalancer and the CRDs.
    let mut made: BTreeSet<(String, String)> = names(&manifest);
    made.extend(names(&upgraded));
    helm.on_cluster(&["uninstall", &release, "--namespace", &ns, "--wait"])
        .await;
    for object in manifest.iter().chain(&upgraded) {
        let api = dynamic_api(&t.client, Some(&ns), object).await.unwrap();
        let name = object["metadata"]["name"].as_str().unwrap();
        eventually(&format!("{} {name} deleted", object["kind"]), || async {
            api.get_opt(name).await.unwrap().is_none().then_some(())
        })
        .await;
    }
    // The Deployment's ReplicaSet and Pods go with it (the garbage collector).
    eventually("no object of the release", || async {
        let left = objects_of(&t, &release).await;
        if !left.is_empty() {
            eprintln!("left: {left:?}");
        }
        left.is_empty().then_some(())
    })
    .await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = t.api();
    let stored = secrets
        .list(&ListParams::default().labels(&format!("owner=helm,name={release}")))
        .await
        .unwrap();
    assert!(stored.items.is_empty(), "Helm's release records are left");
    assert!(
        t.api::<capi_lb_api::LoadBalancer>()
            .get_opt("web")
            .await
            .unwrap()
            .is_some()
    );
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(t.client.clone());
    for crd in capi_lb::install::crds::shipped() {
        let name = crd.metadata.name.unwrap();
        assert!(
            crds.get_opt(&name).await.unwrap().is_some(),
            "CRD {name} went with the release"
        );
    }
    eprintln!("release {release} made and removed: {made:?}");

    roles
        .delete(&decoy, &DeleteParams::default())
        .await
        .unwrap();
    // The LoadBalancer's finalizer is released by a controller of the tests' own account.
    t.start(t.options(&["inmemory"]));
    t.finish().await;
}
