//! One tenant cannot stall the controller every tenant shares, on a real apiserver.
//!
//! Eight tenants each point a `KubeDCLoadBalancer` at a "kube-dc cluster" of their own choosing
//! (`spec.cluster`: a kubeconfig in a Secret of their namespace) whose server accepts connections
//! and never answers; a ninth points at a server that answers every request with 2 GiB. Then a
//! bystander creates an in-memory LoadBalancer in another namespace. One controller (four reconciles
//! at a time, as shipped) serves all of them.
//!
//! - The bystander's LoadBalancer becomes Ready within 5 s (0.13 to 0.15 s measured): a reconcile
//!   waiting on a provider gives its work slot back, so the nine stalled reconciles hold none of
//!   the four. While they held their slots until their remote requests gave up (10 s), it took 3.6
//!   to 33.8 s; without the clients' timeouts (and the provider call deadline behind them) it
//!   never did.
//! - The stalled ones report InfrastructureReady False `ProviderTimeout`, with a Warning Event.
//! - The huge answer is refused after 4 MiB (`ProviderError`, "larger than 4 MiB"), and the process'
//!   peak memory grows by far less than the 2 GiB offered.
//!
//! Every client of a tenant's server comes from one door (`capi_lb_providers::untrusted`), and the
//! next tests try what it refuses, with the same bystander:
//!
//! - a kube-dc server answering `503` with `Retry-After: 18446744073709551615`: kube-client 4's
//!   default retry layer obeyed it and panicked on `Instant` arithmetic, which ended the process for
//!   every tenant; now the request is sent once, the tenant reports `ProviderError` naming the 503,
//!   and the bystander is Ready;
//! - answers within the byte cap but made to expand when parsed (`{"items":[0,0,...]}`, 4 MiB of
//!   it, and 100,000 nested arrays), and an answer trickled a byte at a time: refused by the value
//!   budget and the whole-answer deadline, with the test process' peak memory growth measured.
//!
//! The same for clouds a tenant names in an `OctaviaLoadBalancer`'s `clouds.yaml`: a Keystone that
//! never answers, one that answers the token request with 2 GiB, and a Keystone whose catalog sends
//! capi-lb to an "Octavia" that answers with 2 GiB. The bystander is Ready within 5 s, the hanging
//! one reports `ProviderTimeout`, the huge ones `AnswerTooLarge` (at most 4 MiB is read).

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use capi_lb_api::LoadBalancer;
use capi_lb_tests::k8s::{
    TestNs, condition, dynamic_api, eventually, in_memory, load_balancer, merge, unique_name,
    wait_for,
};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The watch filter of this test's controller: it reconciles only these LoadBalancers, whatever
/// else the cluster holds.
/// Unique per run: a LoadBalancer an earlier, interrupted run left behind is not this run's.
static FILTER: LazyLock<String> = LazyLock::new(|| unique_name("isolation-test"));
/// The watch filter of the clouds' test (the two tests run at the same time, each with its own
/// controller).
static CLOUD_FILTER: LazyLock<String> = LazyLock::new(|| unique_name("isolation-clouds"));

/// A server that accepts connections and never answers (nor closes them). Its address.
async fn hanging_server() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    address
}

/// An HTTP server that answers every request with a 200 of 2 GiB, sent as fast as it can.
async fn huge_server() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let size: u64 = 2 << 30;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {size}\r\n\r\n["
                );
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b' '; 1 << 16];
                let mut sent = 1u64;
                while sent < size {
                    if socket.write_all(&chunk).await.is_err() {
                        return;
                    }
                    sent += chunk.len() as u64;
                }
            });
        }
    });
    address
}

/// An HTTP server that answers every request with `answer` (a whole HTTP/1.1 response) and closes.
async fn fixed_server(answer: String) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let _ = socket.write_all(answer.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    address
}

/// A "Keystone" that gives every token request a token whose catalog's `load-balancer` is
/// `octavia`.
async fn keystone_stub(octavia: &str) -> std::net::SocketAddr {
    let token = json!({"token": {"expires_at": "2099-01-01T00:00:00.000000Z", "catalog": [
        {"type": "load-balancer", "name": "octavia",
         "endpoints": [{"interface": "public", "region_id": "RegionOne", "url": octavia}]}]}})
    .to_string();
    fixed_server(format!(
        "HTTP/1.1 201 Created\r\nX-Subject-Token: stub-token\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{token}",
        token.len()
    ))
    .await
}

/// A LoadBalancer in `t` on an OctaviaLoadBalancer whose cloud's Keystone is `keystone`.
async fn tenant_cloud(t: &TestNs, keystone: std::net::SocketAddr) {
    let clouds = format!(
        "clouds:\n  tenant:\n    auth:\n      auth_url: http://{keystone}/v3\n      username: u\n      password: p\n      user_domain_name: Default\n      project_name: demo\n"
    );
    t.create(json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "cloud", "namespace": t.ns},
                    "stringData": {"clouds.yaml": clouds}}))
        .await;
    t.create(
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                    "kind": "OctaviaLoadBalancer", "metadata": {"name": "lb", "namespace": t.ns},
                    "spec": {"credentials": {"secretName": "cloud", "cloud": "tenant"},
                             "vip": {"subnetID": "00000000-0000-0000-0000-000000000000"}}}),
    )
    .await;
    let mut lb = load_balancer("lb", "lb", json!({}));
    lb["metadata"]["labels"] = json!({"cluster.x-k8s.io/watch-filter": CLOUD_FILTER.as_str()});
    lb["spec"]["infrastructureRef"]["kind"] = json!("OctaviaLoadBalancer");
    t.create(lb).await;
}

/// The InfrastructureReady condition of `lb` in `t` once it is False with `reason`: its message.
async fn refused_with(t: &TestNs, reason: &str) -> String {
    let api: Api<LoadBalancer> = t.api();
    let lb = wait_for(&api, "lb", &format!("InfrastructureReady {reason}"), |l| {
        l.and_then(|l| condition(l, "InfrastructureReady"))
            .is_some_and(|(status, r)| status == "False" && r == reason)
    })
    .await
    .unwrap();
    lb.status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "InfrastructureReady")
        })
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// Remove the finalizers of the LoadBalancer `lb` and its infrastructure object of `kind` in `t`
/// (their cloud never answers, so the controller cannot delete them), then remove `t`.
async fn abandon(t: TestNs, kind: &str) {
    let finalizers = json!({"metadata": {"finalizers": null}});
    merge(&t.api::<LoadBalancer>(), "lb", finalizers.clone()).await;
    let kind = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": kind});
    let infra = dynamic_api(&t.client, Some(&t.ns), &kind).await.unwrap();
    merge(&infra, "lb", finalizers).await;
    t.finish().await;
}

/// A kubeconfig whose cluster is `server`.
fn kubeconfig(server: &str) -> String {
    serde_json::to_string(&json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": true}}],
        "users": [{"name": "u", "user": {"token": "tenant-token"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }))
    .unwrap()
}

/// A LoadBalancer in `t` on a KubeDCLoadBalancer whose kube-dc cluster is `server`.
async fn remote_kube_dc(t: &TestNs, server: &str) {
    remote_kube_dc_filtered(t, server, &FILTER).await;
}

/// [`remote_kube_dc`] for the controller of watch filter `filter`.
async fn remote_kube_dc_filtered(t: &TestNs, server: &str, filter: &str) {
    t.create(json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "kube-dc", "namespace": t.ns},
                    "stringData": {"value": kubeconfig(server)}}))
        .await;
    t.create(json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                    "kind": "KubeDCLoadBalancer", "metadata": {"name": "lb", "namespace": t.ns},
                    "spec": {"cluster": {"kubeconfigSecretName": "kube-dc", "namespace": "project"}}}))
        .await;
    let mut lb = load_balancer("lb", "lb", json!({}));
    lb["metadata"]["labels"] = json!({"cluster.x-k8s.io/watch-filter": filter});
    lb["spec"]["infrastructureRef"]["kind"] = json!("KubeDCLoadBalancer");
    t.create(lb).await;
}

/// The peak resident memory of this process (VmHWM), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Start one controller for every namespace (the LoadBalancers labelled `filter`, four reconciles
/// at a time, as shipped) with `providers`, let it work on the stalled tenants for 2 s, then create
/// the bystander's in-memory LoadBalancer (`pool`) and require it Ready within 5 s. The process'
/// peak memory before the controller started.
async fn bystander_is_ready_in_time(
    bystander: &mut TestNs,
    providers: &[&str],
    filter: &str,
    pool: &str,
) -> u64 {
    let mut options = bystander.options(providers);
    options.namespace = None;
    options.watch_filter = Some(filter.to_string());
    options.concurrency = 4;
    options.external.enabled = false;
    let memory_before = peak_rss();
    bystander.start(options);
    // The stalled ones are being reconciled before the bystander's LoadBalancer exists.
    tokio::time::sleep(Duration::from_secs(2)).await;
    bystander
        .create(in_memory("web", json!({"addressPools": [pool]})))
        .await;
    let mut lb = load_balancer("web", "web", json!({}));
    lb["metadata"]["labels"] = json!({"cluster.x-k8s.io/watch-filter": filter});
    let created = Instant::now();
    bystander.create(lb).await;
    let lbs: Api<LoadBalancer> = bystander.api();
    wait_for(&lbs, "web", "the bystander's LoadBalancer Ready", |l| {
        l.and_then(|l| l.status.as_ref()).is_some_and(|s| s.ready)
    })
    .await
    .unwrap();
    let took = created.elapsed();
    println!("the bystander's LoadBalancer was Ready after {took:?}");
    assert!(
        took < Duration::from_secs(5),
        "the bystander waited {took:?} behind the stalled tenants"
    );
    memory_before
}

#[tokio::test]
async fn hanging_and_huge_remote_clusters_do_not_stall_other_tenants() {
    let mut tenants = Vec::new();
    for _ in 0..8 {
        let t = TestNs::new("iso-hang").await;
        let server = hanging_server().await;
        remote_kube_dc(&t, &format!("https://{server}")).await;
        tenants.push(t);
    }
    let huge = TestNs::new("iso-huge").await;
    let huge_address = huge_server().await;
    remote_kube_dc(&huge, &format!("http://{huge_address}")).await;
    let mut bystander = TestNs::new("iso-bystander").await;

    // One controller for every namespace, four reconciles at a time, as shipped.
    let memory_before = bystander_is_ready_in_time(
        &mut bystander,
        &["kubedc", "inmemory"],
        &FILTER,
        "203.0.113.0/28",
    )
    .await;

    // Each stalled tenant is told why, with a Warning Event.
    for t in &tenants {
        let api: Api<LoadBalancer> = t.api();
        let lb = wait_for(&api, "lb", "InfrastructureReady ProviderTimeout", |l| {
            l.and_then(|l| condition(l, "InfrastructureReady"))
                .is_some_and(|(status, reason)| status == "False" && reason == "ProviderTimeout")
        })
        .await
        .unwrap();
        let message = lb
            .status
            .as_ref()
            .and_then(|s| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == "InfrastructureReady")
            })
            .map(|c| c.message.clone())
            .unwrap_or_default();
        assert!(message.contains("timed out"), "{message}");
        let events: Api<Event> = t.api();
        eventually("a Warning Event ProviderTimeout", || async {
            let list = events.list(&ListParams::default()).await.unwrap();
            list.items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("ProviderTimeout")
                        && e.type_.as_deref() == Some("Warning")
                })
                .then_some(())
        })
        .await;
    }

    // The huge answer is cut off: a transient provider error naming the limit, no 2 GiB in memory.
    let api: Api<LoadBalancer> = huge.api();
    let lb = wait_for(&api, "lb", "InfrastructureReady ProviderError", |l| {
        l.and_then(|l| condition(l, "InfrastructureReady"))
            .is_some_and(|(status, reason)| status == "False" && reason == "ProviderError")
    })
    .await
    .unwrap();
    let message = lb
        .status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "InfrastructureReady")
        })
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(message.contains("larger than 4 MiB"), "{message}");
    let grew = peak_rss().saturating_sub(memory_before);
    println!("peak memory grew by {} MiB", grew >> 20);
    assert!(
        grew < 512 << 20,
        "the process' peak memory grew by {} MiB",
        grew >> 20
    );

    // The bystander's LoadBalancer goes through the controller; the stalled ones cannot be
    // deleted while their kube-dc cluster does not answer (nothing is leaked silently), so their
    // finalizers are removed by hand once the controller is stopped.
    bystander.finish().await;
    for t in tenants.into_iter().chain([huge]) {
        abandon(t, "KubeDCLoadBalancer").await;
    }
}

#[tokio::test]
async fn hanging_and_huge_clouds_do_not_stall_other_tenants() {
    let hanging = TestNs::new("iso-os-hang").await;
    tenant_cloud(&hanging, hanging_server().await).await;
    let huge_keystone = TestNs::new("iso-os-keystone").await;
    tenant_cloud(&huge_keystone, huge_server().await).await;
    let huge_octavia = TestNs::new("iso-os-octavia").await;
    let octavia = format!("http://{}", huge_server().await);
    tenant_cloud(&huge_octavia, keystone_stub(&octavia).await).await;
    let mut bystander = TestNs::new("iso-os-bystander").await;

    let memory_before = bystander_is_ready_in_time(
        &mut bystander,
        &["octavia", "inmemory"],
        &CLOUD_FILTER,
        "203.0.113.16/28",
    )
    .await;

    let message = refused_with(&hanging, "ProviderTimeout").await;
    assert!(
        message.contains("Keystone") && message.contains("timed out"),
        "{message}"
    );
    let message = refused_with(&huge_keystone, "AnswerTooLarge").await;
    assert!(
        message.contains("Keystone token request") && message.contains("4 MiB"),
        "{message}"
    );
    let message = refused_with(&huge_octavia, "AnswerTooLarge").await;
    assert!(
        message.contains("Octavia version.get") && message.contains("4 MiB"),
        "{message}"
    );
    let grew = peak_rss().saturating_sub(memory_before);
    println!("peak memory grew by {} MiB", grew >> 20);
    assert!(
        grew < 512 << 20,
        "the process' peak memory grew by {} MiB",
        grew >> 20
    );

    bystander.finish().await;
    for t in [hanging, huge_keystone, huge_octavia] {
        abandon(t, "OctaviaLoadBalancer").await;
    }
}

/// An HTTP server answering every request with a 503 whose `Retry-After` is the largest number of
/// seconds a client could parse: kube-client 4's default retry layer added it to an `Instant`.
async fn retry_after_server() -> std::net::SocketAddr {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                      "message": "come back later", "reason": "ServiceUnavailable", "code": 503})
    .to_string();
    fixed_server(format!(
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 18446744073709551615\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ))
    .await
}

/// An HTTP server answering every request with 200 and `body` (JSON).
async fn json_server(body: String) -> std::net::SocketAddr {
    fixed_server(format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ))
    .await
}

/// An HTTP server answering every request with 200 and a JSON body sent one byte every 100 ms.
async fn trickling_server() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n{";
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                loop {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if socket.write_all(b" ").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    address
}

/// The InfrastructureReady message of `lb` in `t` once it is False with a reason of `reasons`.
async fn refused_with_any(t: &TestNs, reasons: &[&str]) -> (String, String) {
    let api: Api<LoadBalancer> = t.api();
    let lb = wait_for(
        &api,
        "lb",
        &format!("InfrastructureReady one of {reasons:?}"),
        |l| {
            l.and_then(|l| condition(l, "InfrastructureReady"))
                .is_some_and(|(status, r)| status == "False" && reasons.contains(&r.as_str()))
        },
    )
    .await
    .unwrap();
    lb.status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "InfrastructureReady")
        })
        .map(|c| (c.reason.clone(), c.message.clone()))
        .unwrap_or_default()
}

static DOOR_FILTER: LazyLock<String> = LazyLock::new(|| unique_name("isolation-door"));

#[tokio::test]
async fn what_the_door_refuses_costs_no_other_tenant_anything() {
    // A Retry-After no Instant can hold.
    let retry_after = TestNs::new("iso-retry-after").await;
    let address = retry_after_server().await;
    remote_kube_dc_filtered(&retry_after, &format!("http://{address}"), &DOOR_FILTER).await;
    // Within 4 MiB, but 2 bytes a value: about 80 bytes each once parsed.
    let expanding = TestNs::new("iso-expanding").await;
    let values = format!(
        "{{\"kind\":\"List\",\"items\":[{}0]}}",
        "0,".repeat((4 << 20) / 2 - 64)
    );
    let address = json_server(values).await;
    remote_kube_dc_filtered(&expanding, &format!("http://{address}"), &DOOR_FILTER).await;
    // 100,000 nested arrays.
    let nested = TestNs::new("iso-nested").await;
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let address = json_server(deep).await;
    remote_kube_dc_filtered(&nested, &format!("http://{address}"), &DOOR_FILTER).await;
    // A byte every 100 ms: every read is in time, the answer never is.
    let trickle = TestNs::new("iso-trickle").await;
    let address = trickling_server().await;
    remote_kube_dc_filtered(&trickle, &format!("http://{address}"), &DOOR_FILTER).await;
    let mut bystander = TestNs::new("iso-door-bystander").await;

    let memory_before = bystander_is_ready_in_time(
        &mut bystander,
        &["kubedc", "inmemory"],
        &DOOR_FILTER,
        "203.0.113.32/28",
    )
    .await;

    let (_, message) = refused_with_any(&retry_after, &["ProviderError"]).await;
    assert!(
        message.contains("come back later") || message.contains("503"),
        "{message}"
    );
    let (_, message) = refused_with_any(&expanding, &["ProviderError"]).await;
    assert!(message.contains("JSON values"), "{message}");
    let (_, message) = refused_with_any(&nested, &["ProviderError"]).await;
    assert!(message.contains("deeper than 32"), "{message}");
    let (_, message) = refused_with_any(&trickle, &["ProviderTimeout"]).await;
    assert!(message.contains("no whole answer within 10 s"), "{message}");
    let grew = peak_rss().saturating_sub(memory_before);
    println!("peak memory grew by {} MiB", grew >> 20);
    // Four answers of at most 4 MiB each, none parsed: well under what one parsed tree of the
    // expanding answer took (about 160 MiB).
    assert!(
        grew < 64 << 20,
        "the process' peak memory grew by {} MiB",
        grew >> 20
    );
    // The controller is still up, still reconciling: a second LoadBalancer of the bystander.
    bystander
        .create(in_memory(
            "web2",
            json!({"addressPools": ["203.0.113.48/28"]}),
        ))
        .await;
    let mut lb = load_balancer("web2", "web2", json!({}));
    lb["metadata"]["labels"] = json!({"cluster.x-k8s.io/watch-filter": DOOR_FILTER.as_str()});
    bystander.create(lb).await;
    let lbs: Api<LoadBalancer> = bystander.api();
    wait_for(&lbs, "web2", "a second LoadBalancer Ready", |l| {
        l.and_then(|l| l.status.as_ref()).is_some_and(|s| s.ready)
    })
    .await
    .unwrap();

    bystander.finish().await;
    for t in [retry_after, expanding, nested, trickle] {
        abandon(t, "KubeDCLoadBalancer").await;
    }
}

static JOBS_FILTER: LazyLock<String> = LazyLock::new(|| unique_name("isolation-jobs"));

/// A LoadBalancer `name` in `t`, labelled for [`JOBS_FILTER`]'s controller, of Cluster `name`
/// (which names it) with `spec`.
async fn jobs_lb(t: &TestNs, name: &str, spec: serde_json::Value) {
    t.create(capi_lb_tests::k8s::capi_cluster_naming(name, name))
        .await;
    t.create(in_memory(
        name,
        json!({"addressPools": ["198.51.100.0/24"]}),
    ))
    .await;
    let mut lb = load_balancer(name, name, spec);
    lb["metadata"]["labels"] = json!({"cluster.x-k8s.io/watch-filter": JOBS_FILTER.as_str()});
    lb["spec"]["clusterName"] = json!(name);
    t.create(lb).await;
}

/// Eight tenants' workload clusters that accept and never answer, and eight tenants' endpoints
/// whose API server accepts and never answers `GET /readyz` (probed with a timeout of 30 s): the background jobs of the sixteen are bounded by their deadlines and their namespaces'
/// places, and a bystander's probe finds its endpoint reachable within seconds. Before, the
/// workload task had 8 slots with no deadline (a read timeout that restarted with every byte) and the
/// prober 16, with probes of up to 32 ports x 8 addresses x 60 s each.
#[tokio::test]
async fn hanging_workload_clusters_and_slow_probe_targets_slow_only_their_tenants() {
    let mut stalled = Vec::new();
    for i in 0..8 {
        let t = TestNs::new("iso-wl-hang").await;
        capi_lb_tests::k8s::install_capi_crds(&t.client).await;
        let server = hanging_server().await;
        let name = format!("wl{i}");
        t.create(json!({"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": format!("{name}-kubeconfig"), "namespace": t.ns},
                        "stringData": {"value": kubeconfig(&format!("https://{server}"))}}))
            .await;
        jobs_lb(&t, &name, json!({"workloadEndpoints": {"enabled": true}})).await;
        stalled.push((t, name, "WorkloadEndpoints"));
    }
    for i in 0..8 {
        let t = TestNs::new("iso-probe-slow").await;
        capi_lb_tests::k8s::install_capi_crds(&t.client).await;
        let server = hanging_server().await;
        let name = format!("slow{i}");
        jobs_lb(
            &t,
            &name,
            json!({
                "ports": [{"name": "kube-apiserver", "port": server.port(), "targetPort": 6443}],
                "endpoint": {"host": server.ip().to_string(), "port": server.port()},
                "reachability": {"periodSeconds": 40, "timeoutSeconds": 30}}),
        )
        .await;
        stalled.push((t, name, "Reachable"));
    }
    let mut bystander = TestNs::new("iso-jobs-bystander").await;
    capi_lb_tests::k8s::install_capi_crds(&bystander.client).await;
    let mut options = bystander.options(&["inmemory"]);
    options.namespace = None;
    options.watch_filter = Some(JOBS_FILTER.clone());
    options.concurrency = 4;
    options.external.enabled = false;
    options.address_allow_loopback = true;
    bystander.start(options);
    // Let the stalled ones' jobs start first.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap();
    let _accepting = tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            drop(socket);
        }
    });
    let created = Instant::now();
    jobs_lb(
        &bystander,
        "web",
        json!({
            "ports": [{"name": "tcp", "port": at.port(), "targetPort": at.port()}],
            "endpoint": {"host": at.ip().to_string(), "port": at.port()},
            "reachability": {"periodSeconds": 5, "timeoutSeconds": 2}}),
    )
    .await;
    let lbs: Api<LoadBalancer> = bystander.api();
    wait_for(&lbs, "web", "the bystander's endpoint Reachable", |l| {
        l.and_then(|l| condition(l, "Reachable"))
            .is_some_and(|(s, _)| s == "True")
    })
    .await
    .unwrap();
    let took = created.elapsed();
    println!("the bystander's endpoint was Reachable after {took:?}");
    assert!(
        took < Duration::from_secs(15),
        "the bystander's probe waited {took:?} behind the stalled tenants"
    );
    // Each stalled one is told, once its job met its deadline (a probe: 60 s; a look: 30 s).
    for (t, name, type_) in &stalled {
        let api: Api<LoadBalancer> = t.api();
        let deadline = Instant::now() + Duration::from_secs(180);
        let message = loop {
            // The shared apiserver, loaded by the stalled tenants' tests and others, may drop a
            // connection: asked again at the next round.
            let Ok(lb) = api.get(name).await else {
                assert!(
                    Instant::now() < deadline,
                    "{name}: no answer from the apiserver"
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            };
            let found = lb
                .status
                .unwrap_or_default()
                .conditions
                .into_iter()
                .find(|c| {
                    c.type_ == *type_
                        && c.status == "False"
                        && !["NotProbed", "WorkloadEndpointsPending"].contains(&c.reason.as_str())
                });
            if let Some(c) = found {
                break format!("{}: {}", c.reason, c.message);
            }
            assert!(Instant::now() < deadline, "{name}: no {type_} finding");
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        println!("{name}: {message}");
    }
    bystander.finish().await;
    // The controller that held the stalled tenants' LoadBalancers is gone: `finish` lets them go
    // as an operator would (`capi-lb uninstall --namespace`), or their finalizers would keep the
    // namespaces Terminating for good (16 of them did, loading the shared apiserver).
    for (t, _, _) in stalled {
        t.finish().await;
    }
}
