//! A tenant who may write LoadBalancers and provider objects in one namespace cannot make capi-lb
//! read or change anything outside what it manages (the "confused deputy"), on a real apiserver,
//! with the real RBAC of capi-lb's ServiceAccount.
//!
//! The tenant is user `tenant`, bound by a Role of the test namespace to LoadBalancers, the
//! in-memory, Octavia and kube-dc provider kinds, and `create` on Clusters; everything of theirs is
//! created through a client impersonating them, so the test shows they could do exactly that. The
//! victims are objects the tenant may not touch (checked: reading them is refused), labelled to
//! match the tenant's selectors: a Service, a ConfigMap, a Cluster and a Secret whose every value
//! is `hunter2-do-not-leak`. The tenant tries to
//!
//! 1. make them targets (`spec.targetKind` Service, ConfigMap, Secret, Cluster; the controller runs
//!    as an administrator who listed Service, Secret and Cluster in `--target-kinds` on top of
//!    Machines, to show that the kinds capi-lb manages itself are refused even then):
//!    TargetsReady False `TargetKindNotAllowed`, with an Event;
//! 2. use them as infrastructure (`spec.infrastructureRef` to the Secret, the ConfigMap, the
//!    Cluster): InfrastructureReady False `ProviderNotEnabled`;
//! 3. have the Octavia and kube-dc providers parse the Secret as their credentials (a clouds.yaml,
//!    a kubeconfig): InfrastructureReady False, and the Secret's content appears nowhere in the
//!    namespace (conditions, statuses, Events, any object of any kind), also while the
//!    LoadBalancers are deleted;
//! 4. have capi-lb read the Secret as a Cluster's control plane (`spec.controlPlaneRef`):
//!    ClusterEndpoint False `ControlPlaneUnreadable` where the apiserver lets such a Cluster exist;
//! 5. select a Machine of another namespace: never a target, never annotated.
//!
//! Besides the apiserver's own checks, every request the controller sends is recorded: it fetches
//! none of the victims by name, lists no Secrets or ConfigMaps, and sends nothing to the other
//! namespace; it reads the Secret only where the tenant named it as provider credentials (3: a
//! Secret of the namespace, by design, whose content is then never quoted), and writes no victim:
//! their resourceVersions (the Cluster's: its spec and metadata, since Cluster API's own manager
//! updates its status) are unchanged, no capi-lb annotation, finalizer or field manager is on them,
//! and no request of capi-lb's ServiceAccount was refused.

use capi_lb_api::LoadBalancer;
use capi_lb_api::constants::FIELD_MANAGER;
use capi_lb_api::loadbalancer::TargetKind;
use capi_lb_api::target::TargetKeys;
use capi_lb_tests::k8s::{
    TestNs, capi, capi_api, capi_cluster, condition, dynamic_api, eventually, in_memory,
    install_capi_crds, install_kube_dc_crds, load_balancer, machine, set_machine_ip, wait_for,
    wait_gone,
};
use capi_lb_tests::tenant::{create_as, grant_tenant, tenant_client};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::discovery::{Discovery, Scope, verbs};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// Every value of the victim Secret.
const SECRET_VALUE: &str = "hunter2-do-not-leak";
/// What must appear nowhere but in the Secret: the value's start, and the value base64-encoded
/// (as a dumped Secret would show it).
const LEAKS: [&str; 2] = ["hunter2", "aHVudGVyMi1kby1ub3QtbGVhaw"];
/// The label the victims carry and the tenant's selectors match.
const VICTIM_LABEL: (&str, &str) = ("tenancy.capi-lb.io/victim", "yes");
/// The label of the Machines of scenario 5.
const MACHINE_LABEL: (&str, &str) = ("tenancy.capi-lb.io/machine", "yes");

fn selector((key, value): (&str, &str)) -> Value {
    json!({"matchLabels": {key: value}})
}

fn labels((key, value): (&str, &str)) -> Value {
    json!({key: value})
}

/// Create `doc` as the tenant; panics with the apiserver's refusal.
async fn tenant_creates(tenant: &Client, t: &TestNs, doc: Value) {
    if let Err(e) = create_as(tenant, &t.ns, &doc).await {
        panic!(
            "the tenant may create {} {}, but: {e}",
            doc["kind"], doc["metadata"]["name"]
        );
    }
}

/// A LoadBalancer `name` on its own InMemoryLoadBalancer, both created by the tenant.
async fn tenant_lb(tenant: &Client, t: &TestNs, name: &str, spec: Value) {
    tenant_creates(tenant, t, in_memory(name, json!({}))).await;
    tenant_creates(tenant, t, load_balancer(name, name, spec)).await;
}

/// A LoadBalancer `name` on the `kind` (a provider's infrastructure kind) object `infra`.
fn lb_on(name: &str, kind: &str, infra: &str, spec: Value) -> Value {
    let mut lb = load_balancer(name, infra, spec);
    lb["spec"]["infrastructureRef"]["kind"] = json!(kind);
    lb
}

/// Whether `result` is the apiserver's refusal with `code`.
fn refused(result: &Result<DynamicObject, kube::Error>, code: u16) -> bool {
    matches!(result, Err(kube::Error::Api(e)) if e.code == code)
}

/// Wait until LoadBalancer `lb`'s condition `type_` is False with `reason`; its message.
async fn wait_false(t: &TestNs, lb: &str, type_: &str, reason: &str) -> String {
    let got = wait_for(
        &t.api::<LoadBalancer>(),
        lb,
        &format!("{lb}: {type_} False {reason}"),
        |l| l.and_then(|l| condition(l, type_)) == Some(("False".into(), reason.into())),
    )
    .await
    .unwrap();
    message(&got, type_)
}

/// The message of `lb`'s condition `type_`.
fn message(lb: &LoadBalancer, type_: &str) -> String {
    lb.status
        .iter()
        .flat_map(|s| &s.conditions)
        .find(|c| c.type_ == type_)
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// Wait for an Event (events.k8s.io/v1) about LoadBalancer `lb` with `reason`; its note.
async fn wait_event(t: &TestNs, lb: &str, reason: &str) -> String {
    eventually(&format!("an Event {reason} about {lb}"), || async {
        t.api::<Event>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("LoadBalancer")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(lb)
            })
            .map(|e| e.note.unwrap_or_default())
    })
    .await
}

/// One victim: its API and the object as it was created.
struct Victim {
    api: Api<DynamicObject>,
    before: DynamicObject,
}

impl Victim {
    /// Create `doc` in `t`'s namespace as the admin.
    async fn create(t: &TestNs, doc: Value) -> Self {
        let api = dynamic_api(&t.client, Some(&t.ns), &doc).await.unwrap();
        let before = t.create(doc).await;
        Self { api, before }
    }

    fn describe(&self) -> String {
        let kind = self.before.types.as_ref().map_or("", |t| t.kind.as_str());
        format!("{kind} {}", self.before.name_any())
    }

    /// Nothing of capi-lb on it, and unchanged: the same resourceVersion, or (`status_changes`: a
    /// kind another controller updates) the same spec, labels, annotations and owners.
    async fn assert_untouched(&self, status_changes: bool) {
        let now = self.api.get(&self.before.name_any()).await.unwrap();
        let what = self.describe();
        let ours =
            |key: &str| key.contains("loadbalancer.cluster.x-k8s.io") || key.contains("capi-lb");
        assert!(
            !now.annotations().keys().any(|k| ours(k)),
            "{what}: {:?}",
            now.annotations()
        );
        assert!(
            !now.finalizers().iter().any(|f| ours(f)),
            "{what}: {:?}",
            now.finalizers()
        );
        let managers: Vec<&str> = now
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|m| m.manager.as_deref())
            .collect();
        assert!(!managers.contains(&FIELD_MANAGER), "{what}: {managers:?}");
        if status_changes {
            assert_eq!(now.data["spec"], self.before.data["spec"], "{what}");
            assert_eq!(now.labels(), self.before.labels(), "{what}");
            assert_eq!(now.annotations(), self.before.annotations(), "{what}");
            assert_eq!(
                now.owner_references(),
                self.before.owner_references(),
                "{what}"
            );
        } else {
            assert_eq!(
                now.resource_version(),
                self.before.resource_version(),
                "{what} changed: {now:?}"
            );
        }
    }
}

/// Every object of every namespaced kind in `ns` but the victim Secret whose JSON contains one of
/// [`LEAKS`], as `Kind name`, and the kinds looked at.
async fn leaks(client: &Client, ns: &str) -> (Vec<String>, Vec<String>) {
    let discovery = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    let (mut found, mut kinds) = (Vec::new(), Vec::new());
    for group in discovery.groups() {
        for (resource, caps) in group.resources_by_stability() {
            if caps.scope != Scope::Namespaced || !caps.supports_operation(verbs::LIST) {
                continue;
            }
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
            // Other tests' CRDs come and go meanwhile: a kind that cannot be listed has nothing
            // here.
            let Ok(list) = api.list(&ListParams::default()).await else {
                continue;
            };
            kinds.push(resource.kind.clone());
            for object in list.items {
                if resource.group.is_empty()
                    && resource.kind == "Secret"
                    && object.name_any() == "victim"
                {
                    continue;
                }
                let text = serde_json::to_string(&object).unwrap();
                if LEAKS.iter().any(|leak| text.contains(leak)) {
                    found.push(format!("{} {}: {text}", resource.kind, object.name_any()));
                }
            }
        }
    }
    (found, kinds)
}

/// Nothing in `t`'s namespace quotes the Secret (and the kinds where it would show were looked at).
async fn assert_no_leak(t: &TestNs, when: &str) {
    let (found, kinds) = leaks(&t.client, &t.ns).await;
    assert!(
        found.is_empty(),
        "{when}: the Secret's content leaked: {found:#?}"
    );
    for kind in [
        "Event",
        "LoadBalancer",
        "OctaviaLoadBalancer",
        "KubeDCLoadBalancer",
    ] {
        assert!(
            kinds.iter().any(|k| k == kind),
            "{kind} not looked at: {kinds:?}"
        );
    }
}

/// The controller's requests as (method, path without the query).
fn requests(t: &TestNs) -> Vec<(String, String)> {
    t.requests
        .list()
        .into_iter()
        .map(|r| {
            let (method, uri) = r.split_once(' ').unwrap();
            let path = uri.split_once('?').map_or(uri, |(p, _)| p);
            (method.to_string(), path.to_string())
        })
        .collect()
}

/// Remove every finalizer of `name` (as an operator would: see the deletion of scenario 3).
async fn strip_finalizers(api: &Api<DynamicObject>, name: &str) {
    match api
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&json!({"metadata": {"finalizers": null}})),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => panic!("removing the finalizers of {name}: {e}"),
    }
}

#[tokio::test]
async fn a_tenant_cannot_make_capi_lb_read_or_change_what_it_may_not_touch() {
    let mut t = TestNs::new("e2e-tenancy").await;
    let other = TestNs::new("e2e-tenancy-other").await;
    install_capi_crds(&t.client).await;
    install_kube_dc_crds(&t.client).await;
    let tenant = tenant_client().await;
    grant_tenant(&t, &tenant).await;

    // The victims.
    let victim = |api_version: &str, kind: &str, rest: Value| {
        let mut doc = json!({"apiVersion": api_version, "kind": kind,
            "metadata": {"name": "victim", "labels": labels(VICTIM_LABEL)}});
        for (key, value) in rest.as_object().unwrap() {
            doc[key] = value.clone();
        }
        doc
    };
    let service = Victim::create(
        &t,
        victim(
            "v1",
            "Service",
            json!({"spec": {"ports": [{"name": "https", "port": 443}]}}),
        ),
    )
    .await;
    let config_map = Victim::create(
        &t,
        victim("v1", "ConfigMap", json!({"data": {"kept": "as it is"}})),
    )
    .await;
    let secret = Victim::create(
        &t,
        victim(
            "v1",
            "Secret",
            json!({"stringData": {"clouds.yaml": SECRET_VALUE, "value": SECRET_VALUE}}),
        ),
    )
    .await;
    let mut cluster_doc = capi_cluster("victim");
    cluster_doc["metadata"]["labels"] = labels(VICTIM_LABEL);
    let capi_victim = Victim::create(&t, cluster_doc).await;
    // They are out of the tenant's reach.
    for v in [&service, &config_map, &secret, &capi_victim] {
        let types = v.before.types.clone().unwrap();
        let doc = json!({"apiVersion": types.api_version, "kind": types.kind});
        let as_tenant = dynamic_api(&tenant, Some(&t.ns), &doc).await.unwrap();
        assert!(
            matches!(as_tenant.get("victim").await, Err(kube::Error::Api(e)) if e.code == 403),
            "the tenant may read {}: the test would prove nothing",
            v.describe()
        );
    }

    let mut options = t.options(&["inmemory", "octavia", "kubedc"]);
    // An administrator who let LoadBalancers name Services, Secrets and Clusters (core kinds can be
    // listed only here, in code: `--target-kinds` refuses them; capi-lb refuses them all the same).
    let target = |api_group: &str, kind: &str| TargetKind {
        api_group: api_group.into(),
        kind: kind.into(),
    };
    options.target_kinds.extend([
        target("", "Service"),
        target("", "Secret"),
        target("cluster.x-k8s.io", "Cluster"),
    ]);
    t.start(options);

    // 1. The victims as targets.
    let target_kinds = [
        (
            "target-service",
            "",
            "Service",
            "core kinds are never targets",
        ),
        (
            "target-secret",
            "",
            "Secret",
            "core kinds are never targets",
        ),
        (
            "target-cluster",
            "cluster.x-k8s.io",
            "Cluster",
            "for its own purposes",
        ),
        (
            "target-configmap",
            "",
            "ConfigMap",
            "core kinds are never targets",
        ),
    ];
    for (name, group, kind, _) in target_kinds {
        tenant_lb(
            &tenant,
            &t,
            name,
            json!({"targetKind": {"apiGroup": group, "kind": kind},
                   "selector": selector(VICTIM_LABEL)}),
        )
        .await;
    }

    // 2. The victims as infrastructure. The schema refuses the core group (an empty apiGroup);
    // "core" is the nearest it lets through.
    let no_group = create_as(
        &tenant,
        &t.ns,
        &json!({"apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
                "metadata": {"name": "infra-no-group"},
                "spec": {"infrastructureRef": {"apiGroup": "", "kind": "Secret", "name": "victim"}}}),
    )
    .await;
    assert!(refused(&no_group, 422), "{no_group:?}");
    let infra_refs = [
        ("infra-secret", "core", "Secret"),
        ("infra-configmap", "core", "ConfigMap"),
        ("infra-cluster", "cluster.x-k8s.io", "Cluster"),
    ];
    for (name, group, kind) in infra_refs {
        let mut lb = load_balancer(name, "victim", json!({}));
        lb["spec"]["infrastructureRef"] =
            json!({"apiGroup": group, "kind": kind, "name": "victim"});
        tenant_creates(&tenant, &t, lb).await;
    }

    // 4. The Secret as a Cluster's control plane. Cluster API's v1beta2 schema refuses a reference
    // without apiGroup, i.e. to a core kind.
    let mut core = capi_cluster("cp-core");
    core["spec"]["controlPlaneRef"] = json!({"apiGroup": "", "kind": "Secret", "name": "victim"});
    let core = create_as(&tenant, &t.ns, &core).await;
    assert!(refused(&core, 422), "{core:?}");
    // At v1beta1 (still served), the reference is an apiVersion, and `v1` passes. The Cluster is
    // converted to v1beta2 and stored, with a controlPlaneRef without apiGroup; only the conversion
    // of the answer back to v1beta1 fails (Cluster API's webhook finds no CRD `secrets.`), so the
    // create is answered with a 500 although the Cluster exists (Cluster API v1.14).
    let v1beta1 = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
        "metadata": {"name": "cp-v1beta1"},
        "spec": {"infrastructureRef": {"apiVersion": "infrastructure.test.capi-lb.io/v1alpha1",
                                       "kind": "TestCluster", "name": "cp-v1beta1"},
                 "controlPlaneRef": {"apiVersion": "v1", "kind": "Secret", "name": "victim"}}});
    let v1beta1_answer = create_as(&tenant, &t.ns, &v1beta1).await;
    let v1beta1_stored = capi_victim.api.get_opt("cp-v1beta1").await.unwrap();
    assert!(
        v1beta1_stored
            .is_some_and(|c| c.data["spec"]["controlPlaneRef"]
                == json!({"kind": "Secret", "name": "victim"})),
        "Cluster API {} did not store the v1beta1 Cluster ({v1beta1_answer:?}): this sub-case \
         cannot happen any more, drop it",
        capi().version
    );
    // The nearest to a Secret that the v1beta2 schema accepts.
    let mut secret_cp = capi_cluster("cp-secret");
    secret_cp["spec"]["controlPlaneRef"] =
        json!({"apiGroup": "core", "kind": "Secret", "name": "victim"});
    tenant_creates(&tenant, &t, secret_cp).await;
    for name in ["cp-secret", "cp-v1beta1"] {
        tenant_lb(&tenant, &t, name, json!({"clusterName": name})).await;
    }

    // 5. A Machine of another namespace matching a selector, next to one of this namespace.
    for (ns, name) in [(&other, "there"), (&t, "here")] {
        ns.create(machine(name, labels(MACHINE_LABEL))).await;
        set_machine_ip(ns, name, "10.0.0.5").await;
    }
    tenant_lb(
        &tenant,
        &t,
        "machines",
        json!({"selector": selector(MACHINE_LABEL)}),
    )
    .await;

    // What capi-lb made of it.
    for (name, _, _, says) in target_kinds {
        let m = wait_false(&t, name, "TargetsReady", "TargetKindNotAllowed").await;
        assert!(m.contains(says), "{name}: {m}");
        let note = wait_event(&t, name, "TargetKindNotAllowed").await;
        assert!(note.contains("is not allowed"), "{name}: {note}");
    }
    for (name, group, kind) in infra_refs {
        let m = wait_false(&t, name, "InfrastructureReady", "ProviderNotEnabled").await;
        assert!(m.contains(&format!("{kind}.{group}")), "{name}: {m}");
    }
    let m = wait_false(&t, "cp-secret", "ClusterEndpoint", "ControlPlaneUnreadable").await;
    assert!(
        m.contains("only from the control-plane kinds"),
        "cp-secret: {m}"
    );
    // cp-v1beta1's reference has no group: capi-lb sees no control plane (nothing to read), and
    // does not report ClusterEndpoint (ControlPlaneUnreadable would do as well).
    let cp_v1beta1 = wait_for(
        &t.api::<LoadBalancer>(),
        "cp-v1beta1",
        "cp-v1beta1 reconciled",
        |l| {
            l.and_then(|l| l.status.as_ref()).is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "InfrastructureReady")
            }) && l.and_then(|l| l.status.as_ref()?.observed_generation)
                == l.and_then(|l| l.metadata.generation)
        },
    )
    .await
    .unwrap();
    let endpoint = condition(&cp_v1beta1, "ClusterEndpoint");
    assert!(
        endpoint.is_none() || endpoint == Some(("False".into(), "ControlPlaneUnreadable".into())),
        "{cp_v1beta1:?}"
    );
    let machines = wait_for(
        &t.api::<LoadBalancer>(),
        "machines",
        "Machine here a target",
        |l| {
            l.and_then(|l| l.status.as_ref())
                .is_some_and(|s| s.targets == ["here"])
        },
    )
    .await
    .unwrap();
    assert_eq!(machines.status.unwrap().targets, ["here"]);
    let keys = TargetKeys::new(&t.ns, "machines");
    let there = capi_api(&other.client, &other.ns, "Machine")
        .await
        .unwrap()
        .get("there")
        .await
        .unwrap();
    assert!(
        !there
            .annotations()
            .keys()
            .any(|k| keys.all().contains(&k.as_str()) || k.contains("capi-lb")),
        "{there:?}"
    );
    for name in [
        "target-service",
        "target-secret",
        "target-cluster",
        "target-configmap",
    ] {
        let lb = t.api::<LoadBalancer>().get(name).await.unwrap();
        assert!(lb.status.unwrap().targets.is_empty(), "{name}");
    }

    // So far capi-lb fetched no victim, listed no Secret or ConfigMap, and sent nothing to the
    // other namespace. (It watches every Service of the namespace, to find those of its
    // load-balancer class.)
    let secrets_path = format!("/api/v1/namespaces/{}/secrets", t.ns);
    let config_maps_path = format!("/api/v1/namespaces/{}/configmaps", t.ns);
    let other_ns = format!("/namespaces/{}/", other.ns);
    let sent = requests(&t);
    let bad: Vec<&(String, String)> = sent
        .iter()
        .filter(|(_, path)| {
            path.starts_with(&secrets_path)
                || path.starts_with(&config_maps_path)
                || path.ends_with("/victim")
                || path.contains("/victim/")
                || path.contains(&other_ns)
        })
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
    assert!(
        sent.iter()
            .any(|(m, p)| m == "PATCH" && p.ends_with(&format!("/{}/machines/here", t.ns))),
        "Machine here annotated: the request log works: {sent:#?}"
    );

    // 3. The Secret as provider credentials.
    tenant_creates(
        &tenant,
        &t,
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "OctaviaLoadBalancer",
               "metadata": {"name": "via-octavia"},
               "spec": {"credentials": {"secretName": "victim"}, "vip": {"networkID": "tenancy"}}}),
    )
    .await;
    tenant_creates(
        &tenant,
        &t,
        lb_on(
            "via-octavia",
            "OctaviaLoadBalancer",
            "via-octavia",
            json!({}),
        ),
    )
    .await;
    tenant_creates(
        &tenant,
        &t,
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "KubeDCLoadBalancer",
               "metadata": {"name": "via-kubedc"},
               "spec": {"cluster": {"kubeconfigSecretName": "victim", "namespace": "tenancy"}}}),
    )
    .await;
    tenant_creates(
        &tenant,
        &t,
        lb_on("via-kubedc", "KubeDCLoadBalancer", "via-kubedc", json!({})),
    )
    .await;
    let m = wait_false(
        &t,
        "via-octavia",
        "InfrastructureReady",
        "CredentialsInvalid",
    )
    .await;
    assert!(
        m.contains(&format!("Secret {}/victim key clouds.yaml", t.ns)),
        "{m}"
    );
    let m = wait_false(&t, "via-kubedc", "InfrastructureReady", "ProviderFailed").await;
    assert!(
        m.contains(&format!(
            "(InvalidConfiguration): Secret {}/victim key value: not a kubeconfig",
            t.ns
        )),
        "{m}"
    );
    assert_no_leak(&t, "provider credentials").await;

    // Deleted: capi-lb cannot tell with such credentials whether anything is left in the cloud, so
    // the deletion waits for working ones (saying why, without quoting them either).
    let lbs = t.api::<LoadBalancer>();
    let tenant_lbs: Api<LoadBalancer> = Api::namespaced(tenant.clone(), &t.ns);
    for name in ["via-octavia", "via-kubedc"] {
        tenant_lbs
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
        wait_for(&lbs, name, &format!("{name}'s deletion reported"), |l| {
            l.is_some_and(|l| message(l, "Ready").starts_with("deleting"))
        })
        .await;
    }
    assert_no_leak(&t, "deleting").await;
    // Let them go, as an operator would (the deletion's message says how).
    for (name, kind) in [
        ("via-octavia", "OctaviaLoadBalancer"),
        ("via-kubedc", "KubeDCLoadBalancer"),
    ] {
        let lb_api = dynamic_api(&t.client, Some(&t.ns), &lb_on(name, kind, name, json!({})))
            .await
            .unwrap();
        strip_finalizers(&lb_api, name).await;
        let doc = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": kind});
        let infra_api = dynamic_api(&t.client, Some(&t.ns), &doc).await.unwrap();
        infra_api
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
        strip_finalizers(&infra_api, name).await;
        wait_gone(&lbs, name).await;
    }

    // Reads of Secrets: only the one named as credentials, only by name.
    let reads: Vec<(String, String)> = requests(&t)
        .into_iter()
        .filter(|(_, path)| path.starts_with(&secrets_path))
        .collect();
    assert!(!reads.is_empty(), "the providers read their Secret");
    let victim_secret = format!("{secrets_path}/victim");
    assert!(
        reads.iter().all(|(m, p)| m == "GET" && *p == victim_secret),
        "{reads:#?}"
    );

    // 6. No victim written, and nothing capi-lb wrote names one.
    let writes: Vec<(String, String)> = requests(&t)
        .into_iter()
        .filter(|(m, p)| m != "GET" && (p.ends_with("/victim") || p.contains("/victim/")))
        .collect();
    assert!(writes.is_empty(), "{writes:#?}");
    for v in [&service, &config_map, &secret] {
        v.assert_untouched(false).await;
    }
    capi_victim.assert_untouched(true).await;
    t.finish().await;
    other.finish().await;
}
