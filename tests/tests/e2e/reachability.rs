//! Endpoint reachability (`spec.reachability`) on a real apiserver, with real listeners as the
//! endpoint: capi-lb (as its ServiceAccount) probes the endpoint of a Ready LoadBalancer and the
//! `Reachable` condition follows it.
//!
//! - A TCP listener on 127.0.0.1 stopped and started again: `Reachable` goes False
//!   (`EndpointUnreachable`, with a Warning Event) and True again, each within a probe period plus
//!   its timeout; the times are printed.
//! - The harness's own kube-apiserver as the API server behind a `kube-apiserver` port: HTTPS
//!   `GET /readyz` answers 200 with its certificate checked against the Cluster's CA (the Secret
//!   `<clusterName>-ca`, holding the harness's CA); with another CA in that Secret the certificate is
//!   not trusted (`CertificateNotTrusted`).
//!
//! The endpoint is `spec.endpoint` (a loopback address): the only addresses a test may use, and
//! never one capi-lb publishes (its address policy refuses loopback), so the load balancer itself
//! has a documentation address from the in-memory provider and the probe goes to the endpoint
//! consumers are told to use, as it does in a cluster.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use capi_lb_api::LoadBalancer;
use capi_lb_tests::k8s::{
    TestNs, cluster, in_memory, listen, load_balancer, merge, wait_for, warning_event,
};
use serde_json::{Value, json};

const PERIOD: Duration = Duration::from_secs(5);
const TIMEOUT: Duration = Duration::from_secs(2);

/// The `Reachable` condition of LoadBalancer `name` once `status` and `reason` are what it says.
async fn reachable(t: &TestNs, name: &str, status: &str, reason: &str) -> String {
    let lb = wait_for(
        &t.api::<LoadBalancer>(),
        name,
        &format!("Reachable {status} {reason}"),
        |l: Option<&LoadBalancer>| {
            l.and_then(|l| l.status.as_ref())
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Reachable"))
                .is_some_and(|c| c.status == status && c.reason == reason)
        },
    )
    .await
    .unwrap();
    lb.status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Reachable")
        .unwrap()
        .message
}

/// LoadBalancer `name` on the InMemoryLoadBalancer of the same name, whose endpoint is `endpoint`
/// (one port, named `port_name`), probed every [`PERIOD`].
fn probed(name: &str, endpoint: SocketAddr, port_name: &str, extra: Value) -> Value {
    let mut spec = json!({
        "ports": [{"name": port_name, "port": endpoint.port(), "targetPort": endpoint.port()}],
        "endpoint": {"host": endpoint.ip().to_string(), "port": endpoint.port()},
        "reachability": {"periodSeconds": PERIOD.as_secs(), "timeoutSeconds": TIMEOUT.as_secs()},
    });
    if let (Value::Object(spec), Value::Object(extra)) = (&mut spec, extra) {
        spec.extend(extra);
    }
    load_balancer(name, name, spec)
}

#[tokio::test]
async fn reachable_follows_a_listener_stopped_and_started() {
    let mut t = TestNs::new("reach-tcp").await;
    t.start(t.options(&["inmemory"]));
    t.create(in_memory(
        "web",
        json!({"addressPools": ["203.0.113.0/28"]}),
    ))
    .await;
    // A free port, then a listener on it that the test stops and starts.
    let at = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let listener = listen(at);
    let created = Instant::now();
    t.create(probed("web", at, "web", json!({}))).await;
    let message = reachable(&t, "web", "True", "EndpointReachable").await;
    println!(
        "reachable after {:?} from creation: {message}",
        created.elapsed()
    );
    assert!(
        message.contains(&format!("{at} accepts connections")),
        "{message}"
    );

    listener.abort();
    let _ = listener.await;
    let stopped = Instant::now();
    let message = reachable(&t, "web", "False", "EndpointUnreachable").await;
    let took = stopped.elapsed();
    println!("unreachable {took:?} after the listener stopped: {message}");
    assert!(message.contains(&at.to_string()), "{message}");
    assert!(took < PERIOD * 2 + TIMEOUT, "{took:?}");
    warning_event(&t, "EndpointUnreachable").await;

    let listener = listen(at);
    let started = Instant::now();
    reachable(&t, "web", "True", "EndpointReachable").await;
    let took = started.elapsed();
    println!("reachable again {took:?} after the listener started");
    assert!(took < PERIOD * 2 + TIMEOUT, "{took:?}");

    // Not asked for any more: what was found is not reported as true any more.
    merge(
        &t.api::<LoadBalancer>(),
        "web",
        json!({"spec": {"reachability": null}}),
    )
    .await;
    reachable(&t, "web", "False", "NotProbed").await;
    listener.abort();
    t.finish().await;
}

/// The harness's kube-apiserver: its address and its CA (PEM).
fn apiserver() -> (SocketAddr, String) {
    let kubeconfig = kube::config::Kubeconfig::read_from(&cluster().kubeconfig).unwrap();
    let named = &kubeconfig.clusters[0];
    let c = named.cluster.as_ref().unwrap();
    let server = c.server.clone().unwrap();
    let authority = server
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string();
    let at: SocketAddr = authority.parse().unwrap();
    // The harness's kubeconfig names its CA file.
    let path = c
        .certificate_authority
        .as_ref()
        .expect("the harness's kubeconfig names its CA file");
    let ca = std::fs::read_to_string(path).unwrap();
    (at, ca)
}

/// A CA certificate (PEM) of its own, made with openssl.
fn other_ca() -> String {
    let dir = std::env::temp_dir().join(format!("capi-lb-reach-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (key, cert) = (dir.join("ca.key"), dir.join("ca.crt"));
    let status = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=another-ca", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");
    let pem = std::fs::read_to_string(&cert).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    pem
}

fn ca_secret(name: &str, pem: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
           "type": "kubernetes.io/tls",
           "stringData": {"tls.crt": pem, "tls.key": "not used by capi-lb"}})
}

#[tokio::test]
async fn an_api_server_port_answers_readyz_with_a_certificate_the_clusters_ca_signs() {
    let mut t = TestNs::new("reach-https").await;
    t.start(t.options(&["inmemory"]));
    for name in ["cp", "impostor"] {
        t.create(in_memory(name, json!({"addressPools": ["203.0.113.0/28"]})))
            .await;
    }
    let (at, ca) = apiserver();
    t.create(ca_secret("demo-ca", &ca)).await;
    t.create(ca_secret("other-ca", &other_ca())).await;
    t.create(probed(
        "cp",
        at,
        "kube-apiserver",
        json!({"clusterName": "demo"}),
    ))
    .await;
    t.create(probed(
        "impostor",
        at,
        "kube-apiserver",
        json!({"clusterName": "other"}),
    ))
    .await;

    let message = reachable(&t, "cp", "True", "EndpointReachable").await;
    println!("cp: {message}");
    assert!(
        message.contains(&format!("{at} answered GET /readyz 200")),
        "{message}"
    );
    assert!(
        message.contains(&format!(
            "certificates checked against Secret {}/demo-ca",
            t.ns
        )),
        "{message}"
    );
    let message = reachable(&t, "impostor", "False", "CertificateNotTrusted").await;
    println!("impostor: {message}");
    assert!(message.contains("certificate not trusted"), "{message}");
    t.finish().await;
}
