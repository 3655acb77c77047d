//! Target health that proves an API server serves (`spec.targetHealth.probe`), on real
//! kube-apiservers: three on the harness's data-plane range, the first two sharing one etcd, the
//! third with an etcd of its own; their serving certificate names none of their addresses (as a
//! Machine reached by an address its certificate does not hold), signed by the Cluster's CA in
//! Secret `demo-ca`. The third's etcd killed: it still accepts TCP connections but does not answer
//! `GET /readyz` 200 (500, or not within the probe's timeout), so with `probe: Auto` (the default;
//! the port is `kube-apiserver`) it is taken out, and once the LoadBalancer says `probe: TCP` it
//! comes back.

use std::time::Duration;

use capi_lb_api::LoadBalancer;
use capi_lb_bench::rollout::{
    self,
    fleet::{ApiServer, Etcd, Pki, Settings},
};
use capi_lb_tests::k8s::{
    TestNs, condition, data_plane, in_memory, install_capi_crds, load_balancer, machine, merge,
    set_machine_ip, wait_for,
};
use serde_json::json;

const PERIOD: Duration = Duration::from_secs(2);

fn active(lb: &LoadBalancer) -> Vec<String> {
    lb.status
        .as_ref()
        .map(|s| s.active_targets.clone())
        .unwrap_or_default()
}

async fn until(t: &TestNs, what: &str, done: impl Fn(&LoadBalancer) -> bool) -> LoadBalancer {
    wait_for(
        &t.api::<LoadBalancer>(),
        "cp",
        what,
        |l: Option<&LoadBalancer>| l.is_some_and(&done),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn an_api_server_without_its_etcd_is_taken_out_by_https_probes_and_not_by_tcp_ones() {
    let mut t = TestNs::new("e2e-api-health").await;
    install_capi_crds(&t.client).await;
    t.start(t.options(&["inmemory"]));
    let plane = data_plane();
    // A block of its own (the rollout test has 16 to 22).
    let addresses = rollout::addresses(plane.range, 32, 5);
    let settings = Settings {
        binary: plane.kube_apiserver.clone(),
        etcd_binary: plane.etcd.clone(),
        shutdown_delay: Duration::from_secs(0),
        log_dir: rollout::default_log_dir().join(&t.ns),
    };
    let pki = Pki::create(&settings.log_dir.join("pki"), &[], &[]).unwrap();
    let within = Duration::from_secs(90);
    let shared = Etcd::start(&settings, addresses[0], within).await.unwrap();
    let own = Etcd::start(&settings, addresses[1], within).await.unwrap();
    let mut servers = Vec::new();
    for (i, at) in addresses[2..].iter().enumerate() {
        let etcd = if i < 2 { &shared } else { &own };
        let mut server = ApiServer::start(&settings, etcd, &pki, *at).unwrap();
        server.wait_ready(&pki, within).await.unwrap();
        servers.push(server);
    }

    t.create(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "demo-ca"},
                    "data": {}, "stringData": {"tls.crt": pki.ca_pem}}),
    )
    .await;
    t.create(in_memory("cp", json!({"addressPools": ["203.0.113.0/28"]})))
        .await;
    t.create(load_balancer(
        "cp",
        "cp",
        json!({
            // Cluster demo does not exist: its CA Secret is read all the same, as for the
            // endpoint's probes.
            "clusterName": "demo",
            "ports": [{"name": "kube-apiserver", "port": 6443, "targetPort": 6443}],
            "drainSeconds": 1,
            "targetHealth": {"periodSeconds": PERIOD.as_secs(), "timeoutSeconds": 1,
                             "failureThreshold": 2, "successThreshold": 1},
        }),
    ))
    .await;
    for (i, at) in addresses[2..].iter().enumerate() {
        let name = format!("m{}", i + 1);
        t.create(machine(
            &name,
            json!({"loadbalancer.cluster.x-k8s.io/name": "cp"}),
        ))
        .await;
        set_machine_ip(&t, &name, &at.to_string()).await;
    }
    // Served and trusted (any name) by HTTPS probes: all three active.
    until(&t, "Ready with three active targets", |l| {
        l.status.as_ref().is_some_and(|s| s.ready) && active(l) == ["m1", "m2", "m3"]
    })
    .await;

    // m3's etcd gone: TCP still accepted, GET /readyz fails.
    own.stop().await;
    let lb = until(&t, "m3 taken out by its failing GET /readyz", |l| {
        active(l) == ["m1", "m2"]
            && condition(l, "TargetsReady").is_some_and(|(status, _)| status == "False")
    })
    .await;
    let message = lb
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "TargetsReady"))
        .map(|c| c.message.clone())
        .unwrap_or_default();
    // What the probe found (an API server without its etcd answers GET /readyz with 500, or
    // later than the probe's timeout), and that the Cluster's CA was checked, any name.
    assert!(
        message.contains("m3") && message.contains("/readyz") && message.contains("(any name)"),
        "TargetsReady names m3 and what its probe found: {message}"
    );

    // A TCP probe cannot tell: m3 comes back.
    merge(
        &t.api::<LoadBalancer>(),
        "cp",
        json!({"spec": {"targetHealth": {"probe": "TCP"}}}),
    )
    .await;
    until(&t, "m3 back with TCP probes", |l| {
        active(l) == ["m1", "m2", "m3"]
    })
    .await;

    for server in servers {
        server.kill().await;
    }
    shared.stop().await;
    t.finish().await;
}
