//! Uninstalling capi-lb keeps the clusters behind it reachable (docs/operations.md, Uninstall), on
//! the real apiserver with the harness's MetalLB: a LoadBalancer of the Service provider whose
//! Cluster names it (so its Machines carry capi-lb's deletion hooks) serves at a MetalLB address;
//! the chart is installed with `helm install`; then the controller stops, `helm uninstall` removes
//! the release, `capi-lb uninstall` (scoped to the test's namespace, as `--namespace` scopes it, so
//! that the other tests' objects are untouched) lets go, and the LoadBalancer and its
//! ServiceLoadBalancer are deleted as deleting the CRDs deletes them. The Service, its MetalLB
//! address, the `-ext` Service and its EndpointSlice are still there after the garbage collector had
//! time to act, and no Machine carries a capi-lb annotation. Without `capi-lb uninstall` the deletion
//! waits on the finalizers, and once they are gone the garbage collector takes the Service (shown
//! first, on a second LoadBalancer of the same namespace).

use std::path::Path;
use std::time::Duration;

use capi_lb::install::uninstall::{Options, uninstall};
use capi_lb_api::LoadBalancer;
use capi_lb_api::capi::Machine;
use capi_lb_api::target::TargetKeys;
use capi_lb_tests::k8s::{
    TestNs, capi_cluster_naming, cluster, eventually, install_capi_crds, load_balancer, machine,
    metallb, set_machine_ip, unique_name, wait_gone, wait_ready,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

fn on_service(name: &str, class: &str) -> (Value, Value) {
    let infra = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "ServiceLoadBalancer", "metadata": {"name": name},
        "spec": {"loadBalancerClass": class, "allocateLoadBalancerNodePorts": false}});
    let mut lb = load_balancer(
        name,
        name,
        json!({"clusterName": "demo", "drainSeconds": 1}),
    );
    lb["spec"]["infrastructureRef"]["kind"] = json!("ServiceLoadBalancer");
    (infra, lb)
}

/// `helm ARGS` against this test's instance, with a helm home of its own.
async fn helm(home: &Path, args: &[&str]) {
    capi_lb_tests::k8s::helm_on(&cluster().kubeconfig, home, args).await;
}

fn capi_lb_annotations(m: &Machine) -> Vec<String> {
    m.annotations()
        .iter()
        .filter(|(k, v)| capi_lb::install::uninstall::is_ours(k, v))
        .map(|(k, _)| k.clone())
        .collect()
}

#[tokio::test]
async fn helm_uninstall_then_capi_lb_uninstall_keeps_the_metallb_service_and_releases_the_machines()
{
    let t = TestNs::new("uninstall").await;
    install_capi_crds(&t.client).await;
    let class = metallb().class.clone();
    let home = std::env::temp_dir().join(unique_name("capi-lb-e2e-uninstall-helm"));
    let release = format!("capi-lb-{}", t.ns);
    let chart = capi_lb_tests::repo("charts/capi-lb");
    helm(
        &home,
        &[
            "install",
            &release,
            chart.to_str().unwrap(),
            "--namespace",
            &t.ns,
            "--set",
            "providers={service}",
            "--set",
            &format!("watchNamespace={}", t.ns),
        ],
    )
    .await;
    let installed =
        capi_lb_tests::k8s::HelmRelease::new(&release, &t.ns, &cluster().kubeconfig, &home);

    t.create(capi_cluster_naming("demo", "kept")).await;
    let (infra, lb) = on_service("kept", &class);
    t.create(infra).await;
    t.create(lb).await;
    // A second LoadBalancer, not named by the Cluster: the control (no uninstall for it).
    let (infra, lb) = on_service("control", &class);
    t.create(infra).await;
    t.create(lb).await;
    for (name, lb, ip) in [
        ("m1", "kept", "10.0.0.31"),
        ("m2", "kept", "10.0.0.32"),
        ("c1", "control", "10.0.0.33"),
    ] {
        t.create(machine(
            name,
            json!({"loadbalancer.cluster.x-k8s.io/name": lb}),
        ))
        .await;
        set_machine_ip(&t, name, ip).await;
    }
    let controller = t.spawn(t.options(&["service"]));
    let ready = wait_ready(&t, "kept").await;
    let address = ready.status.as_ref().unwrap().addresses[0].address.clone();
    wait_ready(&t, "control").await;
    let machines = t.api::<Machine>();
    let keys = TargetKeys::new(&t.ns, "kept");
    eventually("capi-lb's hooks on m1 and m2", || async {
        let mut held = 0;
        for m in ["m1", "m2"] {
            let m = machines.get(m).await.ok()?;
            held += usize::from(m.annotations().contains_key(&keys.pre_drain));
        }
        (held == 2).then_some(())
    })
    .await;

    // The controller goes, then the release.
    controller.stop().await;
    installed.uninstall().await;

    // The control: deleted with no controller, it waits on capi-lb's finalizer; with the finalizers
    // removed by hand (the old uninstall guide's step), the garbage collector takes its Service:
    // what deleting the CRDs does to every load balancer whose ownerReferences stay.
    let lbs = t.api::<LoadBalancer>();
    let infras = capi_lb_tests::k8s::dynamic_api(
        &t.client,
        Some(&t.ns),
        &json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "ServiceLoadBalancer"}),
    )
    .await
    .unwrap();
    lbs.delete("control", &DeleteParams::default())
        .await
        .unwrap();
    infras
        .delete("control", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        lbs.get_opt("control").await.unwrap().is_some(),
        "held by its finalizer with no controller"
    );
    let unfinalize = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    lbs.patch("control", &PatchParams::default(), &unfinalize)
        .await
        .unwrap();
    infras
        .patch("control", &PatchParams::default(), &unfinalize)
        .await
        .unwrap();
    wait_gone(&lbs, "control").await;
    let services = t.api::<Service>();
    eventually("the control's Service collected", || async {
        services
            .get_opt("control-lb")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;

    // capi-lb uninstall, as docs/operations.md gives it (scoped to this namespace).
    let cli = <capi_lb::cli::Cli as clap::Parser>::try_parse_from([
        "capi-lb",
        "uninstall",
        "--namespace",
        &t.ns,
        "--lease-namespace",
        &t.ns,
    ])
    .unwrap();
    let options = match cli.command {
        Some(capi_lb::cli::Command::Uninstall {
            dry_run,
            force,
            lease_namespace,
            lease_name,
            namespace,
        }) => Options {
            dry_run,
            force,
            lease: (lease_namespace, lease_name),
            namespace,
        },
        other => panic!("{other:?}"),
    };
    let report = uninstall(t.client.clone(), &options).await.unwrap();
    let said = report.changes.join("\n");
    for expected in [
        "Service ".to_string() + &t.ns + "/kept-lb: kept",
        "Service ".to_string() + &t.ns + "/kept-ext: kept",
        "Machine ".to_string() + &t.ns + "/m1: ",
        "LoadBalancer ".to_string() + &t.ns + "/kept: capi-lb's finalizer removed",
        "ServiceLoadBalancer ".to_string() + &t.ns + "/kept: capi-lb's finalizer removed",
    ] {
        assert!(said.contains(&expected), "{expected} not in:\n{said}");
    }
    // Run again: nothing left to do.
    let again = uninstall(t.client.clone(), &options).await.unwrap();
    assert!(again.changes.is_empty(), "{:?}", again.changes);

    // Deleted as deleting the CRDs deletes them: nothing holds them now.
    lbs.delete("kept", &DeleteParams::default()).await.unwrap();
    infras
        .delete("kept", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&lbs, "kept").await;
    // The garbage collector had its time: kept's Service serves on, with MetalLB's address.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let service = services
        .get("kept-lb")
        .await
        .expect("the Service provider's Service stays");
    assert!(service.owner_references().is_empty());
    let ingress: Vec<String> = service
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|l| l.ingress)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|i| i.ip)
        .collect();
    assert_eq!(ingress, vec![address.clone()], "MetalLB's address stays");
    services
        .get("kept-ext")
        .await
        .expect("the -ext Service stays");
    let slices = t
        .api::<EndpointSlice>()
        .list(&ListParams::default().labels("kubernetes.io/service-name=kept-ext"))
        .await
        .unwrap();
    let published: Vec<String> = slices
        .items
        .iter()
        .flat_map(|s| s.endpoints.iter().flat_map(|e| e.addresses.clone()))
        .collect();
    assert_eq!(
        published,
        vec![address],
        "the -ext name resolves to the address"
    );
    for name in ["m1", "m2", "c1"] {
        let m = machines.get(name).await.unwrap();
        assert!(
            capi_lb_annotations(&m).is_empty(),
            "{name}: {:?}",
            m.annotations()
        );
    }
    // Free MetalLB's address for the other tests.
    let _ = services.delete("kept-lb", &DeleteParams::default()).await;
    t.finish().await;
}
