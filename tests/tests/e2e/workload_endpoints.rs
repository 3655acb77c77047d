//! `spec.workloadEndpoints` on real apiservers: capi-lb (as its ServiceAccount, in the
//! cluster under test) keeps the `default/kubernetes` endpoints of a workload cluster on the load
//! balancer's addresses. The workload cluster is the harness's `target` instance (a kube-apiserver
//! run with `--endpoint-reconciler-type=none`, as capi-lb asks; nothing there uses its
//! `default/kubernetes` endpoints), reached through a `<cluster>-kubeconfig` Secret with the
//! target's admin credentials inline, as Cluster API writes it.
//!
//! - The endpoints follow the in-memory load balancer's address through a change of its pool and
//!   back, and nothing is written while nothing changes (the resourceVersions stay).
//! - The API servers' own reconciler, played on the target (which runs without it): a task writes
//!   the API server's address back with the field manager `kube-apiserver` every 2 s, as its lease
//!   reconciler would every 10 s. capi-lb must stop writing and say `APIServerReconcilerActive`,
//!   naming the flag.
//! - The real reconciler: the harness's `fresh` instance runs kube-apiserver with
//!   `--endpoint-reconciler-type=lease` (advertising 192.0.2.80, a documentation address: the
//!   reconciler refuses loopback). capi-lb writes once, sees `kube-apiserver` write its address
//!   back, says `APIServerReconcilerActive` and writes nothing more.
//! - Through a provider swap (in-memory to the real Octavia API) and a drift repair (the Octavia
//!   load balancer and its floating IP deleted behind capi-lb's back) the endpoints follow.
//! - The workload cluster's user with exactly the rules docs/capi.md lists (a ServiceAccount and
//!   two Roles on the target, its token in the kubeconfig) is enough.
//! - A kubeconfig to a closed port: `WorkloadClusterUnreachable`, and the LoadBalancer stays Ready.
//! - A hostname-only load balancer (the in-memory provider with only `hostname`) resolved through
//!   the harness's BIND (`--dns-resolver`), whose records the test writes with nsupdate and a TTL
//!   of 5 s: nothing is written before the name resolves (`WorkloadHostnameUnresolved`); then the
//!   endpoints follow the A record, then A and AAAA (one slice per family), then the
//!   AAAA alone, each change within the TTL and a margin; an address `--address-deny` refuses is
//!   reported (`AddressRefused`) and not written; with the records deleted the last answer stays
//!   and `WorkloadHostnameUnresolved` names the hostname and what DNS answered.
//!
//! The tests that write the target's `default/kubernetes` hold
//! [`capi_lb_tests::capi_move::lock_target_default_kubernetes`] (one at a time, here and in any
//! other process using the same target).

use std::time::{Duration, Instant};

use capi_lb_api::LoadBalancer;
use capi_lb_tests::capi_move::{lock_target_default_kubernetes, target};
use capi_lb_tests::k8s::{
    TestNs, capi_cluster, capi_cluster_naming, eventually, external_dns, in_memory,
    install_capi_crds, load_balancer, merge, nsupdate, wait_for, warning_event,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Endpoints, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, ResourceExt};
use serde_json::json;

fn base64(bytes: Vec<u8>) -> String {
    serde_json::to_value(ByteString(bytes))
        .unwrap()
        .as_str()
        .unwrap()
        .to_string()
}

/// The target's admin kubeconfig with its files inline (capi-lb refuses files), for `server`.
fn inline_kubeconfig(server: Option<&str>) -> String {
    inline_kubeconfig_of(&target().kubeconfig, server)
}

/// The admin kubeconfig at `path` with its files inline, for `server` (default: its own).
fn inline_kubeconfig_of(path: &std::path::Path, server: Option<&str>) -> String {
    let config = Kubeconfig::read_from(path).unwrap();
    let cluster = config.clusters[0].cluster.clone().unwrap();
    let user = config.auth_infos[0].auth_info.clone().unwrap();
    let read = |p: &Option<String>| base64(std::fs::read(p.as_ref().unwrap()).unwrap());
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: wl\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: wl\n  context: {{cluster: wl, user: admin}}\ncurrent-context: wl\n",
        server.unwrap_or(cluster.server.as_deref().unwrap()),
        read(&cluster.certificate_authority),
        read(&user.client_certificate),
        read(&user.client_key),
    )
}

async fn target_client() -> Client {
    capi_lb::install_crypto_provider();
    let config = Kubeconfig::read_from(&target().kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(config, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// The Secret `<cluster>-kubeconfig` as Cluster API writes it.
async fn kubeconfig_secret(t: &TestNs, cluster: &str, kubeconfig: String) {
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{cluster}-kubeconfig")),
            labels: Some([("cluster.x-k8s.io/cluster-name".into(), cluster.into())].into()),
            ..Default::default()
        },
        type_: Some("cluster.x-k8s.io/secret".into()),
        data: Some([("value".into(), ByteString(kubeconfig.into_bytes()))].into()),
        ..Default::default()
    };
    t.api::<Secret>()
        .create(&Default::default(), &secret)
        .await
        .unwrap();
}

/// A control-plane LoadBalancer `name` of Cluster `cluster` keeping its workload endpoints, on the
/// InMemoryLoadBalancer of the same name, listening on `port`.
fn control_plane_lb(name: &str, cluster: &str, port: u16) -> serde_json::Value {
    load_balancer(
        name,
        name,
        json!({
            "clusterName": cluster,
            "ports": [{"name": "kube-apiserver", "port": port, "targetPort": 6443}],
            "controlPlane": {"publishEndpoint": false},
            "workloadEndpoints": {"enabled": true},
        }),
    )
}

/// Cluster `cluster`, naming LoadBalancer `name` (its consent to have its workload cluster's
/// endpoints written), and that LoadBalancer ([`control_plane_lb`]).
async fn consenting_lb(t: &TestNs, name: &str, cluster: &str, port: u16) {
    install_capi_crds(&t.client).await;
    t.create(capi_cluster_naming(cluster, name)).await;
    t.create(control_plane_lb(name, cluster, port)).await;
}

/// The `WorkloadEndpoints` condition once its reason is `reason`.
async fn workload_condition(t: &TestNs, name: &str, reason: &str) -> (String, String) {
    let lb = wait_for(
        &t.api::<LoadBalancer>(),
        name,
        &format!("WorkloadEndpoints {reason}"),
        |l: Option<&LoadBalancer>| {
            l.and_then(|l| l.status.as_ref())
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "WorkloadEndpoints"))
                .is_some_and(|c| c.reason == reason)
        },
    )
    .await
    .unwrap();
    let status = lb.status.unwrap();
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == "WorkloadEndpoints")
        .unwrap();
    (c.status.clone(), c.message.clone())
}

/// The target's `default/kubernetes` endpoints as (slice addresses, slice port, Endpoints
/// addresses, Endpoints port, resourceVersions).
async fn endpoints_now(wl: &Client) -> (Vec<String>, i32, Vec<String>, i32, (String, String)) {
    let slice = Api::<EndpointSlice>::namespaced(wl.clone(), "default")
        .get_opt("kubernetes")
        .await
        .unwrap();
    let endpoints = Api::<Endpoints>::namespaced(wl.clone(), "default")
        .get_opt("kubernetes")
        .await
        .unwrap();
    let (sa, sp, srv) = slice.map_or((vec![], 0, String::new()), |s| {
        (
            s.endpoints
                .iter()
                .flat_map(|e| e.addresses.clone())
                .collect(),
            s.ports
                .as_ref()
                .and_then(|p| p.first())
                .and_then(|p| p.port)
                .unwrap_or(0),
            s.resource_version().unwrap_or_default(),
        )
    });
    let (ea, ep, erv) = endpoints.map_or((vec![], 0, String::new()), |e| {
        let subsets = e.subsets.clone().unwrap_or_default();
        (
            subsets
                .iter()
                .flat_map(|s| s.addresses.iter().flatten().map(|a| a.ip.clone()))
                .collect(),
            subsets
                .first()
                .and_then(|s| s.ports.as_ref())
                .and_then(|p| p.first())
                .map_or(0, |p| p.port),
            e.resource_version().unwrap_or_default(),
        )
    });
    (sa, sp, ea, ep, (srv, erv))
}

async fn wait_endpoints(wl: &Client, address: &str, port: i32) -> Duration {
    let start = Instant::now();
    loop {
        let (sa, sp, ea, ep, _) = endpoints_now(wl).await;
        if sa == [address] && ea == [address] && sp == port && ep == port {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the target's default/kubernetes did not become {address}:{port}: slice {sa:?}:{sp}, Endpoints {ea:?}:{ep}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn lb_address(t: &TestNs, name: &str, prefix: &str) -> String {
    let lb = wait_for(
        &t.api::<LoadBalancer>(),
        name,
        &format!("an address in {prefix}"),
        |l: Option<&LoadBalancer>| {
            l.and_then(|l| l.status.as_ref()).is_some_and(|s| {
                s.ready && s.addresses.iter().any(|a| a.address.starts_with(prefix))
            })
        },
    )
    .await
    .unwrap();
    lb.status.unwrap().addresses[0].address.clone()
}

/// The API servers' endpoint reconciler played by the test: `address` written back every 2 s with
/// the field manager `kube-apiserver` (an update, as the reconciler does), until dropped.
fn play_api_server_reconciler(wl: Client, address: &'static str) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let endpoints = Api::<Endpoints>::namespaced(wl, "default");
        loop {
            let patch = json!({"subsets": [{"addresses": [{"ip": address}],
                                "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]});
            let _ = endpoints
                .patch(
                    "kubernetes",
                    &PatchParams {
                        field_manager: Some("kube-apiserver".into()),
                        ..Default::default()
                    },
                    &Patch::Merge(&patch),
                )
                .await;
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
}

/// The endpoints follow the address through a pool change and back, nothing is written while
/// idle, and then a reconciler writing back is detected and not fought.
#[tokio::test]
async fn kubernetes_default_follows_the_load_balancer_and_yields_to_the_api_servers_reconciler() {
    let _target = lock_target_default_kubernetes().await;
    let mut t = TestNs::new("wl-eps").await;
    let wl = target_client().await;
    kubeconfig_secret(&t, "wl", inline_kubeconfig(None)).await;
    t.start(t.options(&["inmemory"]));
    t.create(in_memory(
        "cp",
        json!({"addressPools": ["203.0.113.16/28"]}),
    ))
    .await;
    consenting_lb(&t, "cp", "wl", 7443).await;
    let first = lb_address(&t, "cp", "203.0.113.").await;
    let took = wait_endpoints(&wl, &first, 7443).await;
    let (status, message) = workload_condition(&t, "cp", "WorkloadEndpointsSynced").await;
    assert_eq!(status, "True", "{message}");
    assert!(message.contains(&format!("{first} port 7443")), "{message}");
    println!("first address {first} in the workload cluster within {took:?} of the look");

    // Idle: no write for 20 s (a look 15 s after the write included).
    let (_, _, _, _, before) = endpoints_now(&wl).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (_, _, _, _, after) = endpoints_now(&wl).await;
    assert_eq!(before, after, "capi-lb wrote while nothing changed");

    // The load balancer moves: another pool.
    let lbs = t.api::<capi_lb_api::InMemoryLoadBalancer>();
    merge(
        &lbs,
        "cp",
        json!({"spec": {"addressPools": ["198.51.100.200/29"]}}),
    )
    .await;
    let moved = lb_address(&t, "cp", "198.51.100.").await;
    let took = wait_endpoints(&wl, &moved, 7443).await;
    println!("moved to {moved}: in the workload cluster within {took:?}");
    // And back.
    merge(
        &lbs,
        "cp",
        json!({"spec": {"addressPools": ["203.0.113.16/28"]}}),
    )
    .await;
    let back = lb_address(&t, "cp", "203.0.113.").await;
    wait_endpoints(&wl, &back, 7443).await;

    // The API servers' own reconciler writes its address back: capi-lb yields and says so.
    let reconciler = play_api_server_reconciler(wl.clone(), "192.0.2.77");
    let started = Instant::now();
    let (status, message) = workload_condition(&t, "cp", "APIServerReconcilerActive").await;
    println!("reconciler detected within {:?}", started.elapsed());
    assert_eq!(status, "False");
    assert!(
        message.contains("--endpoint-reconciler-type=none"),
        "{message}"
    );
    assert!(message.contains("kube-apiserver"), "{message}");
    warning_event(&t, "APIServerReconcilerActive").await;
    // Not fought: the slice capi-lb wrote is no longer rewritten (its resourceVersion stays)
    // while the reconciler keeps its Endpoints.
    reconciler.abort();
    let (_, _, _, _, held) = endpoints_now(&wl).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (_, _, ea, _, later) = endpoints_now(&wl).await;
    assert_eq!(
        held, later,
        "capi-lb wrote while the API servers' reconciler was active"
    );
    assert_eq!(ea, ["192.0.2.77"]);
    t.finish().await;
}

/// The LoadBalancer `cp`'s first address once it is Ready with one that is not in `not`.
async fn new_address(t: &TestNs, what: &str, not: &[&str]) -> String {
    let lb = wait_for(&t.api::<LoadBalancer>(), "cp", what, |l| {
        l.and_then(|l| l.status.as_ref()).is_some_and(|s| {
            s.ready
                && s.addresses
                    .first()
                    .is_some_and(|a| !not.contains(&a.address.as_str()))
        })
    })
    .await
    .unwrap();
    lb.status.unwrap().addresses[0].address.clone()
}

/// The endpoints follow the load balancer through a provider swap (in-memory to the real Octavia
/// API, made before break) and a drift repair (the Octavia load balancer and its floating IP
/// deleted behind capi-lb's back, as a cloud clean-up script would: recreated at a new floating IP).
#[tokio::test]
async fn kubernetes_default_follows_a_provider_swap_and_a_drift_repair() {
    use capi_lb_tests::octavia::{self, Harness};

    let _target = lock_target_default_kubernetes().await;
    let (h, _api) = octavia::shared_api().await;
    let wl = target_client().await;
    let mut t = TestNs::new("wl-swap").await;
    let in_ns = |mut doc: serde_json::Value| {
        doc["metadata"]["namespace"] = json!(t.ns);
        doc
    };
    kubeconfig_secret(&t, "swap", inline_kubeconfig(None)).await;
    t.create(in_ns(Harness::secret("openstack", &h.clouds_yaml)))
        .await;
    let floating = json!({"floatingIP": {"networkID": h.var("FIP_NETWORK_ID")}});
    t.create(in_ns(octavia::olb("cp-os", &h, floating))).await;
    t.create(in_memory(
        "cp",
        json!({"addressPools": ["203.0.113.80/28"]}),
    ))
    .await;
    consenting_lb(&t, "cp", "swap", 7443).await;
    let mut options = t.options(&["inmemory", "octavia"]);
    options.drift_check = Duration::from_secs(10);
    t.start(options);
    let first = lb_address(&t, "cp", "203.0.113.").await;
    wait_endpoints(&wl, &first, 7443).await;

    // The provider swap: the LoadBalancer moves to the OctaviaLoadBalancer.
    merge(
        &t.api::<LoadBalancer>(),
        "cp",
        json!({"spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                              "kind": "OctaviaLoadBalancer", "name": "cp-os"}}}),
    )
    .await;
    let swapped = new_address(&t, "Ready on Octavia", &[&first]).await;
    let took = wait_endpoints(&wl, &swapped, 7443).await;
    println!("swapped from {first} to {swapped}: in the workload cluster within {took:?}");

    // The drift repair: the Octavia load balancer and its floating IP are deleted in the cloud.
    let status = t
        .api::<capi_lb_api::OctaviaLoadBalancer>()
        .get("cp-os")
        .await
        .unwrap()
        .status
        .unwrap();
    let (id, fip) = (
        status.load_balancer_id.unwrap(),
        status.floating_ip_id.unwrap(),
    );
    let (code, body) = h.octavia(
        "DELETE",
        &format!("lbaas/loadbalancers/{id}?cascade=true"),
        None,
    );
    assert_eq!(code, 204, "{body}");
    let (code, body) = h.neutron("DELETE", &format!("floatingips/{fip}"), None);
    assert_eq!(code, 204, "{body}");
    let repaired = new_address(&t, "Ready at a new floating IP", &[&first, &swapped]).await;
    let took = wait_endpoints(&wl, &repaired, 7443).await;
    println!("repaired at {repaired} (was {swapped}): in the workload cluster within {took:?}");
    t.finish().await;
}

/// The workload cluster's user needs only what docs/capi.md lists: a ServiceAccount of the target
/// bound to exactly those rules (Roles in `default` and `kube-system`), its token in the kubeconfig.
/// capi-lb syncs, follows a change, and every request it makes there is allowed (a refused one would
/// leave the condition on `WorkloadClusterUnreachable` or an error).
#[tokio::test]
async fn the_workload_clusters_user_needs_only_the_documented_rules() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};

    let _target = lock_target_default_kubernetes().await;
    let wl = target_client().await;
    let account = capi_lb_tests::k8s::unique_name("capi-lb-workload");
    let accounts: Api<ServiceAccount> = Api::namespaced(wl.clone(), "default");
    accounts
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": account}})).unwrap(),
        )
        .await
        .unwrap();
    let rules = [
        (
            "default",
            json!([
                {"apiGroups": [""], "resources": ["endpoints"],
                 "verbs": ["get", "list", "create", "patch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                 "verbs": ["get", "list", "create", "patch", "delete"]},
            ]),
        ),
        (
            "kube-system",
            json!([{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list"]}]),
        ),
    ];
    for (ns, rules) in &rules {
        let role: Role =
            serde_json::from_value(json!({"metadata": {"name": account}, "rules": rules})).unwrap();
        Api::<Role>::namespaced(wl.clone(), ns)
            .create(&Default::default(), &role)
            .await
            .unwrap();
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": account},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": "default"}],
        }))
        .unwrap();
        Api::<RoleBinding>::namespaced(wl.clone(), ns)
            .create(&Default::default(), &binding)
            .await
            .unwrap();
    }
    let token = capi_lb_tests::k8s::service_account_token(&wl, "default", &account).await;
    let admin = inline_kubeconfig(None);
    let (head, _) = admin.split_once("users:").unwrap();
    let kubeconfig = format!(
        "{head}users:\n- name: admin\n  user:\n    token: {token}\ncontexts:\n- name: wl\n  context: {{cluster: wl, user: admin}}\ncurrent-context: wl\n"
    );

    let mut t = TestNs::new("wl-rbac").await;
    kubeconfig_secret(&t, "least", kubeconfig).await;
    t.start(t.options(&["inmemory"]));
    t.create(in_memory(
        "cp",
        json!({"addressPools": ["203.0.113.48/28"]}),
    ))
    .await;
    consenting_lb(&t, "cp", "least", 7443).await;
    let first = lb_address(&t, "cp", "203.0.113.").await;
    wait_endpoints(&wl, &first, 7443).await;
    let (status, message) = workload_condition(&t, "cp", "WorkloadEndpointsSynced").await;
    assert_eq!(status, "True", "{message}");
    merge(
        &t.api::<capi_lb_api::InMemoryLoadBalancer>(),
        "cp",
        json!({"spec": {"addressPools": ["198.51.100.208/29"]}}),
    )
    .await;
    let moved = lb_address(&t, "cp", "198.51.100.").await;
    wait_endpoints(&wl, &moved, 7443).await;
    let (status, message) = workload_condition(&t, "cp", "WorkloadEndpointsSynced").await;
    assert_eq!(status, "True", "{message}");
    t.finish().await;
    for (ns, _) in &rules {
        let _ = Api::<RoleBinding>::namespaced(wl.clone(), ns)
            .delete(&account, &Default::default())
            .await;
        let _ = Api::<Role>::namespaced(wl.clone(), ns)
            .delete(&account, &Default::default())
            .await;
    }
    let _ = accounts.delete(&account, &Default::default()).await;
}

/// The real thing: a workload cluster whose kube-apiserver runs its own lease endpoint reconciler
/// (the harness's `fresh` instance). capi-lb's one write is undone by it within its 10 s period;
/// capi-lb says so and then leaves `default/kubernetes` alone.
#[tokio::test]
async fn the_real_api_servers_reconciler_is_seen_and_not_fought() {
    let fresh = capi_lb_tests::fresh::fresh();
    let wl = capi_lb_tests::fresh::fresh_admin_client().await;
    let (_, _, ea, _, _) = endpoints_now(&wl).await;
    assert_eq!(
        ea,
        ["192.0.2.80"],
        "the fresh instance advertises 192.0.2.80"
    );
    let mut t = TestNs::new("wl-real").await;
    kubeconfig_secret(&t, "real", inline_kubeconfig_of(&fresh.kubeconfig, None)).await;
    t.start(t.options(&["inmemory"]));
    t.create(in_memory(
        "cp",
        json!({"addressPools": ["203.0.113.32/28"]}),
    ))
    .await;
    consenting_lb(&t, "cp", "real", 7443).await;
    let started = Instant::now();
    let (status, message) = workload_condition(&t, "cp", "APIServerReconcilerActive").await;
    println!(
        "the real reconciler detected within {:?}",
        started.elapsed()
    );
    assert_eq!(status, "False");
    assert!(
        message.contains("--endpoint-reconciler-type=none") && message.contains("kube-apiserver"),
        "{message}"
    );
    warning_event(&t, "APIServerReconcilerActive").await;
    // Not fought: the API server's own address stays, and nothing is written any more.
    let (_, _, _, _, held) = endpoints_now(&wl).await;
    tokio::time::sleep(Duration::from_secs(25)).await;
    let (_, _, ea, _, later) = endpoints_now(&wl).await;
    assert_eq!(ea, ["192.0.2.80"]);
    assert_eq!(
        held, later,
        "capi-lb wrote while the real reconciler was active"
    );
    t.finish().await;
}

/// A workload cluster that does not answer is a condition, not a failed reconcile.
#[tokio::test]
async fn a_workload_cluster_that_does_not_answer_is_reported_and_the_load_balancer_stays_ready() {
    let mut t = TestNs::new("wl-down").await;
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    kubeconfig_secret(
        &t,
        "gone",
        inline_kubeconfig(Some(&format!("https://{closed}"))),
    )
    .await;
    t.start(t.options(&["inmemory"]));
    t.create(in_memory(
        "down",
        json!({"addressPools": ["203.0.113.32/28"]}),
    ))
    .await;
    consenting_lb(&t, "down", "gone", 6443).await;
    let (status, message) = workload_condition(&t, "down", "WorkloadClusterUnreachable").await;
    assert_eq!(status, "False");
    assert!(
        message.contains("default/kubernetes endpoints stay"),
        "{message}"
    );
    warning_event(&t, "WorkloadClusterUnreachable").await;
    let lb = t.api::<LoadBalancer>().get("down").await.unwrap();
    assert!(lb.status.unwrap().ready);
    t.finish().await;
}

/// The target's `default/kubernetes` slices capi-lb writes, by name: (addressType, addresses),
/// and the v1 Endpoints' addresses.
async fn families_now(wl: &Client) -> (Vec<(String, String, Vec<String>)>, Vec<String>) {
    let slices = Api::<EndpointSlice>::namespaced(wl.clone(), "default");
    let mut found = Vec::new();
    for name in ["kubernetes", "kubernetes-ipv4", "kubernetes-ipv6"] {
        if let Some(s) = slices.get_opt(name).await.unwrap() {
            let mut addresses: Vec<String> = s
                .endpoints
                .iter()
                .flat_map(|e| e.addresses.clone())
                .collect();
            addresses.sort();
            found.push((name.to_string(), s.address_type.clone(), addresses));
        }
    }
    let (_, _, endpoints, _, _) = endpoints_now(wl).await;
    (found, endpoints)
}

/// Wait until the target's slices are `slices` ((name, addressType, address)) and its Endpoints
/// `endpoints`, within `within`; how long it took.
async fn wait_families(
    wl: &Client,
    slices: &[(&str, &str, &str)],
    endpoints: &str,
    within: Duration,
) -> Duration {
    let want: Vec<(String, String, Vec<String>)> = slices
        .iter()
        .map(|(n, f, a)| (n.to_string(), f.to_string(), vec![a.to_string()]))
        .collect();
    let start = Instant::now();
    loop {
        let (found, ea) = families_now(wl).await;
        if found == want && ea == [endpoints] {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "the target's default/kubernetes did not become {want:?} (Endpoints {endpoints}) within {within:?}: slices {found:?}, Endpoints {ea:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The TTL of the test's records: capi-lb asks again after it (its floor is 5 s).
const TTL: u64 = 5;

/// A hostname-only load balancer is resolved through the DNS server of `--dns-resolver` (the
/// harness's BIND), and its endpoints follow the records: A, A and AAAA, AAAA; a refused address
/// is not written; deleted records keep the last answer.
#[tokio::test]
async fn a_hostname_only_load_balancer_is_resolved_and_followed_through_its_records() {
    let _target = lock_target_default_kubernetes().await;
    let mut t = TestNs::new("wl-dns").await;
    let wl = target_client().await;
    let host = format!("{}.{}", t.ns, external_dns().zone);
    let set = |records: &[(&str, &str)]| {
        let mut commands = format!("update delete {host} A\nupdate delete {host} AAAA\n");
        for (kind, address) in records {
            commands.push_str(&format!("update add {host} {TTL} {kind} {address}\n"));
        }
        nsupdate(&commands);
    };
    // Followed within the TTL, plus a margin for the look, the writes and a loaded machine.
    let within = Duration::from_secs(TTL + 10);
    set(&[]);

    kubeconfig_secret(&t, "wlh", inline_kubeconfig(None)).await;
    let mut options = t.options(&["inmemory"]);
    options.dns_resolver = Some(external_dns().server);
    options.address_deny = vec!["198.51.100.0/24".parse().unwrap()];
    t.start(options);
    // No pools: the load balancer has only its hostname.
    t.create(in_memory(
        "cp",
        json!({"addressPools": [], "hostname": host}),
    ))
    .await;
    consenting_lb(&t, "cp", "wlh", 7443).await;
    // No record yet: nothing is written, and the condition says why.
    let (_, _, _, _, before) = endpoints_now(&wl).await;
    let (status, message) = workload_condition(&t, "cp", "WorkloadHostnameUnresolved").await;
    assert_eq!(status, "False");
    assert!(
        message.contains(&format!("{host} does not resolve"))
            && message.contains("NXDOMAIN")
            && message.contains("never did")
            && message.contains("nothing is written"),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, _, _, _, after) = endpoints_now(&wl).await;
    assert_eq!(before, after, "written without an answer");
    // The record appears: asked again within 10 s, and written.
    set(&[("A", "203.0.113.40")]);
    let took = wait_endpoints(&wl, "203.0.113.40", 7443).await;
    println!("{host} A 203.0.113.40 in the workload cluster within {took:?}");
    let (status, message) = workload_condition(&t, "cp", "WorkloadEndpointsSynced").await;
    assert_eq!(status, "True", "{message}");
    assert!(
        message.contains(&format!("{host} resolves to 203.0.113.40")),
        "{message}"
    );
    // The load balancer itself reports only its hostname.
    let lb = t.api::<LoadBalancer>().get("cp").await.unwrap();
    let addresses: Vec<String> = lb
        .status
        .unwrap()
        .addresses
        .iter()
        .map(|a| a.address.clone())
        .collect();
    assert_eq!(addresses, std::slice::from_ref(&host));

    // The A record changes: followed within the TTL and a margin.
    set(&[("A", "203.0.113.41")]);
    let took = wait_families(
        &wl,
        &[("kubernetes", "IPv4", "203.0.113.41")],
        "203.0.113.41",
        within,
    )
    .await;
    println!("A changed: followed within {took:?}");

    // An AAAA record too: one slice per family, the Endpoints of the primary (IPv4) one.
    set(&[("A", "203.0.113.41"), ("AAAA", "2001:db8::41")]);
    let took = wait_families(
        &wl,
        &[
            ("kubernetes", "IPv4", "203.0.113.41"),
            ("kubernetes-ipv6", "IPv6", "2001:db8::41"),
        ],
        "203.0.113.41",
        within,
    )
    .await;
    println!("AAAA added: dual-stack within {took:?}");

    // The A record goes: IPv6 only, the slice `kubernetes` now of family IPv6.
    set(&[("AAAA", "2001:db8::41")]);
    let took = wait_families(
        &wl,
        &[("kubernetes", "IPv6", "2001:db8::41")],
        "2001:db8::41",
        within,
    )
    .await;
    println!("A removed: IPv6 only within {took:?}");
    set(&[("AAAA", "2001:db8::42")]);
    let took = wait_families(
        &wl,
        &[("kubernetes", "IPv6", "2001:db8::42")],
        "2001:db8::42",
        within,
    )
    .await;
    println!("AAAA changed: followed within {took:?}");
    // The condition is written after the workload cluster's objects: it may lag them a moment.
    let expected = format!("{host} resolves to 2001:db8::42");
    eventually("WorkloadEndpointsSynced names the new address", || async {
        let (status, message) = workload_condition(&t, "cp", "WorkloadEndpointsSynced").await;
        (status == "True" && message.contains(&expected)).then_some(())
    })
    .await;

    // An address the admin's --address-deny refuses: reported, never written.
    set(&[("A", "198.51.100.7")]);
    let (status, message) = workload_condition(&t, "cp", "AddressRefused").await;
    assert_eq!(status, "False");
    assert!(message.contains("198.51.100.7"), "{message}");
    assert!(message.contains("--address-deny"), "{message}");
    warning_event(&t, "AddressRefused").await;
    let (_, _, _, _, before) = endpoints_now(&wl).await;
    tokio::time::sleep(Duration::from_secs(TTL + 3)).await;
    let (_, _, _, _, after) = endpoints_now(&wl).await;
    assert_eq!(before, after, "a refused address was written");
    wait_families(
        &wl,
        &[("kubernetes", "IPv6", "2001:db8::42")],
        "2001:db8::42",
        Duration::from_secs(1),
    )
    .await;

    // Back to an allowed address, then the records go: the last answer stays, and says so.
    set(&[("AAAA", "2001:db8::43")]);
    wait_families(
        &wl,
        &[("kubernetes", "IPv6", "2001:db8::43")],
        "2001:db8::43",
        within,
    )
    .await;
    set(&[]);
    let started = Instant::now();
    let (status, message) = workload_condition(&t, "cp", "WorkloadHostnameUnresolved").await;
    println!("records deleted: reported within {:?}", started.elapsed());
    assert_eq!(status, "False");
    assert!(message.contains(&host), "{message}");
    assert!(message.contains("NXDOMAIN"), "{message}");
    assert!(
        message.contains("its last answer, 2001:db8::43, is kept"),
        "{message}"
    );
    warning_event(&t, "WorkloadHostnameUnresolved").await;
    let (_, _, _, _, before) = endpoints_now(&wl).await;
    tokio::time::sleep(Duration::from_secs(2 * TTL + 3)).await;
    let (_, _, _, _, after) = endpoints_now(&wl).await;
    assert_eq!(
        before, after,
        "capi-lb wrote while the hostname did not resolve"
    );
    wait_families(
        &wl,
        &[("kubernetes", "IPv6", "2001:db8::43")],
        "2001:db8::43",
        Duration::from_secs(1),
    )
    .await;
    t.finish().await;
}

/// Without its Cluster's consent a LoadBalancer writes nothing into the workload cluster, whatever
/// `spec.workloadEndpoints` says (a LoadBalancer the Cluster never named rewrote its
/// `default/kubernetes` within a second, through Cluster API's admin kubeconfig); once the Cluster
/// names it, the endpoints follow.
#[tokio::test]
async fn the_workload_cluster_is_written_only_with_the_clusters_consent() {
    let _target = lock_target_default_kubernetes().await;
    let mut t = TestNs::new("wl-consent").await;
    let wl = target_client().await;
    install_capi_crds(&t.client).await;
    kubeconfig_secret(&t, "wlc", inline_kubeconfig(None)).await;
    t.create(capi_cluster("wlc")).await;
    t.start(t.options(&["inmemory"]));
    t.create(in_memory(
        "cp",
        json!({"addressPools": ["203.0.113.40/29"]}),
    ))
    .await;
    let (_, _, _, _, before) = endpoints_now(&wl).await;
    t.create(control_plane_lb("cp", "wlc", 7443)).await;
    let address = lb_address(&t, "cp", "203.0.113.").await;
    let (status, message) = workload_condition(&t, "cp", "NotNamedByCluster").await;
    assert_eq!(status, "False");
    assert!(message.contains("does not name"), "{message}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (_, _, _, _, after) = endpoints_now(&wl).await;
    assert_eq!(before, after, "written without the Cluster's consent");
    // The Cluster names the LoadBalancer: written.
    let clusters = capi_lb_tests::k8s::capi_api(&t.client, &t.ns, "Cluster")
        .await
        .unwrap();
    merge(
        &clusters,
        "wlc",
        json!({"metadata": {"annotations": {"loadbalancer.cluster.x-k8s.io/loadBalancerRef": "cp"}}}),
    )
    .await;
    wait_endpoints(&wl, &address, 7443).await;
    let (status, message) = workload_condition(&t, "cp", "WorkloadEndpointsSynced").await;
    assert_eq!(status, "True", "{message}");
    t.finish().await;
}
