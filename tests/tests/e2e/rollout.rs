//! The data plane through a control-plane rollout (`capi-lb-bench rollout` at CI's size): three
//! real kube-apiservers behind a Service-provider LoadBalancer on MetalLB, forwarded by the
//! harness's kube-proxy (nftables), each the infrastructure of a real Cluster API Machine; each
//! Machine is replaced in turn as KubeadmControlPlane replaces it (a new one up and active, then the old
//! one deleted; Cluster API deletes its infrastructure, and so stops its API server with SIGTERM,
//! only after capi-lb released its hooks) while clients of both kinds (a new TLS connection per
//! request; one long-lived HTTP/2 connection) send requests through the published name
//! `rollout-ext.<ns>.svc.cluster.local`, resolved through CoreDNS. Not one request may fail.
//!
//! The same rollout through the DNS provider: the name in BIND through the harness's ExternalDNS (TTL
//! 5 s), the clients asking BIND at every new connection, each stopped server's host then vanishing
//! (its address drops packets, as a deleted VM's); the long-lived connections are not re-resolved
//! (they end with their server's GOAWAY and connect again through the name). Kept out of the
//! deletions, capi-lb let 4 of 6,316 new-connection requests fail (503 from servers shutting down
//! while the name still held them) and 12 take over a second (connection attempts to vanished
//! hosts); with capi-lb, none of either (docs/benchmarks.md).
//!
//! The same rollout with capi-lb kept out of the deletions (`capi-lb-bench rollout --unmanaged`:
//! the LoadBalancer paused and its hooks taken off each Machine before it is deleted) had 508 of
//! 7,471 new-connection requests refused (docs/benchmarks.md): this test can fail.

use std::time::Duration;

use capi_lb_bench::rollout::{self, Options, fleet::Settings, load::ClientKind};
use capi_lb_tests::k8s::{TestNs, cluster, data_plane, external_dns, install_capi_crds, metallb};

/// Replace all three Machines through `provider`'s load balancer (the run's lo addresses from
/// `first`, seven of them: etcd and six API servers) and require that not one request failed.
async fn rollout_fails_no_request(prefix: &str, provider: rollout::Provider, first: usize) {
    // A deleted Machine's host vanishes (its address drops packets) for the DNS provider: a host
    // that refuses connections lets a client move on to the name's next address at once, so
    // only a vanished one shows whether the name still held the address (docs/benchmarks.md).
    let black_hole = matches!(provider, rollout::Provider::Dns { .. });
    let mut t = TestNs::new(prefix).await;
    install_capi_crds(&t.client).await;
    capi_lb_bench::capi::provider::install(&t.client)
        .await
        .unwrap();
    t.start(t.options(&[provider.name()]));
    let plane = data_plane();
    let options = Options {
        fleet: Settings {
            binary: plane.kube_apiserver.clone(),
            etcd_binary: plane.etcd.clone(),
            shutdown_delay: Duration::from_secs(1),
            log_dir: rollout::default_log_dir(),
        },
        // etcd and six API servers (three, then their replacements).
        addresses: rollout::addresses(plane.range, first, 7),
        machines: 3,
        // All three: each long-lived connection, whichever server it went to, is on a server that
        // stops (and sends GOAWAY) during the run.
        replacements: 3,
        clients_per_kind: 1,
        rate: 20.0,
        provider,
        dns: cluster().dns.expect("the harness's CoreDNS"),
        cluster_domain: "cluster.local".into(),
        drain_seconds: 1,
        settle: Duration::from_secs(2),
        step_timeout: Duration::from_secs(90),
        unmanaged: false,
        target_health: None,
        failover: false,
        black_hole,
    };
    let report = rollout::run(&t.client, &t.ns, &options).await.unwrap();
    eprintln!("{}", rollout::render(&report));
    for kind in ClientKind::ALL {
        let tally = &report.tallies[&kind];
        // At 20 requests/s for the whole rollout: hundreds each; a client that sent nothing proved
        // nothing.
        assert!(
            tally.sent >= 100,
            "{}: only {} requests sent",
            kind.name(),
            tally.sent
        );
    }
    assert_eq!(
        report.failed(),
        0,
        "requests failed through the rollout:\n{}",
        rollout::render(&report)
    );
    assert_eq!(report.replacements.len(), 3);
    t.finish().await;
}

#[tokio::test]
async fn a_control_plane_rollout_fails_no_request_through_the_service_provider() {
    let provider = rollout::Provider::Service {
        class: metallb().class.clone(),
    };
    rollout_fails_no_request("e2e-rollout", provider, 16).await;
}

#[tokio::test]
async fn a_control_plane_rollout_fails_no_request_through_the_dns_provider() {
    let dns = external_dns();
    let provider = rollout::Provider::Dns {
        zone: dns.zone.clone(),
        server: dns.server,
    };
    rollout_fails_no_request("e2e-rollout-dns", provider, 48).await;
}
