//! The clusterctl templates under templates/ cannot rot: every variable is a clusterctl standard one
//! or a provider-prefixed one with a default; after substitution every object parses, capi-lb's
//! objects pass their CRD schema and CEL rules, and the result runs through `simulate` (the in-memory
//! provider standing in for the template's provider) to a Ready control-plane LoadBalancer whose
//! endpoint is the Cluster's.

use capi_lb::sim::simulate::{Options, Source, simulate};
use capi_lb_api::validation::parse;
use capi_lb_api::{KubeDCLoadBalancer, LoadBalancer, OctaviaLoadBalancer};
use capi_lb_tests::repo;
use capi_lb_tests::templates::{render, template_file, template_files, template_values};
use serde_json::{Value, json};

/// clusterctl's variables that templates may use without a default.
const STANDARD: &[&str] = &["CLUSTER_NAME", "NAMESPACE", "KUBERNETES_VERSION"];
/// Provider variables a template may require (documented in templates/README.md).
const REQUIRED_PROVIDER: &[&str] = &[
    "CAPI_LB_OCTAVIA_SUBNET_ID",
    "CAPI_LB_OCTAVIA_FIP_NETWORK",
    "CAPI_LB_KUBEDC_EIP",
    "CAPI_LB_KUBEDC_EIP_ADDRESS",
];

/// No Warning: a flavor as shipped raises none (the Kamaji flavors once raised a spurious
/// ControlPlaneUnreadable), and the summary names the Cluster's endpoint or why there is none.
fn assert_quiet_with_a_cluster_line(file: &str, output: &str) {
    assert!(
        !output
            .lines()
            .any(|l| l.starts_with("#   +") && l.contains(" Warning ")),
        "{file}: {output}"
    );
    assert!(
        output.contains("; no Warning\n") && output.contains("\n#   Cluster default/demo: "),
        "{file}: {output}"
    );
}

#[tokio::test]
async fn every_template_substitutes_parses_and_simulates_to_a_ready_control_plane_endpoint() {
    let mut checked = 0;
    for path in template_files() {
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        let rendered = render(&path, "default");
        for (name, default) in &rendered.variables {
            assert!(
                STANDARD.contains(&name.as_str())
                    || REQUIRED_PROVIDER.contains(&name.as_str())
                    || (default.is_some()
                        && (name.starts_with("CAPI_LB_")
                            || [
                                "POD_CIDR",
                                "CONTROL_PLANE_MACHINE_COUNT",
                                "WORKER_MACHINE_COUNT"
                            ]
                            .contains(&name.as_str()))),
                "{file}: ${{{name}}} must be a clusterctl standard variable or CAPI_LB_-prefixed with a default"
            );
        }
        let docs = rendered.docs;
        let mut simulated = Vec::new();
        for doc in &docs {
            for field in ["/apiVersion", "/kind", "/metadata/name"] {
                assert!(
                    doc.pointer(field).is_some_and(Value::is_string),
                    "{file}: {field} in {doc}"
                );
            }
            assert_eq!(doc["metadata"]["namespace"], "default", "{file}: {doc}");
            match doc["kind"].as_str().unwrap() {
                "LoadBalancer" => {
                    parse::<LoadBalancer>(doc).unwrap_or_else(|e| panic!("{file}: {e}"));
                    let mut lb = doc.clone();
                    lb["spec"]["infrastructureRef"]["kind"] = json!("InMemoryLoadBalancer");
                    simulated.push(lb);
                }
                "KubeDCLoadBalancer" | "OctaviaLoadBalancer" | "InMemoryLoadBalancer" => {
                    if doc["kind"] == "KubeDCLoadBalancer" {
                        parse::<KubeDCLoadBalancer>(doc).unwrap_or_else(|e| panic!("{file}: {e}"));
                    }
                    if doc["kind"] == "OctaviaLoadBalancer" {
                        parse::<OctaviaLoadBalancer>(doc).unwrap_or_else(|e| panic!("{file}: {e}"));
                    }
                    // The in-memory provider stands in for the template's provider.
                    simulated.push(json!({
                        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                        "kind": "InMemoryLoadBalancer",
                        "metadata": doc["metadata"].clone(),
                        "spec": {},
                    }));
                }
                "Cluster" => simulated.push(doc.clone()),
                _ => {}
            }
        }
        let stream: String = simulated
            .iter()
            .map(|d| format!("---\n{}", serde_saphyr::to_string(d).unwrap()))
            .collect();
        let sim = simulate(
            &[Source {
                name: file.clone(),
                text: stream,
            }],
            &Options::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(sim.not_ready.is_empty(), "{file}: {}", sim.output);
        assert_quiet_with_a_cluster_line(&file, &sim.output);
        let out: Vec<Value> = serde_saphyr::from_multiple(&sim.output).unwrap();
        let lb = out.iter().find(|d| d["kind"] == "LoadBalancer").unwrap();
        // A control-plane LoadBalancer (the Cluster names it) publishes the Cluster's endpoint; in
        // the Kamaji flavors Kamaji does, from the ingress capi-lb writes on its Service (their
        // LoadBalancer names Kamaji's Service; the Cluster names the LoadBalancer all the same, its
        // consent to the workload endpoints).
        let names_lb = docs.iter().any(|d| {
            d["kind"] == "Cluster"
                && d["metadata"]["annotations"]["loadbalancer.cluster.x-k8s.io/loadBalancerRef"]
                    == lb["metadata"]["name"]
        });
        let realises_a_service =
            lb["metadata"]["annotations"]["loadbalancer.cluster.x-k8s.io/service"].is_string();
        assert!(names_lb, "{file}: the Cluster names its LoadBalancer");
        let control_plane = !realises_a_service;
        if control_plane {
            let cluster_endpoint = lb["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "ClusterEndpoint")
                .unwrap_or_else(|| panic!("{file}: no ClusterEndpoint condition: {}", sim.output));
            assert_eq!(
                cluster_endpoint["status"], "True",
                "{file}: {cluster_endpoint}"
            );
        } else {
            let kamaji = docs
                .iter()
                .find(|d| d["kind"] == "KamajiControlPlane")
                .unwrap_or_else(|| {
                    panic!("{file}: neither a control-plane LoadBalancer nor Kamaji")
                });
            let network = &kamaji["spec"]["network"];
            assert_eq!(
                network["loadBalancerConfig"]["loadBalancerClass"],
                "loadbalancer.cluster.x-k8s.io/capi-lb",
                "{file}"
            );
            assert_eq!(
                network["serviceAnnotations"]["loadbalancer.cluster.x-k8s.io/load-balancer-ref"],
                lb["metadata"]["name"],
                "{file}: the Service names the template's LoadBalancer"
            );
        }
        // The stable name is in the certificate SANs, as a plain name (never host:port).
        let stable = format!(
            "{}-ext.default.svc.cluster.local",
            lb["metadata"]["name"].as_str().unwrap()
        );
        let sans: Vec<&str> = docs
            .iter()
            .filter_map(|d| {
                d.pointer("/spec/network/certSANs").or_else(|| {
                    d.pointer("/spec/kubeadmConfigSpec/clusterConfiguration/apiServer/certSANs")
                })
            })
            .flat_map(|s| s.as_array().unwrap().iter().map(|v| v.as_str().unwrap()))
            .collect();
        assert!(
            sans.contains(&stable.as_str()),
            "{file}: {stable} not in {sans:?}"
        );
        assert!(
            sans.iter().all(|s| !s.contains(':')),
            "{file}: host:port in {sans:?}"
        );
        checked += 1;
    }
    assert!(checked >= 4, "{checked} templates");
}

#[test]
fn templates_metadata_is_the_generated_one() {
    let committed = std::fs::read_to_string(repo("templates/metadata.yaml")).unwrap();
    let generated = std::fs::read_to_string(repo(&format!(
        "config/{}/metadata.yaml",
        capi_lb::install::manifests::clusterctl_release_dir().display()
    )))
    .unwrap();
    let body = |s: &str| {
        s.lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(body(&committed), body(&generated));
}

/// Every flavor simulates as it is, as `capi-lb simulate -f templates/cluster-template-<flavor>.yaml`
/// does with the variables set in the environment: rendered like clusterctl renders it, the
/// in-memory provider standing in for the flavor's provider, the other projects' objects kept as
/// context, the control-plane LoadBalancer Ready and its endpoint written into the Cluster.
#[tokio::test]
async fn every_template_simulates_as_it_is_with_its_variables_set() {
    let variables: std::collections::BTreeMap<String, String> = template_values("default")
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut checked = 0;
    for path in template_files() {
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        let flavor = file
            .trim_start_matches("cluster-template-")
            .trim_end_matches(".yaml")
            .to_string();
        let sources = capi_lb::sim::simulate::read(std::slice::from_ref(&path)).unwrap();
        let sim = simulate(
            &sources,
            &Options {
                expect_ready: true,
                variables: variables.clone(),
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(sim.not_ready.is_empty(), "{file}: {}", sim.output);
        assert_quiet_with_a_cluster_line(&file, &sim.output);
        let out: Vec<Value> = serde_saphyr::from_multiple(&sim.output).unwrap();
        let lb = out.iter().find(|d| d["kind"] == "LoadBalancer").unwrap();
        let infra_kind = lb["spec"]["infrastructureRef"]["kind"].as_str().unwrap();
        assert!(
            out.iter().any(|d| d["kind"] == infra_kind),
            "{file}: its {infra_kind} is printed"
        );
        if infra_kind != "InMemoryLoadBalancer" {
            assert!(
                sim.output.contains(&format!(
                    "# {infra_kind} default/demo-cp: simulated by the in-memory provider (no cloud is contacted;"
                )),
                "{file}: {}",
                sim.output
            );
        }
        let context = sim
            .output
            .lines()
            .find(|l| l.starts_with("# Not simulated (accepted as context"))
            .unwrap_or_else(|| panic!("{file}: no context line: {}", sim.output));
        let cluster = out.iter().find(|d| d["kind"] == "Cluster").unwrap();
        let endpoint = &cluster["spec"]["controlPlaneEndpoint"];
        match flavor.as_str() {
            "kubeadm-inmemory" => {
                assert!(
                    context.contains("KubeadmControlPlane default/demo-control-plane"),
                    "{context}"
                );
                assert_eq!(
                    *endpoint,
                    json!({"host": "demo-cp-ext.default.svc.cluster.local", "port": 6443})
                );
            }
            "kubevirt-kubedc" => {
                assert!(
                    context.contains("KubevirtCluster default/demo"),
                    "{context}"
                );
                // ProviderAddress: the stand-in's address (the EIp is not simulated).
                assert_eq!(*endpoint, json!({"host": "203.0.113.1", "port": 6443}));
            }
            "kamaji-octavia" | "kamaji-kubedc" => {
                // Kamaji writes the endpoint (from its Service's ingress), not capi-lb.
                assert!(
                    context.contains("KamajiControlPlane default/demo"),
                    "{context}"
                );
                assert!(endpoint.is_null(), "{file}: {endpoint}");
            }
            other => panic!("templates/{file}: flavor {other} has no check here: add one"),
        }
        checked += 1;
    }
    assert_eq!(checked, 4);
}

/// A template whose variables have no value is refused with one error listing all of them, and a
/// hint on how to give them.
#[tokio::test]
async fn a_template_without_its_variables_lists_them_all() {
    let path = template_file("kamaji-octavia");
    let sources = capi_lb::sim::simulate::read(std::slice::from_ref(&path)).unwrap();
    let variables = [("CLUSTER_NAME", "demo"), ("KUBERNETES_VERSION", "v1.32.5")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let error = simulate(
        &sources,
        &Options {
            expect_ready: false,
            variables,
        },
    )
    .await
    .unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(
            error,
            capi_lb::sim::simulate::SimulateError::UnsetVariables(_)
        ),
        "{message}"
    );
    assert!(
        message.starts_with(&format!(
            "{}: template variables without a value: CAPI_LB_OCTAVIA_FIP_NETWORK, CAPI_LB_OCTAVIA_SUBNET_ID, NAMESPACE\n",
            path.display()
        )),
        "{message}"
    );
    assert!(
        message.contains("hint: set CAPI_LB_OCTAVIA_FIP_NETWORK, CAPI_LB_OCTAVIA_SUBNET_ID and NAMESPACE in the environment, as for clusterctl generate cluster"),
        "{message}"
    );
    assert!(
        message.contains("clusterctl generate cluster ... > rendered.yaml"),
        "{message}"
    );
}
