//! A changed `externalNetworkType` on kube-dc, made before break: kube-dc cannot change an allocated
//! EIp's network, so the provider makes a new EIp and Service on the new network while the old ones
//! serve, switches the LoadBalancer's addresses once the new address is on its Service, and then
//! deletes the old Service and EIp (waiting for kube-dc's finalizer). Through the real reconcilers
//! on the in-memory API, with kube-dc's controller simulated (tests/src/kubedc_sim.rs); the same
//! against a real apiserver is tests/tests/e2e/kubedc_network.rs.

use std::time::Duration;

use capi_lb::sim::world::World;
use capi_lb_api::kubedc::EIp;
use capi_lb_api::{KubeDCLoadBalancer, LoadBalancer};
use capi_lb_tests::kubedc_sim::{EIP_FINALIZER, KubeDcSim};
use capi_lb_tests::*;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::kubedc::{basic, drive, eips, kdc_status, world_with_eips};

/// The names of the EIps and of the LoadBalancer Services, sorted.
async fn made(world: &World) -> (Vec<String>, Vec<String>) {
    let mut eips: Vec<String> = eips(world)
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    eips.sort();
    let mut services: Vec<String> = Api::<Service>::namespaced(world.client(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|s| s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer"))
        .map(ResourceExt::name_any)
        .collect();
    services.sort();
    (eips, services)
}

/// The address of EIp `name`, once kube-dc allocated it.
async fn address_of(world: &World, name: &str) -> Option<String> {
    Api::<EIp>::namespaced(world.client(), NS)
        .get_opt(name)
        .await
        .unwrap()
        .and_then(|e| e.status)
        .filter(|s| s.ready)
        .and_then(|s| s.ip_address)
}

/// The LoadBalancer's addresses, whether it is Ready, and its InfrastructureReady reason.
async fn reported(world: &World) -> (Vec<String>, bool, String) {
    let lb = get_lb(world, "cp").await;
    let status = lb.status.clone().unwrap_or_default();
    (
        status.addresses.iter().map(|a| a.address.clone()).collect(),
        status.ready,
        condition(&lb, "InfrastructureReady").reason,
    )
}

/// Ready on the public network at the old address; kube-dc takes 30 s to allocate an EIp from
/// then on, so that the change can be watched step by step.
async fn serving_on_public() -> (World, KubeDcSim, String) {
    let world = world_with_eips(basic()).await;
    let mut sim = KubeDcSim::new();
    drive(&world, &mut sim, 6, Duration::from_secs(5)).await;
    let old = address_of(&world, "cp-eip").await.unwrap();
    assert_eq!(
        reported(&world).await,
        (vec![old.clone()], true, "Provisioned".into())
    );
    sim.eip_delay = Duration::from_secs(30);
    (world, sim, old)
}

async fn change_network(world: &World, network: &str) {
    merge_patch::<KubeDCLoadBalancer>(
        world,
        "cp",
        json!({"spec": {"externalNetworkType": network}}),
    )
    .await;
}

/// One round of kube-dc's controller and capi-lb's reconciler, 5 s apart.
async fn round(world: &World, sim: &mut KubeDcSim) {
    drive(world, sim, 1, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_changed_network_is_made_before_break() {
    let (world, mut sim, old) = serving_on_public().await;
    change_network(&world, "cloud").await;

    // The new EIp and Service are made beside the old ones, which keep serving and are reported.
    round(&world, &mut sim).await;
    assert_eq!(
        made(&world).await,
        (
            vec!["cp-eip".to_string(), "cp-eip-cloud".to_string()],
            vec!["cp-lb".to_string(), "cp-lb-cloud".to_string()]
        )
    );
    let new_eip = Api::<EIp>::namespaced(world.client(), NS)
        .get("cp-eip-cloud")
        .await
        .unwrap();
    assert_eq!(new_eip.spec.external_network_type.as_deref(), Some("cloud"));
    assert_eq!(
        new_eip.owner_references()[0].kind,
        "KubeDCLoadBalancer",
        "owned like the first"
    );
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "InfrastructureReady");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "ExternalNetworkChanging"),
        "{}",
        c.message
    );
    assert!(
        c.message.contains("moving to the cloud network")
            && c.message
                .contains(&format!("EIp cp-eip keeps serving at {old}")),
        "{}",
        c.message
    );
    assert!(event_reasons(&world).contains(&"ExternalNetworkChanging".to_string()));
    assert_eq!(
        kdc_status(&world).await.address.as_deref(),
        Some(old.as_str())
    );

    // A port added meanwhile is on both Services: the old one serves it until the switch.
    merge_patch::<LoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"ports": [{"name": "api", "port": 6443},
                                  {"name": "konnectivity", "port": 8132}]}}),
    )
    .await;
    round(&world, &mut sim).await;
    for name in ["cp-lb", "cp-lb-cloud"] {
        let ports: Vec<i32> = service(&world, name)
            .await
            .unwrap()
            .spec
            .unwrap()
            .ports
            .unwrap()
            .iter()
            .map(|p| p.port)
            .collect();
        assert_eq!(ports, vec![6443, 8132], "{name}");
    }
    assert_eq!(
        sim.rows[&format!("{old}:8132")],
        vec!["10.0.0.11:8132", "10.0.0.12:8132"],
        "the old address serves the new port"
    );

    // Until kube-dc has put the new address on the new Service, only the old one is reported, and
    // the LoadBalancer never stops being Ready; the members are in both Services' endpoints.
    let mut new = None;
    for _ in 0..12 {
        round(&world, &mut sim).await;
        let (addresses, ready, _) = reported(&world).await;
        assert!(ready, "Ready throughout");
        let allocated = address_of(&world, "cp-eip-cloud").await;
        let programmed = service(&world, "cp-lb-cloud")
            .await
            .and_then(|s| s.status?.load_balancer?.ingress)
            .is_some_and(|i| !i.is_empty());
        if addresses != vec![old.clone()] {
            assert!(
                programmed,
                "switched only once the new Service has its address"
            );
            assert_eq!(addresses, vec![allocated.clone().unwrap()]);
            new = allocated;
            break;
        }
        if allocated.is_some() {
            assert!(
                Api::<Endpoints>::namespaced(world.client(), NS)
                    .get("cp-lb-cloud")
                    .await
                    .unwrap()
                    .subsets
                    .is_some_and(|s| !s.is_empty()),
                "the new Service has the members before it serves"
            );
        }
    }
    let new = new.expect("switched to the new address");
    assert_ne!(new, old);
    assert_eq!(
        slices(&world, "cp-ext").await["cp-ext-ipv4"],
        vec![new.clone()],
        "the stable name follows"
    );

    // The old Service goes first, then the old EIp once kube-dc released it and removed its
    // finalizer; then the condition is back to Provisioned.
    for _ in 0..6 {
        round(&world, &mut sim).await;
    }
    assert_eq!(
        made(&world).await,
        (
            vec!["cp-eip-cloud".to_string()],
            vec!["cp-lb-cloud".to_string()]
        )
    );
    assert_eq!(
        sim.released,
        vec!["cp-eip"],
        "kube-dc's finalizer was waited for"
    );
    assert!(
        Api::<Endpoints>::namespaced(world.client(), NS)
            .get_opt("cp-lb")
            .await
            .unwrap()
            .is_none(),
        "the old Service's endpoints are gone too"
    );
    assert_eq!(
        reported(&world).await,
        (vec![new.clone()], true, "Provisioned".into())
    );
    let status = kdc_status(&world).await;
    assert_eq!(
        (status.eip_name.as_deref(), status.service_name.as_deref()),
        (Some("cp-eip-cloud"), Some("cp-lb-cloud"))
    );
    assert_eq!(
        sim.rows[&format!("{new}:6443")],
        vec!["10.0.0.11:6443", "10.0.0.12:6443"]
    );
    assert_eq!(
        sim.rows[&format!("{new}:8132")],
        vec!["10.0.0.11:8132", "10.0.0.12:8132"]
    );
    assert!(sim.refused.is_empty(), "{:?}", sim.refused);
    assert!(
        !warned(&world, "LoadBalancerLost"),
        "a new realisation made before break is no loss"
    );

    // Steady: nothing more is written.
    let writes = world.api.stats.writes_excluding_events();
    round(&world, &mut sim).await;
    assert_eq!(world.api.stats.writes_excluding_events(), writes);
}

/// Back to `public` before the cloud address is ready: the old realisation is the wanted one again,
/// the half-made one is deleted, and the address never changes.
#[tokio::test]
async fn a_change_back_during_the_swap_keeps_the_old_address() {
    let (world, mut sim, old) = serving_on_public().await;
    change_network(&world, "cloud").await;
    round(&world, &mut sim).await;
    round(&world, &mut sim).await;
    assert_eq!(made(&world).await.0, vec!["cp-eip", "cp-eip-cloud"]);
    change_network(&world, "public").await;
    for _ in 0..6 {
        round(&world, &mut sim).await;
        assert_eq!(reported(&world).await.0, vec![old.clone()]);
    }
    assert_eq!(
        made(&world).await,
        (vec!["cp-eip".to_string()], vec!["cp-lb".to_string()])
    );
    assert_eq!(sim.released, vec!["cp-eip-cloud"]);
    assert_eq!(
        reported(&world).await,
        (vec![old], true, "Provisioned".into())
    );

    // And a change back after a completed swap: the first names are free again or taken by what
    // is still being deleted; either way a third realisation serves, made before break.
    sim.eip_delay = Duration::ZERO;
    change_network(&world, "cloud").await;
    for _ in 0..8 {
        round(&world, &mut sim).await;
        assert!(reported(&world).await.1);
    }
    change_network(&world, "public").await;
    for _ in 0..8 {
        round(&world, &mut sim).await;
        assert!(reported(&world).await.1, "Ready throughout");
    }
    let (eips, services) = made(&world).await;
    assert_eq!(
        (eips.len(), services.len()),
        (1, 1),
        "{eips:?} {services:?}"
    );
    let last = address_of(&world, &eips[0]).await.unwrap();
    assert!(last.starts_with("91.224."), "public again: {last}");
    assert_eq!(
        reported(&world).await,
        (vec![last], true, "Provisioned".into())
    );
    assert!(sim.refused.is_empty(), "{:?}", sim.refused);
}

/// A controller restarted in the middle of the swap (with the KubeDCLoadBalancer's status lost, as
/// after `clusterctl move`) finds both realisations by their labels, adopts them, and finishes:
/// no third EIp, nothing left behind.
#[tokio::test]
async fn a_restart_during_the_swap_adopts_both_and_finishes() {
    let (world, mut sim, old) = serving_on_public().await;
    change_network(&world, "cloud").await;
    round(&world, &mut sim).await;
    let before: Vec<(String, Option<String>)> = eips(&world)
        .await
        .iter()
        .map(|e| (e.name_any(), e.uid()))
        .collect();
    Api::<KubeDCLoadBalancer>::namespaced(world.client(), NS)
        .patch_status(
            "cp",
            &Default::default(),
            &kube::api::Patch::Merge(json!({"status": null})),
        )
        .await
        .unwrap();
    let restarted = world.restart();
    round(&restarted, &mut sim).await;
    assert_eq!(reported(&restarted).await.0, vec![old.clone()]);
    let adopted: Vec<(String, Option<String>)> = eips(&restarted)
        .await
        .iter()
        .map(|e| (e.name_any(), e.uid()))
        .collect();
    assert_eq!(adopted, before, "the same EIps, adopted");
    for _ in 0..14 {
        round(&restarted, &mut sim).await;
        assert!(reported(&restarted).await.1);
    }
    let new = address_of(&restarted, "cp-eip-cloud").await.unwrap();
    assert_eq!(
        made(&restarted).await,
        (
            vec!["cp-eip-cloud".to_string()],
            vec!["cp-lb-cloud".to_string()]
        )
    );
    assert_eq!(
        reported(&restarted).await,
        (vec![new], true, "Provisioned".into())
    );
    assert!(!warned(&restarted, "LoadBalancerLost"));
    // Nothing of the old one is left, not even kube-dc's finalizer on a half-deleted EIp.
    assert!(
        eips(&restarted)
            .await
            .iter()
            .all(|e| e.metadata.deletion_timestamp.is_none()
                || !e.finalizers().iter().any(|f| f == EIP_FINALIZER))
    );
}

/// The way out of `EIpDeleting` the condition names: a deleted EIp that kube-dc holds for its
/// Service still serves, so a change of network replaces it before break too, and once its Service
/// is gone kube-dc releases it.
#[tokio::test]
async fn a_held_eip_is_left_without_a_break_by_changing_the_network() {
    let (world, mut sim, old) = serving_on_public().await;
    Api::<EIp>::namespaced(world.client(), NS)
        .delete("cp-eip", &Default::default())
        .await
        .unwrap();
    round(&world, &mut sim).await;
    assert_eq!(
        reported(&world).await,
        (vec![old.clone()], true, "EIpDeleting".into())
    );
    change_network(&world, "cloud").await;
    let mut switched = false;
    for _ in 0..16 {
        round(&world, &mut sim).await;
        let (addresses, ready, _) = reported(&world).await;
        assert!(ready, "Ready throughout");
        switched |= addresses != vec![old.clone()];
        if !switched {
            assert_eq!(addresses, vec![old.clone()]);
        }
    }
    assert!(switched);
    let new = address_of(&world, "cp-eip-cloud").await.unwrap();
    assert_eq!(
        reported(&world).await,
        (vec![new], true, "Provisioned".into())
    );
    assert_eq!(
        made(&world).await,
        (
            vec!["cp-eip-cloud".to_string()],
            vec!["cp-lb-cloud".to_string()]
        )
    );
    assert_eq!(sim.released, vec!["cp-eip"]);
}
