//! A changed `externalNetworkType` on kube-dc against a real apiserver: kube-dc's CRDs installed,
//! kube-dc's controller simulated (tests/src/kubedc_sim.rs) and its webhook's refusal of a changed
//! network annotation enforced by the apiserver (tests/src/kubedc_webhook.rs). The LoadBalancer is
//! sampled throughout: it must never stop being Ready nor report anything but the old address until
//! the new one is on its Service, then only the new one. Also an EIp deleted while kube-dc holds it
//! for its Service, reported as `EIpDeleting`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use capi_lb_api::capi::Machine;
use capi_lb_api::kubedc::EIp;
use capi_lb_api::{KubeDCLoadBalancer, LoadBalancer};
use capi_lb_tests::k8s::{
    TestNs, condition, eventually, install_capi_crds, install_kube_dc_crds, load_balancer, machine,
    merge, release_machine, set_machine_ip, wait_for, wait_gone, wait_ready, warning_event,
};
use capi_lb_tests::kubedc_sim::{KubeDcSim, RunningSim, make_project};
use capi_lb_tests::kubedc_webhook::{self, NETWORK_ANNOTATION, REFUSAL};
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

/// What the LoadBalancer reported, sampled every 100 ms: (Ready, addresses).
type Samples = Arc<Mutex<Vec<(bool, Vec<String>)>>>;

/// Sample LoadBalancer `cp`'s readiness and addresses until the returned sender is dropped.
fn sample(t: &TestNs) -> (Samples, tokio::sync::oneshot::Sender<()>) {
    let samples: Samples = Arc::default();
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let (api, out) = (t.api::<LoadBalancer>(), samples.clone());
    tokio::spawn(async move {
        loop {
            if let Ok(lb) = api.get("cp").await {
                let status = lb.status.unwrap_or_default();
                let addresses = status.addresses.iter().map(|a| a.address.clone()).collect();
                out.lock().unwrap().push((status.ready, addresses));
            }
            tokio::select! {
                _ = &mut stopped => break,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    });
    (samples, stop)
}

/// A kube-dc project namespace with the webhook's refusal, the simulated controller (allocating
/// an EIp `eip_delay` after its creation), and LoadBalancer `cp` on a public KubeDCLoadBalancer
/// with one Machine. Returns the simulator.
async fn kube_dc(t: &TestNs, eip_delay: Duration) -> RunningSim {
    install_capi_crds(&t.client).await;
    install_kube_dc_crds(&t.client).await;
    kubedc_webhook::install(&t.client).await;
    make_project(&t.client, &t.ns).await;
    let mut sim = KubeDcSim::new();
    sim.eip_delay = eip_delay;
    let sim = sim.spawn(t.client.clone(), t.ns.clone());
    t.create(json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "KubeDCLoadBalancer",
                    "metadata": {"name": "cp"}, "spec": {"externalNetworkType": "public"}}))
        .await;
    let mut lb = load_balancer("cp", "cp", json!({"clusterName": "demo"}));
    lb["spec"]["infrastructureRef"]["kind"] = json!("KubeDCLoadBalancer");
    t.create(lb).await;
    t.create(machine(
        "cp-m1",
        json!({"loadbalancer.cluster.x-k8s.io/name": "cp"}),
    ))
    .await;
    set_machine_ip(t, "cp-m1", "10.0.0.11").await;
    sim
}

async fn address_of(t: &TestNs, eip: &str) -> Option<String> {
    t.api::<EIp>()
        .get_opt(eip)
        .await
        .unwrap()
        .and_then(|e| e.status)
        .filter(|s| s.ready)
        .and_then(|s| s.ip_address)
}

async fn set_network(t: &TestNs, network: &str) {
    merge(
        &t.api::<KubeDCLoadBalancer>(),
        "cp",
        json!({"spec": {"externalNetworkType": network}}),
    )
    .await;
}

/// Wait until LoadBalancer `cp` reports exactly `addresses` with `InfrastructureReady` `reason`.
async fn wait_reported(t: &TestNs, addresses: &[String], reason: &str) {
    wait_for(
        &t.api::<LoadBalancer>(),
        "cp",
        &format!("cp at {addresses:?}, {reason}"),
        |lb| {
            lb.is_some_and(|lb| {
                let status = lb.status.clone().unwrap_or_default();
                let got: Vec<String> = status.addresses.iter().map(|a| a.address.clone()).collect();
                got == addresses
                    && condition(lb, "InfrastructureReady") == Some(("True".into(), reason.into()))
            })
        },
    )
    .await;
}

/// Every EIp of `t` as (name, UID).
async fn eips(t: &TestNs) -> Vec<(String, Option<String>)> {
    t.api::<EIp>()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|e| (e.name_any(), e.uid()))
        .collect()
}

async fn clean_up(t: TestNs, sim: RunningSim) {
    let lbs = t.api::<LoadBalancer>();
    lbs.delete("cp", &DeleteParams::default()).await.unwrap();
    wait_gone(&lbs, "cp").await;
    sim.stop().await;
    t.api::<Machine>()
        .delete("cp-m1", &DeleteParams::default())
        .await
        .unwrap();
    release_machine(&t, "cp-m1").await;
    t.finish().await;
}

/// public -> cloud with the controller killed in the middle of the swap and started again: the old
/// address is reported until the new one is on its Service, then only the new one; the old Service
/// and EIp go (kube-dc's finalizer waited for); kube-dc's webhook refused nothing capi-lb did.
#[tokio::test]
async fn a_changed_network_on_kube_dc_is_made_before_break_across_a_restart() {
    let mut t = TestNs::new("e2e-kdc-net").await;
    let sim = kube_dc(&t, Duration::from_secs(4)).await;
    let first = t.spawn(t.options(&["kubedc"]));
    wait_ready(&t, "cp").await;
    let old = address_of(&t, "cp-eip").await.unwrap();
    wait_reported(&t, std::slice::from_ref(&old), "Provisioned").await;

    // What kube-dc's webhook refuses, the apiserver refuses here: a network annotation changed on
    // a Service that has its address.
    let refused = t
        .api::<Service>()
        .patch(
            "cp-lb",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {NETWORK_ANNOTATION: "cloud"}}})),
        )
        .await
        .expect_err("kube-dc's webhook refuses a changed network on an allocated Service");
    assert!(refused.to_string().contains(REFUSAL), "{refused}");

    let (samples, stop_sampling) = sample(&t);
    set_network(&t, "cloud").await;
    // The new EIp and Service are made while the old ones serve; the controller dies then.
    eventually("the new EIp and Service", || async {
        let eip = t.api::<EIp>().get_opt("cp-eip-cloud").await.unwrap();
        let service = t.api::<Service>().get_opt("cp-lb-cloud").await.unwrap();
        (eip.is_some() && service.is_some()).then_some(())
    })
    .await;
    first.abort();
    let eips_before = eips(&t).await;
    t.start(t.options(&["kubedc"]));

    let new = eventually("the new EIp's address", || async {
        address_of(&t, "cp-eip-cloud").await
    })
    .await;
    wait_reported(&t, std::slice::from_ref(&new), "Provisioned").await;
    wait_gone(&t.api::<Service>(), "cp-lb").await;
    wait_gone(&t.api::<EIp>(), "cp-eip").await;
    drop(stop_sampling);

    // Adopted, not duplicated: the restarted controller made no third EIp.
    let eips_after = eips(&t).await;
    assert!(
        eips_after.iter().all(|e| eips_before.contains(e)),
        "{eips_before:?} -> {eips_after:?}"
    );
    // Make before break: Ready throughout, the old address alone, then the new one alone.
    let seen = samples.lock().unwrap().clone();
    assert!(seen.len() > 10, "{} samples", seen.len());
    assert!(seen.iter().all(|(ready, _)| *ready), "{seen:?}");
    let switch = seen
        .iter()
        .position(|(_, a)| *a != vec![old.clone()])
        .unwrap_or(seen.len());
    assert!(
        seen[switch..].iter().all(|(_, a)| *a == vec![new.clone()]),
        "{seen:?}"
    );
    assert!(switch > 0, "the old address was reported during the swap");
    clean_up(t, sim).await;
}

/// public -> cloud -> public before the cloud address is allocated: the half-made EIp and Service
/// are deleted, the address never changes.
#[tokio::test]
async fn a_network_changed_back_during_the_swap_keeps_the_address() {
    let mut t = TestNs::new("e2e-kdc-back").await;
    let sim = kube_dc(&t, Duration::from_secs(6)).await;
    t.start(t.options(&["kubedc"]));
    wait_ready(&t, "cp").await;
    let old = address_of(&t, "cp-eip").await.unwrap();
    wait_reported(&t, std::slice::from_ref(&old), "Provisioned").await;

    let (samples, stop_sampling) = sample(&t);
    set_network(&t, "cloud").await;
    wait_reported(&t, std::slice::from_ref(&old), "ExternalNetworkChanging").await;
    assert!(
        t.api::<Service>()
            .get_opt("cp-lb-cloud")
            .await
            .unwrap()
            .is_some()
    );
    set_network(&t, "public").await;
    wait_gone(&t.api::<Service>(), "cp-lb-cloud").await;
    wait_gone(&t.api::<EIp>(), "cp-eip-cloud").await;
    wait_reported(&t, std::slice::from_ref(&old), "Provisioned").await;
    drop(stop_sampling);
    let seen = samples.lock().unwrap().clone();
    assert!(
        seen.iter().all(|s| *s == (true, vec![old.clone()])),
        "{seen:?}"
    );
    assert_eq!(
        t.api::<EIp>()
            .get("cp-eip")
            .await
            .unwrap()
            .status
            .unwrap()
            .ip_address,
        Some(old)
    );
    clean_up(t, sim).await;
}

/// An EIp of capi-lb's deleted while its Service is bound: kube-dc holds it (finalizer, owners) and
/// it still serves, which is said (`EIpDeleting`, True, with a Warning Event); deleting the
/// LoadBalancer deletes the Service, and kube-dc then releases the EIp.
#[tokio::test]
async fn a_deleted_eip_kube_dc_holds_is_reported() {
    let mut t = TestNs::new("e2e-kdc-held").await;
    let sim = kube_dc(&t, Duration::ZERO).await;
    t.start(t.options(&["kubedc"]));
    wait_ready(&t, "cp").await;
    let old = address_of(&t, "cp-eip").await.unwrap();
    t.api::<EIp>()
        .delete("cp-eip", &DeleteParams::default())
        .await
        .unwrap();
    wait_reported(&t, std::slice::from_ref(&old), "EIpDeleting").await;
    let note = warning_event(&t, "EIpDeleting").await;
    assert!(
        note.contains("kube-dc keeps it while Service cp-lb is bound"),
        "{note}"
    );
    let held = t.api::<EIp>().get("cp-eip").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    assert_eq!(held.status.unwrap().ip_address, Some(old));
    clean_up(t, sim).await;
}
