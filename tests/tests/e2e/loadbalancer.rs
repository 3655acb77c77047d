//! End-to-end tests on a real Kubernetes control plane (`tests/k8s/harness.sh`, started on first use,
//! or the cluster in `CAPI_LB_E2E_KUBECONFIG`): the controller runs in this process as capi-lb's
//! ServiceAccount (so the real authorizer checks the generated RBAC; a refused request fails the
//! test) with a resync of one hour (so only watch triggers drive it), and each test asserts on the
//! real objects in its own namespace.

use std::time::{Duration, Instant};

use capi_lb::run::LeaderElection;
use capi_lb_api::capi::{Cluster, Machine};
use capi_lb_api::target::TargetKeys;
use capi_lb_api::{InMemoryLoadBalancer, LoadBalancer};
use capi_lb_tests::k8s::{
    TestNs, capi_cluster, condition, cp_cluster, eventually, in_memory, install_capi_crds,
    install_kube_dc_crds, install_third_party_crds, load_balancer, machine, release_machine,
    set_machine_ip, unique_name, wait_for, wait_gone, wait_ready,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn lb_machine(name: &str, lb: &str) -> Value {
    machine(name, json!({"loadbalancer.cluster.x-k8s.io/name": lb}))
}

/// Create a Machine selected by LoadBalancer `lb` and give it an InternalIP.
async fn create_machine(t: &TestNs, name: &str, lb: &str, ip: &str) {
    t.create(lb_machine(name, lb)).await;
    set_machine_ip(t, name, ip).await;
}

async fn target_state(t: &TestNs, lb: &str, machine: &str) -> Option<String> {
    let key = TargetKeys::new(&t.ns, lb).state;
    t.api::<Machine>()
        .get_opt(machine)
        .await
        .unwrap()
        .and_then(|m| m.annotations().get(&key).cloned())
}

async fn wait_target_state(t: &TestNs, lb: &str, machine: &str, state: &str) {
    eventually(&format!("{machine} {state} in {lb}"), || async {
        (target_state(t, lb, machine).await.as_deref() == Some(state)).then_some(())
    })
    .await;
}

async fn wait_slice_addresses(t: &TestNs, slice: &str, addresses: &[&str]) -> EndpointSlice {
    let want: Vec<String> = addresses.iter().map(|a| a.to_string()).collect();
    wait_for(
        &t.api::<EndpointSlice>(),
        slice,
        &format!("{slice} with {addresses:?}"),
        |s| {
            s.is_some_and(|s| {
                let mut got: Vec<String> = s
                    .endpoints
                    .iter()
                    .flat_map(|e| e.addresses.clone())
                    .collect();
                got.sort();
                got == want
            })
        },
    )
    .await
    .unwrap()
}

async fn delete_lb_and_wait(t: &TestNs, name: &str) {
    let lbs = t.api::<LoadBalancer>();
    lbs.delete(name, &DeleteParams::default()).await.unwrap();
    wait_gone(&lbs, name).await;
}

#[tokio::test]
async fn a_load_balancer_goes_ready_publishes_follows_changes_and_cleans_up() {
    let mut t = TestNs::new("e2e-basic").await;
    t.start(t.options(&["inmemory"]));
    t.create(in_memory(
        "e2e",
        json!({"addressPools": ["203.0.113.0/24"], "provisioningDelaySeconds": 2}),
    ))
    .await;
    t.create(load_balancer("e2e", "e2e", json!({}))).await;

    // Ready, with the defaults the apiserver applied from the schema.
    let ready = wait_ready(&t, "e2e").await;
    assert_eq!(ready.spec.ports[0].port, 6443);
    let status = ready.status.unwrap();
    assert_eq!(
        status.endpoint.unwrap().host,
        format!("e2e-ext.{}.svc.cluster.local", t.ns)
    );
    let services = t.api::<Service>();
    let svc = services.get("e2e-ext").await.unwrap();
    assert_eq!(svc.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    let slice = wait_slice_addresses(&t, "e2e-ext-ipv4", &["203.0.113.1"]).await;

    // An address change reaches the slice in place.
    t.api::<InMemoryLoadBalancer>()
        .patch(
            "e2e",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"addressPools": ["198.51.100.0/24"]}})),
        )
        .await
        .unwrap();
    let updated = wait_slice_addresses(&t, "e2e-ext-ipv4", &["198.51.100.1"]).await;
    assert_eq!(updated.uid(), slice.uid(), "the slice was replaced");

    // Invalid input is refused by the apiserver with the schema's message.
    let err = t
        .api::<LoadBalancer>()
        .create(
            &PostParams::default(),
            &serde_json::from_value(load_balancer(&"a".repeat(60), "x", json!({}))).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("must be a DNS label"), "{err}");

    // Deletion removes the published objects, then the LoadBalancer; the garbage collector of the
    // real controller manager takes the EndpointSlices with their Service.
    delete_lb_and_wait(&t, "e2e").await;
    assert!(services.get_opt("e2e-ext").await.unwrap().is_none());
    eventually("the -ext EndpointSlices collected", || async {
        t.api::<EndpointSlice>()
            .list(&ListParams::default().labels("kubernetes.io/service-name=e2e-ext"))
            .await
            .unwrap()
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    // The infrastructure object keeps the LoadBalancer's owner reference (its finalizer is
    // released after the provider's cleanup), so the garbage collector deletes it too.
    wait_gone(&t.api::<InMemoryLoadBalancer>(), "e2e").await;
    t.finish().await;
}

#[tokio::test]
async fn a_hand_made_ext_service_is_left_alone() {
    let mut t = TestNs::new("e2e-conflict").await;
    let services = t.api::<Service>();
    let manual = t
        .create(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "mine-ext"},
                       "spec": {"clusterIP": "None", "ports": [{"port": 2379, "targetPort": 2379}]}}))
        .await;
    t.start(t.options(&["inmemory"]));
    t.create(in_memory("mine", json!({}))).await;
    t.create(load_balancer("mine", "mine", json!({}))).await;
    wait_for(&t.api::<LoadBalancer>(), "mine", "NameConflict", |lb| {
        lb.and_then(|lb| condition(lb, "EndpointPublished"))
            .is_some_and(|(_, reason)| reason == "NameConflict")
    })
    .await;
    let after = services.get("mine-ext").await.unwrap();
    assert_eq!(after.resource_version(), manual.resource_version());
    delete_lb_and_wait(&t, "mine").await;
    let after = services.get("mine-ext").await.unwrap();
    assert_eq!(after.resource_version(), manual.resource_version());
    t.finish().await;
}

#[tokio::test]
async fn a_rolling_machine_replacement_drains_before_the_hooks_are_released() {
    let mut t = TestNs::new("e2e-rolling").await;
    install_capi_crds(&t.client).await;
    t.start(t.options(&["inmemory"]));
    let keys = TargetKeys::new(&t.ns, "cp");
    let machines = t.api::<Machine>();
    t.create(in_memory("cp", json!({}))).await;
    t.create(load_balancer(
        "cp",
        "cp",
        json!({"clusterName": "demo", "drainSeconds": 5}),
    ))
    .await;
    create_machine(&t, "cp-old", "cp", "10.0.0.11").await;
    wait_target_state(&t, "cp", "cp-old", "active").await;
    create_machine(&t, "cp-new", "cp", "10.0.0.21").await;
    wait_target_state(&t, "cp", "cp-new", "active").await;

    machines
        .delete("cp-old", &DeleteParams::default())
        .await
        .unwrap();
    wait_target_state(&t, "cp", "cp-old", "removing").await;
    let drain_seen = Instant::now();
    let m = machines.get("cp-old").await.unwrap();
    assert!(m.annotations().contains_key(&keys.pre_drain));
    assert!(m.annotations().contains_key(&keys.pre_terminate));
    // Cluster API would wait for the hooks; they go once the member is removed.
    wait_for(&machines, "cp-old", "hooks released", |m| {
        m.is_some_and(|m| {
            let a = m.annotations();
            !a.contains_key(&keys.pre_drain) && !a.contains_key(&keys.pre_terminate)
        })
    })
    .await;
    assert!(
        drain_seen.elapsed() >= Duration::from_secs(4),
        "released after {:?}, before the drain time",
        drain_seen.elapsed()
    );
    assert_eq!(
        target_state(&t, "cp", "cp-old").await.as_deref(),
        Some("removed")
    );
    release_machine(&t, "cp-old").await;
    wait_for(
        &t.api::<LoadBalancer>(),
        "cp",
        "only the new machine is active",
        |lb| {
            lb.and_then(|lb| lb.status.as_ref()).is_some_and(|s| {
                s.active_targets == vec!["cp-new".to_string()]
                    && s.targets == vec!["cp-new".to_string()]
            })
        },
    )
    .await;

    // Deleting the LoadBalancer releases the remaining hooks.
    t.api::<LoadBalancer>()
        .delete("cp", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        &machines,
        "cp-new",
        "hooks of the new machine released",
        |m| m.is_some_and(|m| !m.annotations().contains_key(&keys.pre_terminate)),
    )
    .await;
    wait_gone(&t.api::<LoadBalancer>(), "cp").await;
    release_machine(&t, "cp-new").await;
    t.finish().await;
}

/// A Machine's address change moves its member; a disabled Machine is drained and leaves; enabling
/// it again brings it back — each driven by the Machine watch alone (resync is one hour).
#[tokio::test]
async fn machine_address_changes_and_disabled_targets_follow_the_machine() {
    let mut t = TestNs::new("e2e-machine").await;
    install_capi_crds(&t.client).await;
    t.start(t.options(&["inmemory"]));
    t.create(in_memory("cp", json!({}))).await;
    t.create(load_balancer(
        "cp",
        "cp",
        json!({"clusterName": "demo", "drainSeconds": 1}),
    ))
    .await;
    create_machine(&t, "m1", "cp", "10.0.0.11").await;
    create_machine(&t, "m2", "cp", "10.0.0.12").await;
    let infras = t.api::<InMemoryLoadBalancer>();
    let members = |want: &'static [(&'static str, &'static str)]| {
        let infras = infras.clone();
        async move {
            wait_for(&infras, "cp", &format!("members {want:?}"), |i| {
                i.and_then(|i| i.status.as_ref()).is_some_and(|s| {
                    let mut got: Vec<(String, String)> = s
                        .members
                        .iter()
                        .filter(|m| m.state == "Active")
                        .map(|m| (m.name.clone(), m.address.clone()))
                        .collect();
                    got.sort();
                    got == want
                        .iter()
                        .map(|(n, a)| (n.to_string(), a.to_string()))
                        .collect::<Vec<_>>()
                })
            })
            .await;
        }
    };
    members(&[("m1", "10.0.0.11"), ("m2", "10.0.0.12")]).await;

    // The address changes in the Machine's status.
    set_machine_ip(&t, "m2", "10.0.0.22").await;
    members(&[("m1", "10.0.0.11"), ("m2", "10.0.0.22")]).await;

    // Disabled by the user: drained, then out; the LoadBalancer says so.
    let machines = t.api::<Machine>();
    machines
        .patch(
            "m1",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"metadata": {"annotations": {"loadbalancer.cluster.x-k8s.io/disabled": "true"}}}),
            ),
        )
        .await
        .unwrap();
    wait_target_state(&t, "cp", "m1", "disabled").await;
    members(&[("m2", "10.0.0.22")]).await;
    let lb = wait_for(&t.api::<LoadBalancer>(), "cp", "m1 not active", |lb| {
        lb.and_then(|lb| lb.status.as_ref())
            .is_some_and(|s| s.active_targets == vec!["m2".to_string()])
    })
    .await
    .unwrap();
    assert_eq!(
        condition(&lb, "TargetsReady"),
        Some(("True".into(), "TargetsActive".into()))
    );

    // Enabled again.
    machines
        .patch(
            "m1",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"metadata": {"annotations": {"loadbalancer.cluster.x-k8s.io/disabled": null}}}),
            ),
        )
        .await
        .unwrap();
    wait_target_state(&t, "cp", "m1", "active").await;
    members(&[("m1", "10.0.0.11"), ("m2", "10.0.0.22")]).await;

    delete_lb_and_wait(&t, "cp").await;
    for m in ["m1", "m2"] {
        machines.delete(m, &DeleteParams::default()).await.unwrap();
        release_machine(&t, m).await;
    }
    t.finish().await;
}

#[tokio::test]
async fn a_load_balancer_service_gets_a_stable_ext_endpoint_that_follows_its_ip() {
    let mut t = TestNs::new("e2e-svc").await;
    t.start(t.options(&["inmemory"]));
    let services = t.api::<Service>();
    t.create(
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "etcd-lb"},
                    "spec": {"type": "LoadBalancer", "selector": {"app": "etcd"},
                             "ports": [{"name": "etcd", "port": 2379, "targetPort": 2379}]}}),
    )
    .await;
    // No load balancer implementation serves this Service: write the ingress as one would.
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
    let slice = wait_slice_addresses(&t, "etcd-lb-ext-ipv4", &["198.51.100.7"]).await;
    let ext = services.get("etcd-lb-ext").await.unwrap();
    assert_eq!(ext.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    let source = wait_for(&services, "etcd-lb", "DNS name annotation", |s| {
        s.is_some_and(|s| {
            s.annotations()
                .contains_key("loadbalancer.cluster.x-k8s.io/external-endpoint-dns-name")
        })
    })
    .await
    .unwrap();
    assert_eq!(
        source.annotations()["loadbalancer.cluster.x-k8s.io/external-endpoint-dns-name"],
        format!("etcd-lb-ext.{}.svc.cluster.local", t.ns)
    );

    // The IP changes: same slice, new address.
    set_ingress("198.51.100.8").await;
    let updated = wait_slice_addresses(&t, "etcd-lb-ext-ipv4", &["198.51.100.8"]).await;
    assert_eq!(updated.uid(), slice.uid());

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
    wait_gone(&services, "etcd-lb-ext").await;
    t.finish().await;
}

#[tokio::test]
async fn a_load_balancer_on_kube_dc_with_the_simulated_controller() {
    use capi_lb_api::kubedc::EIp;
    use capi_lb_tests::kubedc_sim::KubeDcSim;

    let mut t = TestNs::new("e2e-kubedc").await;
    install_capi_crds(&t.client).await;
    install_kube_dc_crds(&t.client).await;
    t.start(t.options(&["kubedc"]));
    // kube-dc's controller, simulated, against the real apiserver (with the admin's rights).
    capi_lb_tests::kubedc_sim::make_project(&t.client, &t.ns).await;
    let sim = KubeDcSim::new().spawn(t.client.clone(), t.ns.clone());
    t.create(json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "KubeDCLoadBalancer",
                    "metadata": {"name": "cp"}, "spec": {"externalNetworkType": "cloud"}}))
        .await;
    let mut lb = load_balancer("cp", "cp", json!({"clusterName": "demo"}));
    lb["spec"]["infrastructureRef"]["kind"] = json!("KubeDCLoadBalancer");
    t.create(lb).await;
    t.create(lb_machine("cp-m1", "cp")).await;
    set_machine_ip(&t, "cp-m1", "10.0.0.11").await;

    let ready = wait_ready(&t, "cp").await;
    let eip = t.api::<EIp>().get("cp-eip").await.unwrap();
    let ip = eip.status.unwrap().ip_address.unwrap();
    assert_eq!(ready.status.unwrap().addresses[0].address, ip);
    wait_slice_addresses(&t, "cp-ext-ipv4", &[ip.as_str()]).await;
    wait_for(
        &t.api::<k8s_openapi::api::core::v1::Endpoints>(),
        "cp-lb",
        "the member in kube-dc's endpoints",
        |e| {
            e.and_then(|e| e.subsets.as_ref()?.first()?.addresses.as_ref()?.first())
                .is_some_and(|a| a.ip == "10.0.0.11")
        },
    )
    .await;

    t.api::<LoadBalancer>()
        .delete("cp", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&t.api::<EIp>(), "cp-eip").await;
    wait_gone(&t.api::<Service>(), "cp-lb").await;
    wait_gone(&t.api::<LoadBalancer>(), "cp").await;
    sim.stop().await;
    t.api::<Machine>()
        .delete("cp-m1", &DeleteParams::default())
        .await
        .unwrap();
    release_machine(&t, "cp-m1").await;
    t.finish().await;
}

/// Two replicas with leader election (the Lease in capi-lb's own namespace, where the generated
/// Role allows it): one reconciles; when it dies without releasing the lease, the other takes over
/// within the lease duration and reconciles.
#[tokio::test]
async fn a_standby_replica_takes_over_within_the_lease_duration() {
    use k8s_openapi::api::coordination::v1::Lease;

    let t = TestNs::new("e2e-lease").await;
    let lease_name = unique_name("capi-lb-e2e-leader");
    let replica = |identity: &str| {
        let mut options = t.options(&["inmemory"]);
        options.leader_election = LeaderElection {
            enabled: true,
            namespace: Some("capi-lb-system".into()),
            lease_name: lease_name.clone(),
            identity: identity.into(),
            duration_seconds: 6,
            grace_seconds: 2,
        };
        t.spawn(options)
    };
    let leases: Api<Lease> = Api::namespaced(t.client.clone(), "capi-lb-system");
    let holder = |identity: &'static str| {
        let (leases, lease_name) = (leases.clone(), lease_name.clone());
        async move {
            wait_for(&leases, &lease_name, &format!("{identity} leads"), |l| {
                l.and_then(|l| l.spec.as_ref()?.holder_identity.as_deref()) == Some(identity)
            })
            .await;
        }
    };
    let a = replica("replica-a");
    holder("replica-a").await;
    let b = replica("replica-b");

    // The leader reconciles.
    t.create(in_memory("ha", json!({}))).await;
    t.create(load_balancer("ha", "ha", json!({}))).await;
    wait_ready(&t, "ha").await;
    let lease = leases.get(&lease_name).await.unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some("replica-a"),
        "the standby took over from a live leader"
    );

    // The leader dies without releasing the lease.
    a.abort();
    let died = Instant::now();
    holder("replica-b").await;
    let failover = died.elapsed();
    assert!(
        failover <= Duration::from_secs(6 + 5),
        "failover took {failover:?}"
    );
    // And reconciles: a spec change is acted on.
    t.api::<LoadBalancer>()
        .patch(
            "ha",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"publication": {"suffix": "-stable"}}})),
        )
        .await
        .unwrap();
    wait_for(
        &t.api::<Service>(),
        "ha-stable",
        "the new leader reconciles",
        |s| s.is_some(),
    )
    .await;
    delete_lb_and_wait(&t, "ha").await;
    b.stop().await;
    leases
        .delete(&lease_name, &DeleteParams::default())
        .await
        .unwrap();
    t.finish().await;
}

/// Cluster API and Kamaji integration: a control-plane LoadBalancer fills an empty
/// `Cluster.spec.controlPlaneEndpoint`, and a Service of capi-lb's load-balancer class gets the
/// provider's address in its ingress (Kamaji's CRDs are installed so its kinds exist as in a
/// management cluster).
#[tokio::test]
async fn control_plane_endpoint_and_service_class_on_a_real_apiserver() {
    let mut t = TestNs::new("e2e-capi").await;
    install_capi_crds(&t.client).await;
    install_third_party_crds(
        &t.client,
        "KAMAJI_CRDS_DIR",
        "kamaji",
        &[
            "controlplane.cluster.x-k8s.io_kamajicontrolplanes.yaml",
            "kamaji.clastix.io_tenantcontrolplanes.yaml",
        ],
    )
    .await;
    t.start(t.options(&["inmemory"]));
    t.create(cp_cluster("demo")).await;
    t.create(in_memory("cp", json!({}))).await;
    t.create(load_balancer(
        "cp",
        "cp",
        json!({"clusterName": "demo", "controlPlane": {}}),
    ))
    .await;
    let cluster = wait_for(
        &t.api::<Cluster>(),
        "demo",
        "Cluster.spec.controlPlaneEndpoint set",
        |c| {
            c.and_then(|c| c.spec.control_plane_endpoint.as_ref())
                .is_some_and(|e| !e.is_empty())
        },
    )
    .await
    .unwrap();
    let endpoint = cluster.spec.control_plane_endpoint.unwrap();
    assert_eq!(endpoint.host, format!("cp-ext.{}.svc.cluster.local", t.ns));
    assert_eq!(endpoint.port, 6443);

    // A Service of capi-lb's class, realised by LoadBalancer "tcp" (default: the same name).
    t.create(in_memory(
        "tcp",
        json!({"addressPools": ["198.51.100.0/24"]}),
    ))
    .await;
    // Its author names the Service it realises.
    let mut lb = load_balancer("tcp", "tcp", json!({}));
    lb["metadata"]["annotations"] = json!({"loadbalancer.cluster.x-k8s.io/service": "tcp"});
    t.create(lb).await;
    t.create(
        json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "tcp", "annotations": {"loadbalancer.cluster.x-k8s.io/load-balancer-ref": "tcp"}},
                    "spec": {"type": "LoadBalancer",
                             "loadBalancerClass": "loadbalancer.cluster.x-k8s.io/capi-lb",
                             "ports": [{"name": "kube-apiserver", "port": 6443}]}}),
    )
    .await;
    t.create(
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"name": "tcp-1", "labels": {"kubernetes.io/service-name": "tcp"}},
                    "addressType": "IPv4", "ports": [{"name": "kube-apiserver", "port": 6443}],
                    "endpoints": [{"addresses": ["10.244.0.5"], "conditions": {"ready": true}}]}),
    )
    .await;
    wait_for(
        &t.api::<Service>(),
        "tcp",
        "the class Service has the provider IP as ingress",
        |s| {
            s.and_then(|s| s.status.as_ref()?.load_balancer.as_ref()?.ingress.as_ref())
                .and_then(|i| i.first()?.ip.clone())
                .as_deref()
                == Some("198.51.100.1")
        },
    )
    .await;
    // Kamaji's Service endpoints are the members of the realising load balancer.
    wait_for(
        &t.api::<InMemoryLoadBalancer>(),
        "tcp",
        "the Service's endpoint is a member",
        |i| {
            i.and_then(|i| i.status.as_ref())
                .is_some_and(|s| s.members.iter().any(|m| m.address == "10.244.0.5"))
        },
    )
    .await;
    delete_lb_and_wait(&t, "cp").await;
    t.api::<Service>()
        .delete("tcp", &DeleteParams::default())
        .await
        .unwrap();
    delete_lb_and_wait(&t, "tcp").await;
    t.finish().await;
}

/// Changing `infrastructureRef` migrates make-before-break on the real apiserver: the `-ext` name
/// stays, its address switches to the new load balancer, and the old infrastructure object is
/// released.
#[tokio::test]
async fn a_provider_swap_keeps_the_name_and_switches_the_address() {
    let mut t = TestNs::new("e2e-swap").await;
    t.start(t.options(&["inmemory"]));
    t.create(in_memory(
        "old",
        json!({"addressPools": ["203.0.113.0/24"]}),
    ))
    .await;
    t.create(in_memory(
        "new",
        json!({"addressPools": ["198.51.100.0/24"], "provisioningDelaySeconds": 1}),
    ))
    .await;
    t.create(load_balancer("cp", "old", json!({"drainSeconds": 1})))
        .await;
    let before = wait_ready(&t, "cp").await;
    let slice = wait_slice_addresses(&t, "cp-ext-ipv4", &["203.0.113.1"]).await;

    t.api::<LoadBalancer>()
        .patch(
            "cp",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"infrastructureRef": {"name": "new"}}})),
        )
        .await
        .unwrap();
    let switched = wait_slice_addresses(&t, "cp-ext-ipv4", &["198.51.100.1"]).await;
    assert_eq!(switched.uid(), slice.uid(), "the slice was replaced");
    let infras = t.api::<InMemoryLoadBalancer>();
    wait_for(&infras, "old", "the old infrastructure released", |i| {
        i.is_some_and(|i| i.finalizers().is_empty() && i.owner_references().is_empty())
    })
    .await;
    let after = wait_for(&t.api::<LoadBalancer>(), "cp", "migration done", |lb| {
        lb.and_then(|lb| lb.status.as_ref())
            .is_some_and(|s| s.ready && s.migration.is_none())
    })
    .await
    .unwrap();
    assert_eq!(
        after.status.as_ref().unwrap().endpoint,
        before.status.as_ref().unwrap().endpoint
    );
    assert_eq!(
        after.status.unwrap().infrastructure_ref.map(|r| r.name),
        Some("new".to_string())
    );
    delete_lb_and_wait(&t, "cp").await;
    t.finish().await;
}

/// A paused LoadBalancer (its own annotation, or its Cluster's `spec.paused`) is left alone: it says
/// so and does not follow changes until it is unpaused.
#[tokio::test]
async fn a_paused_load_balancer_waits_until_unpaused() {
    let mut t = TestNs::new("e2e-pause").await;
    install_capi_crds(&t.client).await;
    t.start(t.options(&["inmemory"]));
    t.create(capi_cluster("demo")).await;
    t.create(in_memory("cp", json!({}))).await;
    t.create(load_balancer("cp", "cp", json!({"clusterName": "demo"})))
        .await;
    wait_ready(&t, "cp").await;
    let lbs = t.api::<LoadBalancer>();
    let clusters = t.api::<Cluster>();
    let infras = t.api::<InMemoryLoadBalancer>();
    let set_pool = |pool: &'static str| {
        let infras = infras.clone();
        async move {
            infras
                .patch(
                    "cp",
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"spec": {"addressPools": [pool]}})),
                )
                .await
                .unwrap();
        }
    };

    for (how, pause, unpause) in [
        (
            "the Cluster's spec.paused",
            json!({"spec": {"paused": true}}),
            json!({"spec": {"paused": false}}),
        ),
        (
            "the cluster.x-k8s.io/paused annotation",
            json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": ""}}}),
            json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": null}}}),
        ),
    ] {
        let paused = |lb: Option<&LoadBalancer>, status: &str| {
            lb.and_then(|lb| condition(lb, "Paused"))
                .is_some_and(|(s, _)| s == status)
        };
        if how.starts_with("the Cluster") {
            clusters
                .patch("demo", &PatchParams::default(), &Patch::Merge(&pause))
                .await
                .unwrap();
        } else {
            lbs.patch("cp", &PatchParams::default(), &Patch::Merge(&pause))
                .await
                .unwrap();
        }
        wait_for(&lbs, "cp", &format!("Paused by {how}"), |lb| {
            paused(lb, "True")
        })
        .await;
        let before = t.api::<EndpointSlice>().get("cp-ext-ipv4").await.unwrap();
        let old = before.endpoints[0].addresses.clone();
        let next = if old[0].starts_with("203.") {
            "198.51.100.0/24"
        } else {
            "203.0.113.0/24"
        };
        set_pool(next).await;
        // Nothing is acted on while paused (a negative check needs a little time).
        tokio::time::sleep(Duration::from_secs(3)).await;
        let during = t.api::<EndpointSlice>().get("cp-ext-ipv4").await.unwrap();
        assert_eq!(
            during.resource_version(),
            before.resource_version(),
            "paused by {how}, yet the -ext slice changed"
        );
        if how.starts_with("the Cluster") {
            clusters
                .patch("demo", &PatchParams::default(), &Patch::Merge(&unpause))
                .await
                .unwrap();
        } else {
            lbs.patch("cp", &PatchParams::default(), &Patch::Merge(&unpause))
                .await
                .unwrap();
        }
        wait_for(&lbs, "cp", &format!("unpaused from {how}"), |lb| {
            paused(lb, "False")
        })
        .await;
        // The provider's new address (from the new pool) reaches the slice.
        let prefix = &next[..4];
        eventually(&format!("the -ext slice follows after {how}"), || async {
            let infra = infras.get("cp").await.ok()?;
            let address = infra.status?.addresses.first()?.address.clone();
            let slice = t.api::<EndpointSlice>().get("cp-ext-ipv4").await.ok()?;
            (address.starts_with(prefix) && slice.endpoints.first()?.addresses == vec![address])
                .then_some(())
        })
        .await;
    }
    delete_lb_and_wait(&t, "cp").await;
    t.finish().await;
}
