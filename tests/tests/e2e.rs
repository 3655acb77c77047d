//! End-to-end tests against a real cluster (`KUBECONFIG`): install the CRDs, run the controller in
//! this process, and follow a LoadBalancer with the in-memory provider from creation through an
//! address change to deletion. Ignored by default; run with
//! `cargo test -p capi-lb-tests --test e2e -- --ignored` against a disposable cluster (kind, k3d).
// Integration tests: helpers panic on broken fixtures, which is the failure we want.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::time::{Duration, Instant};

use capi_lb::run::{RunOptions, run_with_client};
use capi_lb_api::{InMemoryLoadBalancer, LoadBalancer};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < TIMEOUT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Apply `crd` and wait until it is established.
async fn apply_crd(client: &Client, crd: &CustomResourceDefinition) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.name_any();
    crds.patch(
        &name,
        &PatchParams::apply("capi-lb-e2e").force(),
        &Patch::Apply(crd),
    )
    .await
    .unwrap();
    eventually(&format!("CRD {name} established"), || async {
        let crd = crds.get(&name).await.ok()?;
        crd.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;
}

async fn install_crds(client: &Client) {
    for crd in capi_lb_api::crds() {
        apply_crd(client, &crd).await;
    }
}

struct Controller {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

fn start_controller(client: Client, namespace: &str) -> Controller {
    start_controller_with(client, namespace, &["inmemory"])
}

fn start_controller_with(client: Client, namespace: &str, providers: &[&str]) -> Controller {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options = RunOptions {
        namespace: Some(namespace.to_string()),
        cluster_domain: "cluster.local".into(),
        providers: providers.iter().map(|p| p.to_string()).collect(),
        concurrency: 2,
        resync: Duration::from_secs(60),
        external: Default::default(),
        metrics_address: None,
        leader_election: None,
        watch_filter: None,
    };
    let task = tokio::spawn(async move {
        run_with_client(client, options, async move {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    Controller {
        stop: Some(stop),
        task,
    }
}

impl Controller {
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(30), self.task).await;
    }
}

async fn test_namespace(client: &Client) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let name = format!("capi-lb-e2e-{}", nanos % 1_000_000_000);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    name
}

#[tokio::test]
#[ignore = "needs a cluster: set KUBECONFIG to a disposable cluster"]
async fn a_load_balancer_goes_ready_publishes_follows_changes_and_cleans_up() {
    capi_lb::install_crypto_provider();
    let client = Client::try_default().await.unwrap();
    install_crds(&client).await;
    let ns = test_namespace(&client).await;
    let controller = start_controller(client.clone(), &ns);

    let infras: Api<InMemoryLoadBalancer> = Api::namespaced(client.clone(), &ns);
    let lbs: Api<LoadBalancer> = Api::namespaced(client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);

    let infra: InMemoryLoadBalancer = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "InMemoryLoadBalancer",
        "metadata": {"name": "e2e"},
        "spec": {"addressPools": ["203.0.113.0/24"], "provisioningDelaySeconds": 2},
    }))
    .unwrap();
    infras.create(&PostParams::default(), &infra).await.unwrap();
    let lb: LoadBalancer = serde_json::from_value(json!({
        "apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1",
        "kind": "LoadBalancer",
        "metadata": {"name": "e2e"},
        "spec": {"infrastructureRef": {
            "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "InMemoryLoadBalancer", "name": "e2e"}},
    }))
    .unwrap();
    lbs.create(&PostParams::default(), &lb).await.unwrap();

    // Ready, with the defaults the apiserver applied from the schema.
    let ready = eventually("LoadBalancer Ready", || async {
        let lb = lbs.get("e2e").await.ok()?;
        lb.status.as_ref()?.ready.then_some(lb)
    })
    .await;
    assert_eq!(ready.spec.ports[0].port, 6443);
    let status = ready.status.unwrap();
    assert_eq!(
        status.endpoint.unwrap().host,
        format!("e2e-ext.{ns}.svc.cluster.local")
    );
    let svc = services.get("e2e-ext").await.unwrap();
    assert_eq!(svc.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    let slice = slices.get("e2e-ext-ipv4").await.unwrap();
    assert_eq!(slice.endpoints[0].addresses, vec!["203.0.113.1"]);

    // An address change reaches the slice in place.
    infras
        .patch(
            "e2e",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"addressPools": ["198.51.100.0/24"]}})),
        )
        .await
        .unwrap();
    eventually("EndpointSlice updated", || async {
        let s = slices.get("e2e-ext-ipv4").await.ok()?;
        (s.endpoints.first()?.addresses == vec!["198.51.100.1".to_string()]
            && s.uid() == slice.uid())
        .then_some(())
    })
    .await;

    // Invalid input is refused by the apiserver with the schema's message.
    let bad = json!({
        "apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1",
        "kind": "LoadBalancer",
        "metadata": {"name": "a".repeat(60)},
        "spec": {"infrastructureRef": {
            "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "InMemoryLoadBalancer", "name": "x"}},
    });
    let err = lbs
        .create(
            &PostParams::default(),
            &serde_json::from_value(bad).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("must be a DNS label"), "{err}");

    // Deletion removes the published objects, then the LoadBalancer.
    lbs.delete("e2e", &DeleteParams::default()).await.unwrap();
    eventually("LoadBalancer gone", || async {
        lbs.get_opt("e2e").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(services.get_opt("e2e-ext").await.unwrap().is_none());
    let left = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=e2e-ext"))
        .await
        .unwrap();
    assert!(left.items.is_empty());

    controller.stop().await;
    Api::<Namespace>::all(client)
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
#[ignore = "needs a cluster: set KUBECONFIG to a disposable cluster"]
async fn a_hand_made_ext_service_is_left_alone() {
    capi_lb::install_crypto_provider();
    let client = Client::try_default().await.unwrap();
    install_crds(&client).await;
    let ns = test_namespace(&client).await;
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let manual: Service = serde_json::from_value(json!({
        "metadata": {"name": "mine-ext"},
        "spec": {"clusterIP": "None", "ports": [{"port": 2379, "targetPort": 2379}]},
    }))
    .unwrap();
    let manual = services
        .create(&PostParams::default(), &manual)
        .await
        .unwrap();
    let controller = start_controller(client.clone(), &ns);
    let infras: Api<InMemoryLoadBalancer> = Api::namespaced(client.clone(), &ns);
    let lbs: Api<LoadBalancer> = Api::namespaced(client.clone(), &ns);
    infras
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                "kind": "InMemoryLoadBalancer", "metadata": {"name": "mine"}, "spec": {}}))
            .unwrap(),
        )
        .await
        .unwrap();
    lbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1",
            "kind": "LoadBalancer", "metadata": {"name": "mine"},
            "spec": {"infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "InMemoryLoadBalancer", "name": "mine"}}}))
        .unwrap(),
    )
    .await
    .unwrap();
    eventually("NameConflict", || async {
        let lb = lbs.get("mine").await.ok()?;
        lb.status?
            .conditions
            .iter()
            .any(|c| c.type_ == "EndpointPublished" && c.reason == "NameConflict")
            .then_some(())
    })
    .await;
    let after = services.get("mine-ext").await.unwrap();
    assert_eq!(after.resource_version(), manual.resource_version());
    lbs.delete("mine", &DeleteParams::default()).await.unwrap();
    eventually("LoadBalancer gone", || async {
        lbs.get_opt("mine").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(services.get_opt("mine-ext").await.unwrap().is_some());
    controller.stop().await;
    Api::<Namespace>::all(client)
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
}

/// Install the Cluster API Machine and Cluster CRDs (unmodified upstream files, from
/// `CAPI_CRDS_DIR`, default `../shared/crds/cluster-api` next to the repository). Conversion is
/// switched off for the install: no Cluster API webhook runs in the test cluster and only the
/// storage version is used.
async fn install_capi_crds(client: &Client) {
    install_third_party_crds(
        client,
        "CAPI_CRDS_DIR",
        "cluster-api",
        &[
            "cluster.x-k8s.io_machines.yaml",
            "cluster.x-k8s.io_clusters.yaml",
        ],
    )
    .await;
}

/// Install unmodified third-party CRDs from `$env_var`, default `../shared/crds/<folder>` next to
/// the repository. Conversion webhooks are switched off for the install (no webhook runs here).
async fn install_third_party_crds(client: &Client, env_var: &str, folder: &str, files: &[&str]) {
    let dir = std::env::var(env_var)
        .unwrap_or_else(|_| format!("{}/../../shared/crds/{folder}", env!("CARGO_MANIFEST_DIR")));
    for file in files {
        let text = std::fs::read_to_string(format!("{dir}/{file}"))
            .unwrap_or_else(|e| panic!("{dir}/{file}: {e} (set {env_var})"));
        let mut crd: CustomResourceDefinition = serde_saphyr::from_str(&text).unwrap();
        crd.spec.conversion = None;
        crd.metadata.annotations = None;
        apply_crd(client, &crd).await;
    }
}

#[tokio::test]
#[ignore = "needs a cluster: set KUBECONFIG to a disposable cluster (and CAPI_CRDS_DIR if ../shared is absent)"]
async fn a_rolling_machine_replacement_drains_before_the_hooks_are_released() {
    use capi_lb_api::capi::Machine;
    use capi_lb_api::target::TargetKeys;

    capi_lb::install_crypto_provider();
    let client = Client::try_default().await.unwrap();
    install_crds(&client).await;
    install_capi_crds(&client).await;
    let ns = test_namespace(&client).await;
    let controller = start_controller(client.clone(), &ns);
    let machines: Api<Machine> = Api::namespaced(client.clone(), &ns);
    let lbs: Api<LoadBalancer> = Api::namespaced(client.clone(), &ns);
    let keys = TargetKeys::new(&ns, "cp");

    let create_machine = |name: &'static str, ip: &'static str| {
        let machines = machines.clone();
        async move {
            let m: Machine = serde_json::from_value(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": name, "finalizers": ["machine.cluster.x-k8s.io"],
                    "labels": {"cluster.x-k8s.io/cluster-name": "demo",
                               "loadbalancer.cluster.x-k8s.io/name": "cp"}},
                "spec": {"clusterName": "demo", "bootstrap": {"dataSecretName": "none"},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                          "kind": "DockerMachine", "name": name}},
            }))
            .unwrap();
            machines.create(&PostParams::default(), &m).await.unwrap();
            machines
                .patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"status": {"addresses": [
                        {"type": "InternalIP", "address": ip}]}})),
                )
                .await
                .unwrap();
        }
    };
    let state_of = |name: &'static str| {
        let machines = machines.clone();
        let key = keys.state.clone();
        async move {
            machines
                .get_opt(name)
                .await
                .unwrap()
                .and_then(|m| m.annotations().get(&key).cloned())
        }
    };

    Api::<InMemoryLoadBalancer>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                "kind": "InMemoryLoadBalancer", "metadata": {"name": "cp"}, "spec": {}}))
            .unwrap(),
        )
        .await
        .unwrap();
    lbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1",
            "kind": "LoadBalancer", "metadata": {"name": "cp"},
            "spec": {"clusterName": "demo", "drainSeconds": 5, "infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "InMemoryLoadBalancer", "name": "cp"}}}))
        .unwrap(),
    )
    .await
    .unwrap();
    create_machine("cp-old", "10.0.0.11").await;
    eventually("old machine active", || async {
        (state_of("cp-old").await.as_deref() == Some("active")).then_some(())
    })
    .await;
    create_machine("cp-new", "10.0.0.21").await;
    eventually("new machine active", || async {
        (state_of("cp-new").await.as_deref() == Some("active")).then_some(())
    })
    .await;

    machines
        .delete("cp-old", &DeleteParams::default())
        .await
        .unwrap();
    eventually("old machine removing", || async {
        (state_of("cp-old").await.as_deref() == Some("removing")).then_some(())
    })
    .await;
    let drain_seen = Instant::now();
    let m = machines.get("cp-old").await.unwrap();
    assert!(m.annotations().contains_key(&keys.pre_drain));
    assert!(m.annotations().contains_key(&keys.pre_terminate));
    // The emulated Machine controller waits for the hooks; they go once the member is removed.
    eventually("hooks released", || async {
        let m = machines.get("cp-old").await.ok()?;
        let a = m.annotations();
        (!a.contains_key(&keys.pre_drain) && !a.contains_key(&keys.pre_terminate)).then_some(())
    })
    .await;
    assert!(
        drain_seen.elapsed() >= Duration::from_secs(4),
        "released after {:?}, before the drain time",
        drain_seen.elapsed()
    );
    assert_eq!(state_of("cp-old").await.as_deref(), Some("removed"));
    machines
        .patch(
            "cp-old",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    eventually("only the new machine is active", || async {
        let status = lbs.get("cp").await.ok()?.status?;
        (status.active_targets == vec!["cp-new".to_string()]
            && status.targets == vec!["cp-new".to_string()])
        .then_some(())
    })
    .await;

    // Deleting the LoadBalancer releases the remaining hooks.
    lbs.delete("cp", &DeleteParams::default()).await.unwrap();
    eventually("hooks of the new machine released", || async {
        let m = machines.get("cp-new").await.ok()?;
        (!m.annotations().contains_key(&keys.pre_terminate)).then_some(())
    })
    .await;
    machines
        .patch(
            "cp-new",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    controller.stop().await;
    Api::<Namespace>::all(client)
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
#[ignore = "needs a cluster: set KUBECONFIG to a disposable cluster"]
async fn a_load_balancer_service_gets_a_stable_ext_endpoint_that_follows_its_ip() {
    capi_lb::install_crypto_provider();
    let client = Client::try_default().await.unwrap();
    install_crds(&client).await;
    let ns = test_namespace(&client).await;
    let controller = start_controller(client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);

    let source: Service = serde_json::from_value(json!({
        "metadata": {"name": "etcd-lb"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "etcd"},
                 "ports": [{"name": "etcd", "port": 2379, "targetPort": 2379}]},
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &source)
        .await
        .unwrap();
    // No load balancer implementation runs in a test cluster: write the ingress as one would.
    let set_ingress = |ip: &'static str| {
        let services = services.clone();
        async move {
            services
                .patch_status(
                    "etcd-lb",
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}})),
                )
                .await
                .unwrap();
        }
    };
    set_ingress("198.51.100.7").await;
    let slice = eventually("etcd-lb-ext-ipv4 published", || async {
        let s = slices.get("etcd-lb-ext-ipv4").await.ok()?;
        (s.endpoints.first()?.addresses == vec!["198.51.100.7".to_string()]).then_some(s)
    })
    .await;
    let ext = services.get("etcd-lb-ext").await.unwrap();
    assert_eq!(ext.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    let dns = eventually("DNS name annotation", || async {
        services
            .get("etcd-lb")
            .await
            .ok()?
            .annotations()
            .get("loadbalancer.cluster.x-k8s.io/external-endpoint-dns-name")
            .cloned()
    })
    .await;
    assert_eq!(dns, format!("etcd-lb-ext.{ns}.svc.cluster.local"));

    // The IP changes: same slice, new address.
    set_ingress("198.51.100.8").await;
    eventually("slice updated in place", || async {
        let s = slices.get("etcd-lb-ext-ipv4").await.ok()?;
        (s.endpoints.first()?.addresses == vec!["198.51.100.8".to_string()]
            && s.uid() == slice.uid())
        .then_some(())
    })
    .await;

    // Opting out withdraws it.
    services
        .patch(
            "etcd-lb",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {
                "loadbalancer.cluster.x-k8s.io/external-endpoint": "false"}}})),
        )
        .await
        .unwrap();
    eventually("etcd-lb-ext removed", || async {
        services
            .get_opt("etcd-lb-ext")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;

    controller.stop().await;
    Api::<Namespace>::all(client)
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
#[ignore = "needs a cluster: set KUBECONFIG to a disposable cluster (and CAPI_CRDS_DIR / KUBEDC_CRDS_DIR if ../shared is absent)"]
async fn a_load_balancer_on_kube_dc_with_the_simulated_controller() {
    use capi_lb_api::KubeDCLoadBalancer;
    use capi_lb_api::capi::Machine;
    use capi_lb_api::kubedc::EIp;
    use capi_lb_tests::kubedc_sim::KubeDcSim;

    capi_lb::install_crypto_provider();
    let client = Client::try_default().await.unwrap();
    install_crds(&client).await;
    install_capi_crds(&client).await;
    install_third_party_crds(
        &client,
        "KUBEDC_CRDS_DIR",
        "kube-dc",
        &["kube-dc.com_eips.yaml"],
    )
    .await;
    let ns = test_namespace(&client).await;
    let controller = start_controller_with(client.clone(), &ns, &["kubedc"]);
    // kube-dc's controller, simulated, against the real apiserver.
    let (sim_stop, mut sim_stopped) = tokio::sync::oneshot::channel::<()>();
    let sim_client = client.clone();
    let sim_ns = ns.clone();
    let sim = tokio::spawn(async move {
        let mut sim = KubeDcSim::new();
        loop {
            sim.step_with(&sim_client, &sim_ns, jiff::Timestamp::now())
                .await;
            tokio::select! {
                _ = &mut sim_stopped => break,
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
    });

    Api::<KubeDCLoadBalancer>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "KubeDCLoadBalancer",
                "metadata": {"name": "cp"}, "spec": {"externalNetworkType": "cloud"}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let lbs: Api<LoadBalancer> = Api::namespaced(client.clone(), &ns);
    lbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
            "metadata": {"name": "cp"},
            "spec": {"clusterName": "demo", "infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KubeDCLoadBalancer", "name": "cp"}}}))
        .unwrap(),
    )
    .await
    .unwrap();
    let machines: Api<Machine> = Api::namespaced(client.clone(), &ns);
    let m: Machine = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": "cp-m1", "labels": {"cluster.x-k8s.io/cluster-name": "demo",
                                                   "loadbalancer.cluster.x-k8s.io/name": "cp"}},
        "spec": {"clusterName": "demo", "bootstrap": {"dataSecretName": "none"},
                 "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                       "kind": "KubevirtMachine", "name": "cp-m1"}},
    }))
    .unwrap();
    machines.create(&PostParams::default(), &m).await.unwrap();
    machines
        .patch_status(
            "cp-m1",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.11"}]}}),
            ),
        )
        .await
        .unwrap();

    let ready = eventually("LoadBalancer on kube-dc Ready", || async {
        let lb = lbs.get("cp").await.ok()?;
        lb.status.as_ref()?.ready.then_some(lb)
    })
    .await;
    let eip = Api::<EIp>::namespaced(client.clone(), &ns)
        .get("cp-eip")
        .await
        .unwrap();
    let ip = eip.status.unwrap().ip_address.unwrap();
    assert_eq!(ready.status.unwrap().addresses[0].address, ip);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    eventually("cp-ext publishes the EIp address", || async {
        let s = slices.get("cp-ext-ipv4").await.ok()?;
        (s.endpoints.first()?.addresses == vec![ip.clone()]).then_some(())
    })
    .await;
    eventually("the member is in kube-dc's endpoints", || async {
        let e = Api::<k8s_openapi::api::core::v1::Endpoints>::namespaced(client.clone(), &ns)
            .get("cp-lb")
            .await
            .ok()?;
        let subsets = e.subsets?;
        (subsets.first()?.addresses.as_ref()?.first()?.ip == "10.0.0.11").then_some(())
    })
    .await;

    lbs.delete("cp", &DeleteParams::default()).await.unwrap();
    eventually("EIp and Service deleted", || async {
        let eip_gone = Api::<EIp>::namespaced(client.clone(), &ns)
            .get_opt("cp-eip")
            .await
            .ok()?
            .is_none();
        let svc_gone = Api::<Service>::namespaced(client.clone(), &ns)
            .get_opt("cp-lb")
            .await
            .ok()?
            .is_none();
        (eip_gone && svc_gone).then_some(())
    })
    .await;
    let _ = sim_stop.send(());
    let _ = sim.await;
    controller.stop().await;
    Api::<Namespace>::all(client)
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
}

/// The generated install manifests are accepted by a real apiserver (server-side dry run; the
/// Namespace and CRDs are created for real because the dry run of namespaced objects needs them).
#[tokio::test]
#[ignore = "needs a cluster: set KUBECONFIG to a disposable cluster"]
async fn the_generated_manifests_pass_a_server_side_dry_run() {
    use kube::core::{DynamicObject, GroupVersionKind};
    capi_lb::install_crypto_provider();
    let client = Client::try_default().await.unwrap();
    install_crds(&client).await;
    let files = capi_lb::manifests::files().unwrap();
    for (path, text) in files
        .iter()
        .filter(|(p, _)| {
            p.starts_with("rbac") || p.starts_with("manager") || p.starts_with("clusterctl")
        })
        .filter(|(p, _)| {
            p.extension().is_some_and(|e| e == "yaml")
                && !p.ends_with("kustomization.yaml")
                && !p.ends_with("metadata.yaml")
        })
    {
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(text).unwrap();
        for doc in docs {
            let (group, version) = match doc["apiVersion"].as_str().unwrap().split_once('/') {
                Some((g, v)) => (g.to_string(), v.to_string()),
                None => (
                    String::new(),
                    doc["apiVersion"].as_str().unwrap().to_string(),
                ),
            };
            let kind = doc["kind"].as_str().unwrap();
            let gvk = GroupVersionKind::gvk(&group, &version, kind);
            let (resource, caps) = kube::discovery::pinned_kind(&client, &gvk).await.unwrap();
            let name = doc["metadata"]["name"].as_str().unwrap().to_string();
            let api: Api<DynamicObject> = match doc["metadata"]["namespace"].as_str() {
                Some(ns) if caps.scope == kube::discovery::Scope::Namespaced => {
                    Api::namespaced_with(client.clone(), ns, &resource)
                }
                _ => Api::all_with(client.clone(), &resource),
            };
            // The Namespace and CRDs for real, everything else as a dry run.
            let mut params = PatchParams::apply("capi-lb-e2e").force();
            if kind != "Namespace" && kind != "CustomResourceDefinition" {
                params = params.dry_run();
            }
            api.patch(&name, &params, &Patch::Apply(&doc))
                .await
                .unwrap_or_else(|e| panic!("{}: {kind} {name}: {e}", path.display()));
        }
    }
}

/// Two replicas with leader election: one reconciles; when it dies without releasing the lease, the
/// other takes over within the lease duration and reconciles.
#[tokio::test]
#[ignore = "needs a cluster: set KUBECONFIG to a disposable cluster"]
async fn a_standby_replica_takes_over_within_the_lease_duration() {
    use capi_lb::run::LeaderElection;
    use k8s_openapi::api::coordination::v1::Lease;

    capi_lb::install_crypto_provider();
    let client = Client::try_default().await.unwrap();
    install_crds(&client).await;
    let ns = test_namespace(&client).await;
    let replica = |identity: &str| {
        let mut options = capi_lb::run::RunOptions::new(vec!["inmemory".into()]);
        options.namespace = Some(ns.clone());
        options.leader_election = Some(LeaderElection {
            namespace: ns.clone(),
            lease_name: "capi-lb-leader".into(),
            identity: identity.into(),
            duration_seconds: 6,
            grace_seconds: 2,
        });
        let client = client.clone();
        tokio::spawn(async move { run_with_client(client, options, std::future::pending()).await })
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let holder = || async {
        leases
            .get_opt("capi-lb-leader")
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
    };
    let a = replica("replica-a");
    eventually("replica-a leads", || async {
        (holder().await.as_deref() == Some("replica-a")).then_some(())
    })
    .await;
    let b = replica("replica-b");

    // The leader reconciles.
    Api::<InMemoryLoadBalancer>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                "kind": "InMemoryLoadBalancer", "metadata": {"name": "ha"}, "spec": {}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let lbs: Api<LoadBalancer> = Api::namespaced(client.clone(), &ns);
    lbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
            "metadata": {"name": "ha"},
            "spec": {"infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "InMemoryLoadBalancer", "name": "ha"}}}))
        .unwrap(),
    )
    .await
    .unwrap();
    eventually("Ready under replica-a", || async {
        lbs.get("ha").await.ok()?.status?.ready.then_some(())
    })
    .await;
    assert_eq!(
        holder().await.as_deref(),
        Some("replica-a"),
        "the standby did not take over"
    );

    // The leader dies without releasing the lease.
    a.abort();
    let died = Instant::now();
    eventually("replica-b leads", || async {
        (holder().await.as_deref() == Some("replica-b")).then_some(())
    })
    .await;
    let failover = died.elapsed();
    assert!(
        failover <= Duration::from_secs(6 + 5),
        "failover took {failover:?}"
    );
    // And reconciles: a spec change is acted on.
    lbs.patch(
        "ha",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"publication": {"suffix": "-stable"}}})),
    )
    .await
    .unwrap();
    eventually("the new leader reconciles", || async {
        Api::<Service>::namespaced(client.clone(), &ns)
            .get_opt("ha-stable")
            .await
            .ok()?
            .map(|_| ())
    })
    .await;
    b.abort();
    Api::<Namespace>::all(client)
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
}

/// Cluster API and Kamaji integration on a real apiserver: a control-plane LoadBalancer fills an
/// empty `Cluster.spec.controlPlaneEndpoint`, and a Service of capi-lb's load-balancer class gets the
/// provider's address in its ingress (Kamaji's CRDs are installed so the KamajiControlPlane of the
/// templates is accepted).
#[tokio::test]
#[ignore = "needs a cluster: set KUBECONFIG to a disposable cluster (and CAPI_CRDS_DIR / KAMAJI_CRDS_DIR if ../shared is absent)"]
async fn control_plane_endpoint_and_service_class_on_a_real_apiserver() {
    use capi_lb_api::capi::Cluster;
    capi_lb::install_crypto_provider();
    let client = Client::try_default().await.unwrap();
    install_crds(&client).await;
    install_capi_crds(&client).await;
    install_third_party_crds(
        &client,
        "KAMAJI_CRDS_DIR",
        "kamaji",
        &[
            "controlplane.cluster.x-k8s.io_kamajicontrolplanes.yaml",
            "kamaji.clastix.io_tenantcontrolplanes.yaml",
        ],
    )
    .await;
    let ns = test_namespace(&client).await;
    let controller = start_controller(client.clone(), &ns);
    let create = |value: serde_json::Value| {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            let (group, version) = value["apiVersion"]
                .as_str()
                .unwrap()
                .split_once('/')
                .map(|(g, v)| (g.to_string(), v.to_string()))
                .unwrap_or((
                    String::new(),
                    value["apiVersion"].as_str().unwrap().to_string(),
                ));
            let gvk = kube::core::GroupVersionKind::gvk(
                &group,
                &version,
                value["kind"].as_str().unwrap(),
            );
            let (resource, _) = kube::discovery::pinned_kind(&client, &gvk).await.unwrap();
            let api: Api<kube::core::DynamicObject> = Api::namespaced_with(client, &ns, &resource);
            api.create(
                &PostParams::default(),
                &serde_json::from_value(value).unwrap(),
            )
            .await
            .unwrap();
        }
    };
    create(
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                  "metadata": {"name": "demo"}, "spec": {}}),
    )
    .await;
    create(json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "InMemoryLoadBalancer",
                  "metadata": {"name": "cp"}, "spec": {}}))
    .await;
    create(
        json!({"apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
                  "metadata": {"name": "cp"},
                  "spec": {"clusterName": "demo", "controlPlane": {},
                           "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                                 "kind": "InMemoryLoadBalancer", "name": "cp"}}}),
    )
    .await;
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &ns);
    let endpoint = eventually("Cluster.spec.controlPlaneEndpoint set", || async {
        clusters
            .get("demo")
            .await
            .ok()?
            .spec
            .control_plane_endpoint
            .filter(|e| !e.is_empty())
    })
    .await;
    assert_eq!(endpoint.host, format!("cp-ext.{ns}.svc.cluster.local"));
    assert_eq!(endpoint.port, 6443);

    // A Service of capi-lb's class, realised by LoadBalancer "tcp" (default: the same name).
    create(json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "InMemoryLoadBalancer",
                  "metadata": {"name": "tcp"}, "spec": {"addressPools": ["198.51.100.0/24"]}}))
    .await;
    create(
        json!({"apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
                  "metadata": {"name": "tcp"},
                  "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                                 "kind": "InMemoryLoadBalancer", "name": "tcp"}}}),
    )
    .await;
    create(
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "tcp"},
                  "spec": {"type": "LoadBalancer",
                           "loadBalancerClass": "loadbalancer.cluster.x-k8s.io/capi-lb",
                           "ports": [{"name": "kube-apiserver", "port": 6443}]}}),
    )
    .await;
    create(
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                  "metadata": {"name": "tcp-1", "labels": {"kubernetes.io/service-name": "tcp"}},
                  "addressType": "IPv4", "ports": [{"name": "kube-apiserver", "port": 6443}],
                  "endpoints": [{"addresses": ["10.244.0.5"], "conditions": {"ready": true}}]}),
    )
    .await;
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    eventually(
        "the class Service has the provider IP as ingress",
        || async {
            let svc = services.get("tcp").await.ok()?;
            let ip = svc.status?.load_balancer?.ingress?.first()?.ip.clone()?;
            (ip == "198.51.100.1").then_some(())
        },
    )
    .await;
    controller.stop().await;
    Api::<Namespace>::all(client)
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
}
