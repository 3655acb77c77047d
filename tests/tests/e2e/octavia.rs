//! The Octavia provider through the real reconcilers against the real Octavia API and Keystone
//! (tests/octavia/harness.sh: Octavia 19 with no-op amphora/compute/network drivers, octavia-worker,
//! RabbitMQ, MariaDB, Keystone 30, all on 127.0.0.1). The Kubernetes side is the in-memory API.
//! Octavia's timing is real, so these tests drive the reconciler in real time.

use std::time::{Duration, Instant};

use capi_lb::sim::world::World;
use capi_lb_api::capi::{Cluster, Machine};
use capi_lb_api::{LoadBalancer, OctaviaLoadBalancer, OctaviaLoadBalancerStatus};
use capi_lb_providers::octavia::{FIRST_LOOK, MAX_LOOK, relook};
use capi_lb_tests::octavia::{
    Harness, delete_until_gone, ext_addresses, octavia_lb, olb, reconcile_until, shared_api,
};
use capi_lb_tests::*;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ApiResource, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const VIP: &str = "198.51.100.1";

fn basic(h: &Harness) -> Vec<Value> {
    vec![
        Harness::secret("openstack", &h.clouds_yaml),
        octavia_lb("cp").spec("drainSeconds", json!(20)).build(),
        olb("cp", h, json!({})),
        machine("cp-m1", "cp", "10.0.0.11").build(),
        machine("cp-m2", "cp", "10.0.0.12").build(),
    ]
}

async fn octavia_status(world: &World, name: &str) -> OctaviaLoadBalancerStatus {
    Api::<OctaviaLoadBalancer>::namespaced(world.client(), NS)
        .get(name)
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

/// Reconcile `cp` until `done` holds (in real time: Octavia's own timing), and return it.
async fn reconcile_cp_until(
    world: &World,
    what: &str,
    done: impl Fn(&LoadBalancer) -> bool,
) -> LoadBalancer {
    reconcile_until(world, NS, "cp", what, done).await
}

/// Merge `spec` into the OctaviaLoadBalancer `cp`.
async fn patch_olb(world: &World, spec: Value) {
    merge_patch::<OctaviaLoadBalancer>(world, "cp", json!({ "spec": spec })).await;
}

/// An operator's update of load balancer `id` (its description), which puts it in PENDING_UPDATE.
/// The operator retries while it is PENDING (a flow of capi-lb's own writes), as one must.
async fn operator_update(h: &Harness, id: &str) {
    let mut attempts = 0;
    loop {
        let (code, body) = h.octavia(
            "PUT",
            &format!("lbaas/loadbalancers/{id}"),
            Some(json!({"loadbalancer": {"description": "touched by an operator"}})),
        );
        if code == 200 {
            return;
        }
        attempts += 1;
        assert!(code == 409 && attempts < 40, "{code} {body}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A new Machine of `cp` at `ip`.
async fn add_machine(world: &World, name: &str, ip: &str) {
    let m: Machine = serde_json::from_value(machine(name, "cp", ip).build()).unwrap();
    Api::<Machine>::namespaced(world.client(), NS)
        .create(&PostParams::default(), &m)
        .await
        .unwrap();
}

/// Ready with `n` active targets.
fn ready_with(n: usize) -> impl Fn(&LoadBalancer) -> bool {
    move |lb| {
        is_ready(lb)
            && lb
                .status
                .as_ref()
                .is_some_and(|s| s.active_targets.len() == n)
    }
}

/// Members of the pool of the first listener: `(name, address, weight)`.
fn members(h: &Harness, status: &OctaviaLoadBalancerStatus) -> Vec<(String, String, i64)> {
    let pool = status.listeners[0].pool_id.clone().unwrap();
    let mut out: Vec<_> = h
        .members(&pool)
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                m["address"].as_str().unwrap().to_string(),
                m["weight"].as_i64().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

async fn delete_and_settle(world: &World, h: &Harness, tag: &str) {
    delete_until_gone(world, NS, "cp").await;
    assert!(
        h.lbs_tagged(tag).is_empty(),
        "load balancers left behind: {:?}",
        h.lbs_tagged(tag)
    );
}

/// One wait on Octavia as the controller sees it: reconcile, move the provider's clock by the requeue
/// the reconcile asked for, reconcile again, while `busy` says Octavia is still at it or the
/// controller still asks for a look (Octavia may show a new member ACTIVE while the load balancer
/// itself is still PENDING_UPDATE: the targets are then already active, and the wait goes on until
/// the load balancer is ACTIVE too). No real sleep:
/// the looks come faster than Octavia finishes, so the schedule is seen as it is. Asserts that each
/// busy look asks for as long again as the wait so far on the provider's clock (`relook`), at most
/// `MAX_LOOK`, for one OpenStack request; returns the number of busy looks and the last outcome.
async fn follow_wait(
    world: &World,
    first: capi_lb::Outcome,
    busy: impl Fn(Option<&LoadBalancer>) -> bool,
) -> (usize, capi_lb::Outcome) {
    let api = Api::<LoadBalancer>::namespaced(world.client(), NS);
    let mut outcome = first;
    let mut waited = Duration::ZERO;
    let mut looks = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let delay = outcome
            .requeue_after
            .expect("a busy reconcile asks to be requeued");
        world.clock.advance(delay);
        waited += delay;
        world.openstack.clear();
        outcome = world.reconcile(NS, "cp").await.unwrap();
        let looking = outcome.requeue_after.is_some_and(|r| r <= MAX_LOOK);
        if !busy(api.get_opt("cp").await.unwrap().as_ref()) && !looking {
            return (looks, outcome);
        }
        looks += 1;
        let calls = world.openstack.calls();
        assert_eq!(calls.len(), 1, "one request per look: {calls:?}");
        assert_eq!(
            outcome.requeue_after,
            Some(relook(waited)),
            "look {looks}, {waited:?} into the wait"
        );
        assert!(relook(waited) <= MAX_LOOK);
        assert!(Instant::now() < deadline, "Octavia stayed busy");
    }
}

/// While Octavia is busy the provider looks again soon, then less and less often: the first look
/// `FIRST_LOOK` after its write (the create, the batch member update, the delete each begin a new
/// wait), each later one as long again as the wait so far, at most `MAX_LOOK`, one request each.
/// The load balancer is created with its members: once it is ACTIVE they serve, with no second
/// operation to wait for.
#[tokio::test]
async fn looks_start_short_and_back_off_while_octavia_is_busy() {
    let (h, _api) = shared_api().await;
    let world = World::new(basic(&h)).await.unwrap();
    let pending = |lb: Option<&LoadBalancer>| {
        lb.is_some_and(|lb| cond(lb, "InfrastructureReady").1 == "LoadBalancerPending")
    };

    let created = world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(
        created.requeue_after,
        Some(FIRST_LOOK),
        "the create's first look"
    );
    let (create_looks, provisioned) = follow_wait(&world, created, pending).await;
    // The load balancer is ACTIVE with its members: Ready with both targets active at once, from
    // the status tree alone (the members it was created with need no reading back), no write and
    // no new wait.
    let lb = get_lb(&world, "cp").await;
    assert!(ready_with(2)(&lb), "{lb:?}");
    assert_eq!(
        world.openstack.calls(),
        vec![("loadbalancer.status".to_string(), Some(200))]
    );
    assert!(
        provisioned.requeue_after.is_none_or(|r| r > MAX_LOOK),
        "{provisioned:?}"
    );

    // A new target is a batch member update, which begins a new wait. While Octavia applies it the
    // load balancer keeps serving: every look leaves it Ready, InfrastructureReady True and the
    // `-ext` endpoint ready, whatever it reads.
    add_machine(&world, "cp-m3", "10.0.0.13").await;
    world.openstack.clear();
    let updated = world.reconcile(NS, "cp").await.unwrap();
    assert!(
        world
            .openstack
            .calls()
            .iter()
            .any(|(op, _)| op == "member.batch-update"),
        "{:?}",
        world.openstack.calls()
    );
    assert_eq!(
        updated.requeue_after,
        Some(FIRST_LOOK),
        "the member update's first look"
    );
    let (member_looks, _) = follow_wait(&world, updated, |lb| {
        let lb = lb.expect("the LoadBalancer exists");
        assert!(is_ready(lb), "not Ready during a member update: {lb:?}");
        assert_eq!(cond(lb, "InfrastructureReady").0, "True", "{lb:?}");
        !ready_with(3)(lb)
    })
    .await;
    let status = octavia_status(&world, "cp").await;
    assert_eq!(status.provisioning_status.as_deref(), Some("ACTIVE"));
    assert!(status.pending_since.is_none(), "{status:?}");
    let lb = get_lb(&world, "cp").await;
    assert!(ready_with(3)(&lb));

    Api::<LoadBalancer>::namespaced(world.client(), NS)
        .delete("cp", &DeleteParams::default())
        .await
        .unwrap();
    world.openstack.clear();
    let deleting = world.reconcile(NS, "cp").await.unwrap();
    assert!(
        world
            .openstack
            .calls()
            .iter()
            .any(|(op, _)| op == "loadbalancer.delete")
    );
    assert_eq!(
        deleting.requeue_after,
        Some(FIRST_LOOK),
        "the delete's first look"
    );
    let (delete_looks, _) = follow_wait(&world, deleting, |lb| lb.is_some()).await;
    assert!(
        create_looks >= 1,
        "Octavia was busy for some looks (create {create_looks}, members {member_looks}, delete {delete_looks})"
    );
    assert!(h.lbs_tagged(&uid_tag(&lb)).is_empty());
}

#[tokio::test]
async fn create_ready_publish_members_drain_and_cascade_delete() {
    let (h, _api) = shared_api().await;
    let world = World::new(basic(&h)).await.unwrap();
    world.openstack.clear();

    // The first reconcile creates the whole tree in one request and does not wait for it.
    world.reconcile(NS, "cp").await.unwrap();
    let status = octavia_status(&world, "cp").await;
    let id = status
        .load_balancer_id
        .clone()
        .expect("load balancer ID in status");
    assert_eq!(
        status.provisioning_status.as_deref(),
        Some("PENDING_CREATE")
    );
    let lb = get_lb(&world, "cp").await;
    assert_eq!(cond(&lb, "InfrastructureReady").1, "LoadBalancerPending");

    // Ready with every target active as soon as Octavia has the load balancer ACTIVE: it was
    // created with its members, so the only write to Octavia is the create.
    let lb = reconcile_cp_until(&world, "Ready", is_ready).await;
    assert!(ready_with(2)(&lb), "{lb:?}");
    let writes: Vec<String> = world
        .openstack
        .calls()
        .into_iter()
        .map(|(op, _)| op)
        .filter(|op| !op.ends_with(".status") && !op.ends_with(".list") && !op.ends_with(".get"))
        .filter(|op| op != "token.create")
        .collect();
    assert_eq!(writes, vec!["loadbalancer.create"]);
    // The members it was created with were remembered from the create's answer, not read back.
    assert!(
        !world
            .openstack
            .calls()
            .iter()
            .any(|(op, _)| op == "member.list"),
        "{:?}",
        world.openstack.calls()
    );
    let status = octavia_status(&world, "cp").await;
    assert_eq!(status.load_balancer_id.as_deref(), Some(id.as_str()));
    assert!(status.ready);
    assert_eq!(status.vip_address.as_deref(), Some(VIP));
    assert_eq!(status.provisioning_status.as_deref(), Some("ACTIVE"));
    assert!(status.api_version.as_deref().unwrap().starts_with("2."));
    assert_eq!(status.listeners.len(), 1);
    let l = &status.listeners[0];
    assert!(l.listener_id.is_some() && l.pool_id.is_some() && l.monitor_id.is_some());
    // The -ext Service points at the VIP.
    assert_eq!(ext_addresses(&world, "cp-ext").await, vec![VIP.to_string()]);
    assert_eq!(lb.status.as_ref().unwrap().addresses[0].address, VIP);
    // Every object carries the ownership tags.
    let tag = uid_tag(&lb);
    let found = h.lbs_tagged(&tag);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0]["id"], id.as_str());
    let (_, listener) = h.octavia(
        "GET",
        &format!("lbaas/listeners/{}", l.listener_id.clone().unwrap()),
        None,
    );
    assert!(
        listener["listener"]["tags"]
            .as_array()
            .unwrap()
            .contains(&json!(tag))
    );
    let (_, monitor) = h.octavia(
        "GET",
        &format!("lbaas/healthmonitors/{}", l.monitor_id.clone().unwrap()),
        None,
    );
    assert_eq!(monitor["healthmonitor"]["type"], "TCP");
    // The defaults take a member that stopped answering out after two failed checks 5 s apart.
    let hm = &monitor["healthmonitor"];
    assert_eq!(
        (
            &hm["delay"],
            &hm["timeout"],
            &hm["max_retries"],
            &hm["max_retries_down"]
        ),
        (&json!(5), &json!(3), &json!(2), &json!(2)),
        "{hm}"
    );
    assert!(
        monitor["healthmonitor"]["tags"]
            .as_array()
            .unwrap()
            .contains(&json!(tag))
    );
    assert_eq!(
        members(&h, &status),
        vec![
            ("cp-m1".to_string(), "10.0.0.11".to_string(), 1),
            ("cp-m2".to_string(), "10.0.0.12".to_string(), 1),
        ]
    );
    let pool = l.pool_id.clone().unwrap();
    assert!(
        h.members(&pool)
            .iter()
            .all(|m| m["tags"].as_array().unwrap().contains(&json!(tag)))
    );

    // Without a floating IP, Neutron is never asked.
    assert!(
        !world
            .openstack
            .calls()
            .iter()
            .any(|(op, _)| op.starts_with("floatingip")),
        "{:?}",
        world.openstack.calls()
    );
    // A steady-state reconcile costs one Octavia request (the status tree) and writes nothing;
    // ensure and converge_members share one read of the credentials Secret.
    world.openstack.clear();
    let secret_reads = |world: &World| {
        world
            .api
            .stats
            .requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path.contains("/secrets/"))
            .count()
    };
    let before = secret_reads(&world);
    world.reconcile(NS, "cp").await.unwrap();
    let calls = world.openstack.calls();
    assert_eq!(calls, vec![("loadbalancer.status".to_string(), Some(200))]);
    assert!(secret_reads(&world) - before <= 1);

    // A new target becomes a member.
    add_machine(&world, "cp-m3", "10.0.0.13").await;
    reconcile_cp_until(&world, "three members", |lb| {
        lb.status
            .as_ref()
            .is_some_and(|s| s.active_targets.len() == 3)
    })
    .await;
    assert_eq!(members(&h, &octavia_status(&world, "cp").await).len(), 3);

    // A disabled target drains with weight 0 for drainSeconds, then leaves the pool.
    Api::<Machine>::namespaced(world.client(), NS)
        .patch(
            "cp-m1",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {"loadbalancer.cluster.x-k8s.io/disabled": "true"}}})),
        )
        .await
        .unwrap();
    reconcile_cp_until(&world, "draining", |lb| {
        lb.status
            .as_ref()
            .is_some_and(|s| !s.active_targets.contains(&"cp-m1".to_string()))
    })
    .await;
    let now = members(&h, &octavia_status(&world, "cp").await);
    assert!(
        now.contains(&("cp-m1".to_string(), "10.0.0.11".to_string(), 0)),
        "{now:?}"
    );
    assert!(now.contains(&("cp-m2".to_string(), "10.0.0.12".to_string(), 1)));
    world.clock.advance(Duration::from_secs(21));
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        world.reconcile(NS, "cp").await.unwrap();
        let after = members(&h, &octavia_status(&world, "cp").await);
        if after.len() == 2 || Instant::now() > deadline {
            break after;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(
        after.iter().map(|m| m.0.as_str()).collect::<Vec<_>>(),
        vec!["cp-m2", "cp-m3"]
    );

    // Deletion cascades and leaves nothing tagged behind.
    delete_and_settle(&world, &h, &tag).await;
}

async fn wipe_octavia_status(world: &World) {
    // What a lost status looks like (restored from a backup without status, clusterctl move).
    let api = Api::<OctaviaLoadBalancer>::namespaced(world.client(), NS);
    let mut olb = api.get("cp").await.unwrap();
    olb.status = Some(OctaviaLoadBalancerStatus::default());
    olb.metadata.managed_fields = None;
    api.replace_status("cp", &PostParams::default(), &olb)
        .await
        .unwrap();
    assert!(octavia_status(world, "cp").await.load_balancer_id.is_none());
}

#[tokio::test]
async fn a_restarted_controller_with_a_lost_status_adopts_by_tag_and_never_a_foreign_namesake() {
    let (h, _api) = shared_api().await;
    // A hand-made load balancer with exactly the name capi-lb would use, and no tags.
    let (code, foreign) = h.octavia(
        "POST",
        "lbaas/loadbalancers",
        Some(json!({"loadbalancer": {"name": "capi-lb-default-cp", "vip_subnet_id": h.var("OCTAVIA_SUBNET_ID")}})),
    );
    assert_eq!(code, 201, "{foreign}");
    let foreign_id = foreign["loadbalancer"]["id"].as_str().unwrap().to_string();
    h.wait_active(&foreign_id);

    let world = World::new(basic(&h)).await.unwrap();
    let lb = reconcile_cp_until(&world, "Ready", is_ready).await;
    let tag = uid_tag(&lb);
    let id = octavia_status(&world, "cp").await.load_balancer_id.unwrap();
    assert_ne!(id, foreign_id, "the foreign namesake must not be adopted");

    wipe_octavia_status(&world).await;
    let restarted = world.restart();
    restarted.openstack.clear();
    reconcile_cp_until(&restarted, "Ready again", is_ready).await;
    let status = octavia_status(&restarted, "cp").await;
    assert_eq!(
        status.load_balancer_id.as_deref(),
        Some(id.as_str()),
        "adopted by tag"
    );
    assert_eq!(h.lbs_tagged(&tag).len(), 1, "no duplicate");
    assert!(
        !restarted
            .openstack
            .calls()
            .iter()
            .any(|(op, _)| op == "loadbalancer.create"),
        "{:?}",
        restarted.openstack.calls()
    );
    assert_eq!(members(&h, &status).len(), 2, "members kept");

    // A status naming the foreign load balancer (restored from elsewhere, edited by hand): its
    // tags are checked before anything is done to it; capi-lb finds its own again by tag.
    let api = Api::<OctaviaLoadBalancer>::namespaced(restarted.client(), NS);
    let mut olb = api.get("cp").await.unwrap();
    olb.status = Some(OctaviaLoadBalancerStatus {
        load_balancer_id: Some(foreign_id.clone()),
        ..Default::default()
    });
    olb.metadata.managed_fields = None;
    api.replace_status("cp", &PostParams::default(), &olb)
        .await
        .unwrap();
    let restarted = restarted.restart();
    reconcile_cp_until(&restarted, "Ready with its own again", is_ready).await;
    let status = octavia_status(&restarted, "cp").await;
    assert_eq!(status.load_balancer_id.as_deref(), Some(id.as_str()));

    delete_and_settle(&restarted, &h, &tag).await;
    // The namesake is untouched: still there, still ACTIVE, still without listeners.
    let (code, body) = h.octavia("GET", &format!("lbaas/loadbalancers/{foreign_id}"), None);
    assert_eq!(code, 200);
    assert_eq!(body["loadbalancer"]["provisioning_status"], "ACTIVE");
    assert_eq!(body["loadbalancer"]["listeners"], json!([]));
    let (code, _) = h.octavia(
        "DELETE",
        &format!("lbaas/loadbalancers/{foreign_id}?cascade=true"),
        None,
    );
    assert_eq!(code, 204);
}

#[tokio::test]
async fn writes_while_pending_are_retried_and_never_fail_the_reconcile() {
    let (h, _api) = shared_api().await;
    let world = World::new(basic(&h)).await.unwrap();
    let lb = reconcile_cp_until(&world, "Ready", is_ready).await;
    let tag = uid_tag(&lb);
    let id = octavia_status(&world, "cp").await.load_balancer_id.unwrap();

    // A listener option changes and a new target arrives (before the operator's update, so that
    // the reconcile below runs right after it, inside its short PENDING_UPDATE window even on a
    // loaded machine).
    patch_olb(&world, json!({"listener": {"timeoutClientDataMs": 120000}})).await;
    add_machine(&world, "cp-m3", "10.0.0.13").await;
    // Then someone else updates the load balancer: it is PENDING_UPDATE for a moment, and any write
    // on it or its children is refused with 409 meanwhile; the reconcile right after it must answer
    // pending, without an error. With Octavia's no-op drivers nothing in the update's flow takes
    // time (no amphora to talk to, no setting to slow it down), so the window is often shorter than
    // the reconcile's reading of the tree: a reconcile that read the load balancer ACTIVE again (as
    // the status it records says) missed it, and the operator's update and the reconcile are
    // repeated, a bounded number of times. A reconcile that read PENDING_UPDATE is the one checked.
    const ROUNDS: u32 = 10;
    let mut round = 0;
    let lb = loop {
        round += 1;
        operator_update(&h, &id).await;
        world.reconcile(NS, "cp").await.unwrap();
        let lb = get_lb(&world, "cp").await;
        let read = octavia_status(&world, "cp").await.provisioning_status;
        if read.as_deref() != Some("ACTIVE") || round == ROUNDS {
            break lb;
        }
        eprintln!("round {round}: the reconcile read the load balancer ACTIVE again; once more");
    };
    // The reconcile read PENDING_UPDATE: the load balancer was provisioned and keeps serving, so
    // it stays Ready with its endpoint; the wait shows on the OctaviaLoadBalancer.
    let status = octavia_status(&world, "cp").await;
    assert_eq!(
        status.provisioning_status.as_deref(),
        Some("PENDING_UPDATE"),
        "round {round} of {ROUNDS}: {status:?}"
    );
    assert!(status.pending_since.is_some(), "{status:?}");
    assert!(status.ready, "{status:?}");
    assert!(is_ready(&lb), "{:?}", condition(&lb, "Ready"));
    assert_eq!(
        cond(&lb, "InfrastructureReady"),
        ("True".into(), "Provisioned".into()),
        "{:?}",
        condition(&lb, "InfrastructureReady")
    );
    assert!(ext_ready(&world, "cp-ext").await);

    reconcile_cp_until(&world, "converged", ready_with(3)).await;
    let status = octavia_status(&world, "cp").await;
    let listener = status.listeners[0].listener_id.clone().unwrap();
    let (_, body) = h.octavia("GET", &format!("lbaas/listeners/{listener}"), None);
    assert_eq!(body["listener"]["timeout_client_data"], 120000);
    assert_eq!(members(&h, &status).len(), 3);
    // The operator's change is not reverted.
    let (_, body) = h.octavia("GET", &format!("lbaas/loadbalancers/{id}"), None);
    assert_eq!(
        body["loadbalancer"]["description"],
        "touched by an operator"
    );

    delete_and_settle(&world, &h, &tag).await;
}

/// True when the EndpointSlices of `service` have endpoints and every one is ready.
async fn ext_ready(world: &World, service: &str) -> bool {
    let slices = Api::<EndpointSlice>::namespaced(world.client(), NS)
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
        .await
        .unwrap()
        .items;
    let endpoints: Vec<_> = slices.iter().flat_map(|s| s.endpoints.iter()).collect();
    !endpoints.is_empty()
        && endpoints
            .iter()
            .all(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
}

/// A member change does not take the load balancer out of service: Octavia applies it
/// (PENDING_UPDATE) while serving, so no reconcile in between takes Ready, InfrastructureReady or the
/// `-ext` endpoint away, and the targets keep their states. Reconciles follow each other as fast as
/// they go, so one reads the update in progress; if Octavia was quicker than that, another Machine
/// is added, a bounded number of times.
#[tokio::test]
async fn a_member_change_keeps_the_load_balancer_ready_while_octavia_applies_it() {
    let (h, _api) = shared_api().await;
    let world = World::new(basic(&h)).await.unwrap();
    let lb = reconcile_cp_until(&world, "Ready", ready_with(2)).await;
    let tag = uid_tag(&lb);
    const ROUNDS: usize = 5;
    let mut saw_update = 0;
    let mut round = 0;
    while saw_update == 0 && round < ROUNDS {
        round += 1;
        let name = format!("cp-m{}", round + 2);
        add_machine(&world, &name, &format!("10.0.0.{}", round + 12)).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            world.reconcile(NS, "cp").await.unwrap();
            let lb = get_lb(&world, "cp").await;
            let status = octavia_status(&world, "cp").await;
            if status.provisioning_status.as_deref() == Some("PENDING_UPDATE") {
                saw_update += 1;
            }
            assert!(
                is_ready(&lb),
                "round {round}: {:?}",
                condition(&lb, "Ready")
            );
            assert_eq!(cond(&lb, "InfrastructureReady").0, "True", "round {round}");
            assert!(
                ext_ready(&world, "cp-ext").await,
                "round {round}: -ext not ready"
            );
            // Targets already active stay active.
            let active = &lb.status.as_ref().unwrap().active_targets;
            for old in ["cp-m1", "cp-m2"] {
                assert!(active.iter().any(|t| t == old), "round {round}: {active:?}");
            }
            if ready_with(round + 2)(&lb) {
                break;
            }
            assert!(Instant::now() < deadline, "round {round}: not converged");
        }
    }
    assert!(
        saw_update > 0,
        "in {ROUNDS} rounds no reconcile read the member update in progress"
    );
    delete_and_settle(&world, &h, &tag).await;
}

#[tokio::test]
async fn ports_added_and_removed_get_and_lose_their_listener_pool_and_monitor() {
    let (h, _api) = shared_api().await;
    let mut objects = basic(&h);
    objects[2] = olb(
        "cp",
        &h,
        json!({"healthMonitor": {"type": "HTTPS", "urlPath": "/readyz", "expectedCodes": "200",
                                 "maxRetries": 3, "maxRetriesDown": 1}}),
    );
    let world = World::new(objects).await.unwrap();
    let lb = reconcile_cp_until(&world, "Ready", is_ready).await;
    let tag = uid_tag(&lb);
    let status = octavia_status(&world, "cp").await;
    let monitor = status.listeners[0].monitor_id.clone().unwrap();
    let (_, body) = h.octavia("GET", &format!("lbaas/healthmonitors/{monitor}"), None);
    assert_eq!(body["healthmonitor"]["type"], "HTTPS");
    assert_eq!(body["healthmonitor"]["url_path"], "/readyz");
    assert_eq!(body["healthmonitor"]["max_retries"], 3);
    assert_eq!(body["healthmonitor"]["max_retries_down"], 1);
    // A changed maxRetriesDown reaches the existing monitor (updated in place, same ID).
    patch_olb(&world, json!({"healthMonitor": {"maxRetriesDown": 4}})).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        world.reconcile(NS, "cp").await.unwrap();
        let (_, body) = h.octavia("GET", &format!("lbaas/healthmonitors/{monitor}"), None);
        if body["healthmonitor"]["max_retries_down"] == 4 {
            assert_eq!(body["healthmonitor"]["max_retries"], 3);
            break;
        }
        assert!(Instant::now() < deadline, "not updated: {body}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    reconcile_cp_until(&world, "Ready after the monitor update", is_ready).await;

    Api::<LoadBalancer>::namespaced(world.client(), NS)
        .patch(
            "cp",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"ports": [
                {"name": "api", "port": 6443, "targetPort": 6443},
                {"name": "konnectivity", "port": 8132, "targetPort": 8132},
            ]}})),
        )
        .await
        .unwrap();
    reconcile_cp_until(&world, "two listeners", is_ready).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        world.reconcile(NS, "cp").await.unwrap();
        let status = octavia_status(&world, "cp").await;
        // The load balancer serves the first port all along (Ready): the second is done when
        // its listener, pool and monitor exist and Octavia has applied everything.
        if status.listeners.len() == 2
            && status.listeners[1].monitor_id.is_some()
            && status.member_count == 4
            && status.provisioning_status.as_deref() == Some("ACTIVE")
            && status.pending_since.is_none()
        {
            break status;
        }
        assert!(is_ready(&get_lb(&world, "cp").await), "{status:?}");
        assert!(Instant::now() < deadline, "{status:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(status.listeners[1].monitor_id.is_some(), "{status:?}");
    let pool = status.listeners[1].pool_id.clone().unwrap();
    let ports: Vec<i64> = h
        .members(&pool)
        .iter()
        .map(|m| m["protocol_port"].as_i64().unwrap())
        .collect();
    assert_eq!(ports, vec![8132, 8132]);

    Api::<LoadBalancer>::namespaced(world.client(), NS)
        .patch(
            "cp",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"spec": {"ports": [{"name": "api", "port": 6443, "targetPort": 6443}]}}),
            ),
        )
        .await
        .unwrap();
    let id = status.load_balancer_id.clone().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        world.reconcile(NS, "cp").await.unwrap();
        let (_, body) = h.octavia("GET", &format!("lbaas/loadbalancers/{id}"), None);
        let ready = octavia_status(&world, "cp").await.ready;
        if body["loadbalancer"]["listeners"].as_array().unwrap().len() == 1
            && body["loadbalancer"]["pools"].as_array().unwrap().len() == 1
            && ready
        {
            break;
        }
        assert!(Instant::now() < deadline, "{body}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    delete_and_settle(&world, &h, &tag).await;
}

#[tokio::test]
async fn bad_credentials_and_a_missing_catalog_entry_are_clear_conditions() {
    let (h, _api) = shared_api().await;
    let wrong = h
        .clouds_yaml
        .replace(&h.var("OS_APPLICATION_CREDENTIAL_SECRET"), "not-the-secret");
    let world = World::new(vec![
        Harness::secret("openstack", &wrong),
        octavia_lb("cp").build(),
        olb("cp", &h, json!({})),
        machine("cp-m1", "cp", "10.0.0.11").build(),
    ])
    .await
    .unwrap();
    world.reconcile(NS, "cp").await.unwrap();
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "InfrastructureReady");
    assert_eq!(c.reason, "AuthenticationFailed", "{c:?}");
    assert!(c.message.contains("cloud harness"), "{c:?}");
    assert!(
        !c.message.contains("not-the-secret"),
        "the secret must never appear: {c:?}"
    );
    // ... and a Warning Event says so.
    assert!(
        warned(&world, "AuthenticationFailed"),
        "{:?}",
        world.ctx.events.timeline()
    );

    // The cloud is not in the clouds.yaml.
    patch_olb(&world, json!({"credentials": {"cloud": "nope"}})).await;
    world.reconcile(NS, "cp").await.unwrap();
    let c = condition(&get_lb(&world, "cp").await, "InfrastructureReady");
    assert_eq!(c.reason, "CredentialsInvalid", "{c:?}");
    // How many clouds the Secret has, not their names (its reader may not be allowed to see it).
    assert!(
        c.message
            .contains("has no cloud named \"nope\" (it has 2 other clouds)"),
        "{c:?}"
    );
    assert!(!c.message.contains("harness-password"), "{c:?}");

    // Right credentials (password auth this time), but a region without Octavia in the catalog.
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(world.client(), NS);
    let fixed: k8s_openapi::api::core::v1::Secret =
        serde_json::from_value(Harness::secret("openstack", &h.clouds_yaml)).unwrap();
    secrets
        .patch(
            "openstack",
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": fixed.data})),
        )
        .await
        .unwrap();
    patch_olb(
        &world,
        json!({"credentials": {"cloud": "harness-password", "region": "RegionTwo"}}),
    )
    .await;
    world.reconcile(NS, "cp").await.unwrap();
    let c = condition(&get_lb(&world, "cp").await, "InfrastructureReady");
    assert_eq!(c.reason, "EndpointNotInCatalog", "{c:?}");
    assert!(c.message.contains("RegionTwo"), "{c:?}");

    // No Secret at all.
    secrets
        .delete("openstack", &DeleteParams::default())
        .await
        .unwrap();
    world.reconcile(NS, "cp").await.unwrap();
    let c = condition(&get_lb(&world, "cp").await, "InfrastructureReady");
    assert_eq!(c.reason, "CredentialsNotFound", "{c:?}");

    // Fixed: password auth in the right region works, and the LoadBalancer becomes Ready.
    secrets
        .create(&PostParams::default(), &fixed)
        .await
        .unwrap();
    patch_olb(&world, json!({"credentials": {"region": null}})).await;
    let lb = reconcile_cp_until(&world, "Ready with password auth", is_ready).await;
    delete_and_settle(&world, &h, &uid_tag(&lb)).await;
}

/// The admin's opt-in label for credentials (`--credentials-secret-label`): a clouds.yaml Secret
/// without it is never read (no Keystone or Octavia request at all) and the LoadBalancer says why;
/// once its owner labels it, the load balancer is created on the real Octavia.
#[tokio::test]
async fn a_credentials_secret_without_the_required_label_is_not_used() {
    let (h, _api) = shared_api().await;
    let label = ("loadbalancer.cluster.x-k8s.io/credentials", "true");
    let world = World::new(basic(&h)).await.unwrap().reconfigured(|c| {
        c.credentials.required_label = Some((label.0.into(), label.1.into()));
    });
    world.openstack.clear();
    world.reconcile(NS, "cp").await.unwrap();
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "InfrastructureReady");
    assert_eq!(c.reason, "CredentialsNotAllowed", "{c:?}");
    assert!(
        c.message
            .contains("loadbalancer.cluster.x-k8s.io/credentials=true"),
        "{c:?}"
    );
    assert!(!is_ready(&lb));
    assert_eq!(world.openstack.calls(), vec![], "the Secret was used");
    assert!(
        warned(&world, "CredentialsNotAllowed"),
        "{:?}",
        world.ctx.events.timeline()
    );

    // The Secret's owner opts it in.
    merge_patch::<k8s_openapi::api::core::v1::Secret>(
        &world,
        "openstack",
        json!({"metadata": {"labels": {label.0: label.1}}}),
    )
    .await;
    let lb = reconcile_cp_until(&world, "Ready with the labelled Secret", is_ready).await;
    let tag = uid_tag(&lb);
    assert_eq!(h.lbs_tagged(&tag).len(), 1);
    delete_and_settle(&world, &h, &tag).await;
}

/// A CA certificate (PEM) of its own, made with openssl.
fn ca_pem(n: usize) -> String {
    let dir = std::env::temp_dir().join(format!("capi-lb-test-ca-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("ca.key");
    let cert = dir.join("ca.crt");
    let status = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ])
        .args(["-days", "1", "-subj", &format!("/CN=tenant-ca-{n}")])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let pem = std::fs::read_to_string(&cert).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    pem
}

/// This process's CA bundle files in the temporary folder (what the provider writes for the SDK).
fn ca_files() -> Vec<String> {
    let suffix = format!("-{}-", std::process::id());
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("capi-lb-octavia-ca-") && n.contains(&suffix))
        .collect()
}

/// A flood of CA bundles costs no disk: twenty tenants each name a Secret with a CA bundle of its
/// own; each bundle is written only while its session connects and removed right after, so the
/// temporary folder (16 MiB in the Deployment) holds none of them afterwards. Without the removal
/// every distinct bundle stayed on disk for good.
#[tokio::test]
async fn a_flood_of_ca_bundles_leaves_no_file_behind() {
    let (h, _api) = shared_api().await;
    const TENANTS: usize = 20;
    let mut objects = Vec::new();
    for n in 0..TENANTS {
        let name = format!("ca-{n}");
        let mut secret: k8s_openapi::api::core::v1::Secret =
            serde_json::from_value(Harness::secret(&name, &h.clouds_yaml)).unwrap();
        secret.data.get_or_insert_default().insert(
            "ca.crt".into(),
            k8s_openapi::ByteString(ca_pem(n).into_bytes()),
        );
        objects.push(serde_json::to_value(secret).unwrap());
        objects.push(octavia_lb(&name).build());
        objects.push(olb(
            &name,
            &h,
            json!({"credentials": {"secretName": name, "cloud": "harness", "caBundleKey": "ca.crt"}}),
        ));
    }
    let world = World::new(objects).await.unwrap();
    let before = ca_files();
    for n in 0..TENANTS {
        world.reconcile(NS, &format!("ca-{n}")).await.unwrap();
    }
    // Every tenant's session was opened with its bundle (each OctaviaLoadBalancer got its Octavia
    // load balancer), and no bundle is left on disk.
    let mut ids = std::collections::BTreeSet::new();
    for n in 0..TENANTS {
        let status = octavia_status(&world, &format!("ca-{n}")).await;
        ids.insert(
            status
                .load_balancer_id
                .unwrap_or_else(|| panic!("ca-{n} has no load balancer")),
        );
    }
    assert_eq!(ids.len(), TENANTS);
    let after = ca_files();
    assert!(
        after.len() <= before.len(),
        "CA bundles left in {}: {after:?}",
        std::env::temp_dir().display()
    );
    for n in 0..TENANTS {
        delete_until_gone(&world, NS, &format!("ca-{n}")).await;
    }
}

/// Another LoadBalancer's Octavia ID written into a status is not trusted: LoadBalancer `other`'s
/// OctaviaLoadBalancer status is made to name `cp`'s load balancer (which this same provider has
/// verified, for `cp`). `other` checks the tags, leaves `cp`'s load balancer alone (members and
/// address unchanged) and gets a load balancer of its own. Verified IDs were once kept by ID alone,
/// and then `other` took over `cp`'s.
#[tokio::test]
async fn another_load_balancers_octavia_id_in_a_status_is_not_trusted() {
    let (h, _api) = shared_api().await;
    let mut objects = basic(&h);
    objects.push(octavia_lb("other").build());
    objects.push(olb("other", &h, json!({})));
    objects.push(machine("other-m1", "other", "10.0.0.21").build());
    let world = World::new(objects).await.unwrap();
    let cp = reconcile_cp_until(&world, "cp Ready", is_ready).await;
    let cp_status = octavia_status(&world, "cp").await;
    let cp_id = cp_status.load_balancer_id.clone().unwrap();
    let cp_members = members(&h, &cp_status);

    // The status of `other` names `cp`'s load balancer before `other` ever reconciled.
    let olbs = Api::<OctaviaLoadBalancer>::namespaced(world.client(), NS);
    olbs.patch_status(
        "other",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"loadBalancerID": cp_id}})),
    )
    .await
    .unwrap();
    let other = reconcile_until(&world, NS, "other", "other Ready", is_ready).await;
    let other_status = octavia_status(&world, "other").await;
    assert_ne!(
        other_status.load_balancer_id.as_deref(),
        Some(cp_id.as_str())
    );
    assert_eq!(
        h.lbs_tagged(&uid_tag(&other)).len(),
        1,
        "other's own load balancer"
    );
    // `cp`'s load balancer is as it was.
    assert_eq!(members(&h, &octavia_status(&world, "cp").await), cp_members);
    assert_eq!(h.lbs_tagged(&uid_tag(&cp)).len(), 1);
    delete_until_gone(&world, NS, "other").await;
    delete_and_settle(&world, &h, &uid_tag(&cp)).await;
}

fn fip(h: &Harness, id: &str) -> (u16, Value) {
    let (code, body) = h.neutron("GET", &format!("floatingips/{id}"), None);
    (code, body["floatingip"].clone())
}

#[tokio::test]
async fn an_allocated_floating_ip_is_published_and_released_on_delete() {
    let (h, _api) = shared_api().await;
    let mut objects = basic(&h);
    objects[2] = olb(
        "cp",
        &h,
        json!({"floatingIP": {"networkID": h.var("FIP_NETWORK_ID")}}),
    );
    let world = World::new(objects).await.unwrap();
    let lb = reconcile_cp_until(&world, "Ready", is_ready).await;
    let status = octavia_status(&world, "cp").await;
    let address = status.floating_ip.clone().expect("floating IP in status");
    assert!(address.starts_with("203.0.113."), "{address}");
    assert!(status.floating_ip_allocated);
    // The -ext endpoint and the LoadBalancer's address are the floating IP, not the VIP.
    assert_eq!(ext_addresses(&world, "cp-ext").await, vec![address.clone()]);
    assert_eq!(lb.status.as_ref().unwrap().addresses[0].address, address);
    let id = status.floating_ip_id.clone().unwrap();
    let (code, neutron) = fip(&h, &id);
    assert_eq!(code, 200);
    assert_eq!(
        neutron["port_id"],
        status.vip_port_id.clone().unwrap().as_str()
    );
    let uid = lb.metadata.uid.clone().unwrap();
    assert!(
        neutron["tags"]
            .as_array()
            .unwrap()
            .contains(&json!(format!("capi-lb-uid={uid}")))
    );

    // Steady state still costs one Octavia request and no Neutron request.
    world.openstack.clear();
    world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(
        world.openstack.calls(),
        vec![("loadbalancer.status".to_string(), Some(200))]
    );

    // A lost status: the floating IP on the VIP port is found again, not allocated twice.
    wipe_octavia_status(&world).await;
    let restarted = world.restart();
    reconcile_cp_until(&restarted, "Ready again", is_ready).await;
    let again = octavia_status(&restarted, "cp").await;
    assert_eq!(again.floating_ip_id.as_deref(), Some(id.as_str()));
    let (_, list) = h.neutron("GET", &format!("floatingips?tags=capi-lb-uid={uid}"), None);
    assert_eq!(list["floatingips"].as_array().unwrap().len(), 1);

    delete_and_settle(&restarted, &h, &uid_tag(&lb)).await;
    assert_eq!(fip(&h, &id).0, 404, "the allocated floating IP is released");
}

/// `clusterctl move` (emulated in one in-memory API, Octavia shared as two management clusters share
/// one cloud): the copy, with new UIDs and no status, handled by a controller that never saw it,
/// adopts the Octavia load balancer and its floating IP by their tags; the endpoint does not change;
/// nothing is created or deleted in OpenStack; deleting the copy later removes both.
#[tokio::test]
async fn a_load_balancer_moved_by_clusterctl_keeps_its_octavia_load_balancer_and_floating_ip() {
    let (h, _api) = shared_api().await;
    let mut objects = basic(&h);
    objects[2] = olb(
        "cp",
        &h,
        json!({"floatingIP": {"networkID": h.var("FIP_NETWORK_ID")}}),
    );
    objects.push(cluster("demo", false));
    let world = World::new(objects).await.unwrap();
    let lb = reconcile_cp_until(&world, "Ready", is_ready).await;
    let tag = uid_tag(&lb);
    let before = octavia_status(&world, "cp").await;
    let address = before.floating_ip.clone().unwrap();
    assert_eq!(ext_addresses(&world, "cp-ext").await, vec![address.clone()]);

    merge_patch::<Cluster>(&world, "demo", json!({"spec": {"paused": true}})).await;
    world.reconcile(NS, "cp").await.unwrap();
    let uids = clusterctl_move(
        &world,
        &[
            (ApiResource::erase::<LoadBalancer>(&()), "cp"),
            (ApiResource::erase::<OctaviaLoadBalancer>(&()), "cp"),
        ],
        true,
    )
    .await;
    assert!(!uids.values().any(|new| tag.ends_with(new.as_str())));
    assert!(
        octavia_status(&world, "cp")
            .await
            .load_balancer_id
            .is_none()
    );
    // The target's controller: a new process, which never saw these objects.
    let target = world.restart();
    target.openstack.clear();
    merge_patch::<Cluster>(&target, "demo", json!({"spec": {"paused": false}})).await;
    let lb = reconcile_cp_until(&target, "Ready after the move", is_ready).await;
    let after = octavia_status(&target, "cp").await;
    assert_eq!(after.load_balancer_id, before.load_balancer_id, "adopted");
    assert_eq!(after.floating_ip_id, before.floating_ip_id);
    assert_eq!(lb.status.as_ref().unwrap().addresses[0].address, address);
    assert_eq!(
        ext_addresses(&target, "cp-ext").await,
        vec![address.clone()]
    );
    assert_eq!(h.lbs_tagged(&tag).len(), 1, "no second load balancer");
    let created: Vec<String> = target
        .openstack
        .calls()
        .into_iter()
        .map(|(op, _)| op)
        .filter(|op| op != "token.create" && (op.ends_with(".create") || op.ends_with(".delete")))
        .collect();
    assert!(created.is_empty(), "{created:?}");
    assert_eq!(members(&h, &after).len(), 2, "members kept");

    delete_and_settle(&target, &h, &tag).await;
    assert_eq!(fip(&h, &before.floating_ip_id.unwrap()).0, 404);
}

#[tokio::test]
async fn a_given_floating_ip_is_used_never_stolen_and_kept_on_delete() {
    let (h, _api) = shared_api().await;
    let network = h.var("FIP_NETWORK_ID");
    let create = |port: Option<&str>| {
        let (code, body) = h.neutron(
            "POST",
            "floatingips",
            Some(json!({"floatingip": {"floating_network_id": network, "port_id": port}})),
        );
        assert_eq!(code, 201, "{body}");
        (
            body["floatingip"]["id"].as_str().unwrap().to_string(),
            body["floatingip"]["floating_ip_address"]
                .as_str()
                .unwrap()
                .to_string(),
        )
    };
    // One in use by someone else's port: capi-lb must not take it.
    let (busy_id, busy) = create(Some("someone-elses-port"));
    let mut objects = basic(&h);
    objects[2] = olb("cp", &h, json!({"floatingIP": {"address": busy}}));
    let world = World::new(objects).await.unwrap();
    reconcile_cp_until(&world, "FloatingIPInUse", |lb| {
        cond(lb, "InfrastructureReady").1 == "FloatingIPInUse"
    })
    .await;
    assert_eq!(fip(&h, &busy_id).1["port_id"], "someone-elses-port");

    // A free one, named with a network it is not on: not taken.
    let (free_id, free) = create(None);
    patch_olb(
        &world,
        json!({"floatingIP": {"networkID": "not-its-network", "address": free}}),
    )
    .await;
    let lb = reconcile_cp_until(&world, "FloatingIPNotFound", |lb| {
        cond(lb, "InfrastructureReady").1 == "FloatingIPNotFound"
    })
    .await;
    let c = condition(&lb, "InfrastructureReady");
    assert!(c.message.contains("not on floatingIP.networkID"), "{c:?}");
    assert!(fip(&h, &free_id).1["port_id"].is_null());
    // With its own network (as the kamaji-octavia flavor names both): associated with the VIP,
    // published, and kept (disassociated) on delete.
    patch_olb(
        &world,
        json!({"floatingIP": {"networkID": network, "address": free}}),
    )
    .await;
    let lb = reconcile_cp_until(&world, "Ready", is_ready).await;
    let status = octavia_status(&world, "cp").await;
    assert_eq!(status.floating_ip.as_deref(), Some(free.as_str()));
    assert!(!status.floating_ip_allocated);
    assert_eq!(
        fip(&h, &free_id).1["port_id"],
        status.vip_port_id.clone().unwrap().as_str()
    );
    assert_eq!(ext_addresses(&world, "cp-ext").await, vec![free.clone()]);

    delete_and_settle(&world, &h, &uid_tag(&lb)).await;
    let (code, kept) = fip(&h, &free_id);
    assert_eq!(code, 200, "a given floating IP is never deleted");
    assert!(kept["port_id"].is_null(), "{kept}");
    assert_eq!(fip(&h, &busy_id).1["port_id"], "someone-elses-port");
    for id in [free_id, busy_id] {
        assert_eq!(
            h.neutron("DELETE", &format!("floatingips/{id}"), None).0,
            204
        );
    }
}

#[tokio::test]
async fn a_load_balancer_in_error_is_reported_and_recreated_when_configured() {
    let (h, _api) = shared_api().await;
    let world = World::new(basic(&h)).await.unwrap();
    let lb = reconcile_cp_until(&world, "Ready", is_ready).await;
    let tag = uid_tag(&lb);
    let id = octavia_status(&world, "cp").await.load_balancer_id.unwrap();
    // Let the worker finish its flow first (it marks the load balancer ACTIVE
    // at its end), so that the ERROR stays.
    tokio::time::sleep(Duration::from_secs(2)).await;
    h.wait_active(&id);
    h.set_provisioning_status(&id, "ERROR");

    let lb = reconcile_cp_until(&world, "LoadBalancerError", |lb| {
        cond(lb, "InfrastructureReady").1 == "LoadBalancerError"
    })
    .await;
    let c = condition(&lb, "InfrastructureReady");
    assert!(
        c.message.contains(&id) && c.message.contains("recreateOnError"),
        "{c:?}"
    );
    // Reported, not acted on: still the same one.
    assert_eq!(h.lbs_tagged(&tag).len(), 1);

    patch_olb(&world, json!({"recreateOnError": true})).await;
    reconcile_cp_until(&world, "recreated and Ready", ready_with(2)).await;
    let status = octavia_status(&world, "cp").await;
    assert_ne!(status.load_balancer_id.as_deref(), Some(id.as_str()));
    let found = h.lbs_tagged(&tag);
    assert_eq!(
        found.len(),
        1,
        "the one in ERROR is gone, one new: {found:?}"
    );
    assert_eq!(members(&h, &status).len(), 2);
    delete_and_settle(&world, &h, &tag).await;
}

/// The `kamaji-octavia` clusterctl flavor, deployed for real: its LoadBalancer and
/// OctaviaLoadBalancer on the real Octavia API with a floating IP, realising the Service Kamaji
/// creates for the tenant control plane (emulated here: Kamaji itself is not running).
#[tokio::test]
async fn the_kamaji_octavia_flavor_realises_kamajis_service_with_a_floating_ip() {
    let (h, _api) = shared_api().await;
    let subnet = h.var("OCTAVIA_SUBNET_ID");
    let network = h.var("FIP_NETWORK_ID");
    let values = std::collections::BTreeMap::from([
        ("CLUSTER_NAME", "tenant"),
        ("NAMESPACE", NS),
        ("KUBERNETES_VERSION", "v1.32.0"),
        ("CAPI_LB_OCTAVIA_SUBNET_ID", subnet.as_str()),
        ("CAPI_LB_OCTAVIA_FIP_NETWORK", network.as_str()),
        ("CAPI_LB_OCTAVIA_SECRET", "openstack"),
        ("CAPI_LB_OCTAVIA_CLOUD", "harness"),
    ]);
    let text =
        std::fs::read_to_string(repo("templates/cluster-template-kamaji-octavia.yaml")).unwrap();
    let (text, _) = substitute(&text, &values);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let mut objects: Vec<Value> = docs
        .iter()
        .filter(|d| d["kind"] == "LoadBalancer" || d["kind"] == "OctaviaLoadBalancer")
        .cloned()
        .collect();
    assert_eq!(objects.len(), 2, "{text}");
    let kamaji = docs
        .iter()
        .find(|d| d["kind"] == "KamajiControlPlane")
        .unwrap();
    let lb_name = objects[0]["metadata"]["name"].as_str().unwrap().to_string();
    // What Kamaji creates from the KamajiControlPlane: its Service (class and annotations from
    // spec.network) and, once its pods run, the Service's EndpointSlice.
    let network_spec = &kamaji["spec"]["network"];
    objects.push(Harness::secret("openstack", &h.clouds_yaml));
    objects.push(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "tenant", "namespace": NS, "annotations": network_spec["serviceAnnotations"].clone()},
        "spec": {"type": "LoadBalancer",
                 "loadBalancerClass": network_spec["loadBalancerConfig"]["loadBalancerClass"].clone(),
                 "ports": [{"name": "kube-apiserver", "port": 6443, "targetPort": 6443}]}}));
    objects.push(json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "tenant-abcde", "namespace": NS, "labels": {"kubernetes.io/service-name": "tenant"}},
        "addressType": "IPv4", "ports": [{"name": "kube-apiserver", "port": 6443}],
        "endpoints": [{"addresses": ["10.244.1.7"], "conditions": {"ready": true}},
                      {"addresses": ["10.244.2.9"], "conditions": {"ready": true}}]}));
    let world = World::new(objects).await.unwrap();

    let deadline = Instant::now() + Duration::from_secs(60);
    let ingress = loop {
        world.settle_services(5).await.unwrap();
        world.reconcile(NS, &lb_name).await.unwrap();
        let svc = service(&world, "tenant").await.unwrap();
        let ingress: Vec<String> = svc
            .status
            .and_then(|s| s.load_balancer)
            .and_then(|l| l.ingress)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|i| i.ip)
            .collect();
        let lb = Api::<LoadBalancer>::namespaced(world.client(), NS)
            .get(&lb_name)
            .await
            .unwrap();
        if !ingress.is_empty() && is_ready(&lb) {
            break ingress;
        }
        assert!(Instant::now() < deadline, "{:#?}", lb.status);
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let status = Api::<OctaviaLoadBalancer>::namespaced(world.client(), NS)
        .get(&lb_name)
        .await
        .unwrap()
        .status
        .unwrap();
    // Kamaji gets an IP (it rejects hostname-only ingress): the floating IP, with ipMode Proxy
    // (Octavia's amphorae proxy: kube-proxy must not send in-cluster clients past them).
    assert_eq!(ingress, vec![status.floating_ip.clone().unwrap()]);
    let modes: Vec<Option<String>> = service(&world, "tenant")
        .await
        .unwrap()
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|l| l.ingress)
        .unwrap_or_default()
        .into_iter()
        .map(|i| i.ip_mode)
        .collect();
    assert_eq!(modes, vec![Some("Proxy".to_string())]);
    let mut members = members(&h, &status);
    members.sort();
    assert_eq!(
        members.iter().map(|m| m.1.as_str()).collect::<Vec<_>>(),
        vec!["10.244.1.7", "10.244.2.9"]
    );
    let lb = Api::<LoadBalancer>::namespaced(world.client(), NS)
        .get(&lb_name)
        .await
        .unwrap();
    let tag = uid_tag(&lb);
    delete_until_gone(&world, NS, &lb_name).await;
    assert!(h.lbs_tagged(&tag).is_empty());
    let id = status.floating_ip_id.unwrap();
    assert_eq!(fip(&h, &id).0, 404);
}

/// The manifests in examples/octavia work on the real Octavia API, with the cloud-specific values
/// (credentials, VIP subnet, external network) swapped for the harness's.
#[tokio::test]
async fn the_octavia_examples_become_ready() {
    use capi_lb_api::validation::parse;
    let (h, _api) = shared_api().await;
    let ns = "tenants";
    // The given floating IP of given-floating-ip.yaml exists (free) in the project.
    let (code, given) = h.neutron(
        "POST",
        "floatingips",
        Some(json!({"floatingip": {"floating_network_id": h.var("FIP_NETWORK_ID"), "floating_ip_address": "203.0.113.200"}})),
    );
    assert_eq!(code, 201, "{given}");
    let given_id = given["floatingip"]["id"].as_str().unwrap().to_string();
    let dir = repo("examples/octavia");
    let mut objects: Vec<Value> = Vec::new();
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for mut doc in serde_saphyr::from_multiple::<Value>(&text).unwrap() {
            match doc["kind"].as_str().unwrap() {
                "LoadBalancer" => {
                    parse::<LoadBalancer>(&doc).unwrap_or_else(|e| panic!("{path:?}: {e}"));
                    names.push(doc["metadata"]["name"].as_str().unwrap().to_string());
                }
                "OctaviaLoadBalancer" => {
                    parse::<OctaviaLoadBalancer>(&doc).unwrap_or_else(|e| panic!("{path:?}: {e}"));
                    doc["spec"]["vip"]["subnetID"] = json!(h.var("OCTAVIA_SUBNET_ID"));
                    if doc["spec"]["floatingIP"]["networkID"].is_string() {
                        doc["spec"]["floatingIP"]["networkID"] = json!(h.var("FIP_NETWORK_ID"));
                    }
                }
                "Secret" => {
                    assert!(
                        doc["stringData"]["clouds.yaml"]
                            .as_str()
                            .unwrap()
                            .contains("openstack:")
                    );
                    doc["stringData"]["clouds.yaml"] =
                        json!(h.clouds_yaml.replace("  harness:\n", "  openstack:\n"));
                }
                other => panic!("{path:?}: unexpected kind {other}"),
            }
            objects.push(doc);
        }
    }
    assert_eq!(names.len(), 2, "{names:?}");
    for (cluster, ip) in [("tenant-a", "10.10.0.11"), ("tenant-b", "10.20.0.11")] {
        let mut m = machine(&format!("{cluster}-cp-1"), "x", ip).build();
        m["metadata"]["namespace"] = json!(ns);
        m["metadata"]["labels"] =
            json!({"cluster.x-k8s.io/cluster-name": cluster, "cluster.x-k8s.io/control-plane": ""});
        objects.push(m);
    }
    let world = World::new(objects).await.unwrap();
    let mut tags = Vec::new();
    for name in &names {
        let lb = reconcile_until(&world, ns, name, "Ready", |lb| {
            lb.status
                .as_ref()
                .is_some_and(|s| s.ready && s.active_targets.len() == 1)
        })
        .await;
        tags.push(uid_tag(&lb));
    }
    let b = Api::<OctaviaLoadBalancer>::namespaced(world.client(), ns)
        .get("tenant-b-cp")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(b.floating_ip.as_deref(), Some("203.0.113.200"));
    let (_, listener) = h.octavia(
        "GET",
        &format!(
            "lbaas/listeners/{}",
            b.listeners[0].listener_id.clone().unwrap()
        ),
        None,
    );
    assert_eq!(
        listener["listener"]["allowed_cidrs"],
        json!(["192.0.2.0/24", "198.51.100.0/24"])
    );
    for name in &names {
        delete_until_gone(&world, ns, name).await;
    }
    for tag in tags {
        assert!(h.lbs_tagged(&tag).is_empty());
    }
    assert_eq!(fip(&h, &given_id).0, 200, "the given floating IP is kept");
    assert_eq!(
        h.neutron("DELETE", &format!("floatingips/{given_id}"), None)
            .0,
        204
    );
}

#[tokio::test]
async fn an_unknown_provider_driver_or_flavor_is_a_clear_condition() {
    let (h, _api) = shared_api().await;
    let mut objects = basic(&h);
    // The harness's Octavia enables only the amphora driver.
    objects[2] = olb("cp", &h, json!({"provider": "ovn"}));
    let world = World::new(objects).await.unwrap();
    world.reconcile(NS, "cp").await.unwrap();
    let c = condition(&get_lb(&world, "cp").await, "InfrastructureReady");
    assert_eq!(c.reason, "ProviderOrFlavorNotFound", "{c:?}");
    assert!(c.message.contains("Provider 'ovn' is not enabled"), "{c:?}");

    patch_olb(
        &world,
        json!({"provider": null, "flavorID": "0b9e7c3e-1111-4222-8333-444455556666"}),
    )
    .await;
    world.reconcile(NS, "cp").await.unwrap();
    let c = condition(&get_lb(&world, "cp").await, "InfrastructureReady");
    assert_eq!(c.reason, "ProviderOrFlavorNotFound", "{c:?}");
    assert!(c.message.contains("flavor"), "{c:?}");
    let lb = get_lb(&world, "cp").await;
    assert!(
        h.lbs_tagged(&uid_tag(&lb)).is_empty(),
        "nothing was created"
    );

    // Fixed: it goes ahead.
    patch_olb(&world, json!({"flavorID": null})).await;
    let lb = reconcile_cp_until(&world, "Ready", is_ready).await;
    delete_and_settle(&world, &h, &uid_tag(&lb)).await;
}

/// An application credential revoked while the controller runs (rotation gone wrong): the running
/// session's token stops working, re-authentication fails, and that is reported as
/// AuthenticationFailed — then a Secret with a working credential takes effect at once.
#[tokio::test]
async fn a_credential_revoked_while_running_is_reported_and_a_new_secret_recovers() {
    let (h, _api) = shared_api().await;
    let (user, cred, secret, clouds) = h.new_application_credential("capi-lb-revoked-test");
    let mut objects = basic(&h);
    objects[0] = Harness::secret("openstack", &clouds);
    objects[2] = olb(
        "cp",
        &h,
        json!({"credentials": {"secretName": "openstack", "cloud": "own"}}),
    );
    let world = World::new(objects).await.unwrap();
    let lb = reconcile_cp_until(&world, "Ready", is_ready).await;
    h.revoke_application_credential(&user, &cred);

    let lb_after = reconcile_cp_until(&world, "AuthenticationFailed", |lb| {
        cond(lb, "InfrastructureReady").1 == "AuthenticationFailed"
    })
    .await;
    let c = condition(&lb_after, "InfrastructureReady");
    assert!(c.message.contains("cloud own"), "{c:?}");
    assert!(
        !c.message.contains(&secret),
        "the secret must never appear: {c:?}"
    );

    // A working credential in the Secret: a new session at once, the same load balancer.
    let fixed: k8s_openapi::api::core::v1::Secret = serde_json::from_value(Harness::secret(
        "openstack",
        &h.clouds_yaml.replace("  harness:\n", "  own:\n"),
    ))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(world.client(), NS)
        .patch(
            "openstack",
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": fixed.data})),
        )
        .await
        .unwrap();
    reconcile_cp_until(&world, "Ready again", is_ready).await;
    assert_eq!(h.lbs_tagged(&uid_tag(&lb)).len(), 1);
    delete_and_settle(&world, &h, &uid_tag(&lb)).await;
}

/// Octavia members need IP addresses: a target that has only a DNS name (address types that allow
/// one) is reported on TargetsReady with a Warning Event, while the other targets serve.
#[tokio::test]
async fn a_target_with_only_a_dns_name_is_reported_and_the_others_serve() {
    let (h, _api) = shared_api().await;
    let mut objects = basic(&h);
    objects[1] = octavia_lb("cp")
        .spec("targetAddressTypes", json!(["InternalIP", "InternalDNS"]))
        .build();
    objects[4] = machine("cp-m2", "cp", "unused")
        .addresses(json!([{"type": "InternalDNS", "address": "cp-m2.nodes.example"}]))
        .build();
    let world = World::new(objects).await.unwrap();
    let lb = reconcile_cp_until(&world, "MemberAddressNotIP", |lb| {
        lb.status
            .as_ref()
            .is_some_and(|s| s.active_targets.len() == 1)
            && cond(lb, "TargetsReady").1 == "MemberAddressNotIP"
    })
    .await;
    let c = condition(&lb, "TargetsReady");
    assert!(c.message.contains("cp-m2"), "{c:?}");
    assert_eq!(cond(&lb, "InfrastructureReady").0, "True");
    assert!(
        world
            .ctx
            .events
            .timeline()
            .iter()
            .any(|e| e.warning && e.reason == "MemberAddressNotIP")
    );
    let status = octavia_status(&world, "cp").await;
    assert_eq!(
        members(&h, &status),
        vec![("cp-m1".to_string(), "10.0.0.11".to_string(), 1)]
    );
    delete_and_settle(&world, &h, &uid_tag(&lb)).await;
}

/// A member Octavia refuses (169.254.169.254 is a reserved member address in Octavia) does not keep
/// the load balancer from being created: the create that carried it is sent again without members,
/// the load balancer comes up and publishes its address, and the refusal is reported on
/// TargetsReady with a Warning Event (Octavia's batch member update takes all members or none).
/// Once the target has a usable address, every target serves.
#[tokio::test]
async fn a_member_octavia_refuses_does_not_keep_the_load_balancer_from_being_created() {
    let (h, _api) = shared_api().await;
    let mut objects = basic(&h);
    objects[4] = machine("cp-m2", "cp", "169.254.169.254").build();
    let world = World::new(objects).await.unwrap();
    world.openstack.clear();
    let lb = reconcile_cp_until(&world, "RequestRejected", |lb| {
        cond(lb, "InfrastructureReady").0 == "True"
            && cond(lb, "TargetsReady").1 == "RequestRejected"
    })
    .await;
    let creates: Vec<_> = world
        .openstack
        .calls()
        .into_iter()
        .filter(|(op, _)| op == "loadbalancer.create")
        .collect();
    assert_eq!(
        creates,
        vec![
            ("loadbalancer.create".to_string(), Some(400)),
            ("loadbalancer.create".to_string(), Some(201)),
        ]
    );
    let c = condition(&lb, "TargetsReady");
    assert!(c.message.contains("169.254.169.254"), "{c:?}");
    assert_eq!(ext_addresses(&world, "cp-ext").await, vec![VIP.to_string()]);
    assert!(
        world
            .ctx
            .events
            .timeline()
            .iter()
            .any(|e| e.warning && e.reason == "RequestRejected")
    );
    let tag = uid_tag(&lb);
    assert_eq!(
        h.lbs_tagged(&tag).len(),
        1,
        "one load balancer, no duplicate"
    );

    // The target gets a usable address: both serve.
    Api::<Machine>::namespaced(world.client(), NS)
        .patch_status(
            "cp-m2",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.12"}]}}),
            ),
        )
        .await
        .unwrap();
    reconcile_cp_until(&world, "both targets active", ready_with(2)).await;
    assert_eq!(
        members(&h, &octavia_status(&world, "cp").await),
        vec![
            ("cp-m1".to_string(), "10.0.0.11".to_string(), 1),
            ("cp-m2".to_string(), "10.0.0.12".to_string(), 1),
        ]
    );
    delete_and_settle(&world, &h, &tag).await;
}

/// A migration to another OctaviaLoadBalancer (make before break) brings the new load balancer up
/// with the serving members in its create: no member update before the switch. The old one is
/// deleted after the drain time.
#[tokio::test]
async fn a_migration_creates_the_new_load_balancer_with_the_serving_members() {
    let (h, _api) = shared_api().await;
    let mut objects = basic(&h);
    objects.push(olb("cp-new", &h, json!({})));
    let world = World::new(objects).await.unwrap();
    let lb = reconcile_cp_until(&world, "Ready", ready_with(2)).await;
    let tag = uid_tag(&lb);
    let old = octavia_status(&world, "cp").await.load_balancer_id.unwrap();

    merge_patch::<LoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"infrastructureRef": {"name": "cp-new"}}}),
    )
    .await;
    world.openstack.clear();
    let lb = reconcile_cp_until(&world, "switched to cp-new", |lb| {
        lb.status
            .as_ref()
            .and_then(|s| s.infrastructure_ref.as_ref())
            .is_some_and(|r| r.name == "cp-new")
    })
    .await;
    let ops: Vec<String> = world
        .openstack
        .calls()
        .into_iter()
        .map(|(op, _)| op)
        .collect();
    assert_eq!(
        ops.iter().filter(|op| *op == "loadbalancer.create").count(),
        1,
        "{ops:?}"
    );
    assert!(!ops.iter().any(|op| op == "member.batch-update"), "{ops:?}");
    assert!(ready_with(2)(&lb), "{lb:?}");
    let new = octavia_status(&world, "cp-new").await;
    assert_ne!(new.load_balancer_id.as_deref(), Some(old.as_str()));
    assert_eq!(
        members(&h, &new),
        vec![
            ("cp-m1".to_string(), "10.0.0.11".to_string(), 1),
            ("cp-m2".to_string(), "10.0.0.12".to_string(), 1),
        ]
    );
    assert_eq!(h.lbs_tagged(&tag).len(), 2, "the old one drains");

    world.clock.advance(Duration::from_secs(21));
    reconcile_cp_until(&world, "old one released", |lb| {
        lb.status.as_ref().is_some_and(|s| s.migration.is_none())
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while h.lbs_tagged(&tag).len() > 1 {
        assert!(Instant::now() < deadline, "{:?}", h.lbs_tagged(&tag));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        h.lbs_tagged(&tag)[0]["id"],
        new.load_balancer_id.unwrap().as_str()
    );
    delete_and_settle(&world, &h, &tag).await;
}

/// A floating IP someone else put on the VIP port is never taken over or deleted: allocation waits
/// with FloatingIPInUse until it is gone.
#[tokio::test]
async fn a_foreign_floating_ip_on_the_vip_port_is_left_alone() {
    let (h, _api) = shared_api().await;
    let world = World::new(basic(&h)).await.unwrap();
    let lb = reconcile_cp_until(&world, "Ready", is_ready).await;
    let port = octavia_status(&world, "cp").await.vip_port_id.unwrap();
    let (code, body) = h.neutron(
        "POST",
        "floatingips",
        Some(json!({"floatingip": {"floating_network_id": h.var("FIP_NETWORK_ID"), "port_id": port}})),
    );
    assert_eq!(code, 201, "{body}");
    let foreign = body["floatingip"]["id"].as_str().unwrap().to_string();
    patch_olb(
        &world,
        json!({"floatingIP": {"networkID": h.var("FIP_NETWORK_ID")}}),
    )
    .await;
    let lb_now = reconcile_cp_until(&world, "FloatingIPInUse", |lb| {
        cond(lb, "InfrastructureReady").1 == "FloatingIPInUse"
    })
    .await;
    let c = condition(&lb_now, "InfrastructureReady");
    assert!(c.message.contains("did not allocate"), "{c:?}");
    let (code, still) = fip(&h, &foreign);
    assert_eq!(code, 200);
    assert_eq!(still["port_id"], port.as_str());
    assert!(
        still["tags"].as_array().unwrap().is_empty(),
        "not tagged as ours"
    );

    // Once it is gone, capi-lb allocates its own.
    assert_eq!(
        h.neutron("DELETE", &format!("floatingips/{foreign}"), None)
            .0,
        204
    );
    reconcile_cp_until(&world, "Ready with an allocated floating IP", is_ready).await;
    let status = octavia_status(&world, "cp").await;
    assert!(
        status.floating_ip_allocated && status.floating_ip_id.as_deref() != Some(foreign.as_str())
    );
    delete_and_settle(&world, &h, &uid_tag(&lb)).await;
}

/// The listeners' allowed CIDRs of load balancer `status`, sorted.
fn allowed_cidrs(h: &Harness, status: &OctaviaLoadBalancerStatus) -> Vec<String> {
    let listener = status.listeners[0].listener_id.clone().unwrap();
    let (_, body) = h.octavia("GET", &format!("lbaas/listeners/{listener}"), None);
    let mut cidrs: Vec<String> = body["listener"]["allowed_cidrs"]
        .as_array()
        .map(|a| a.iter().map(|c| c.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    cidrs.sort();
    cidrs
}

/// The LoadBalancer's `spec.sourceRanges` become the listeners' `allowed_cidrs`, within the
/// OctaviaLoadBalancer's own `listener.allowedCIDRs`: ranges outside them are refused with a clear
/// condition and change nothing; without them the infrastructure's apply again.
#[tokio::test]
async fn source_ranges_become_allowed_cidrs_within_the_infrastructures() {
    let (h, _api) = shared_api().await;
    let mut objects = basic(&h);
    objects[1] = octavia_lb("cp")
        .spec("sourceRanges", json!(["10.1.0.0/16", "10.2.0.0/16"]))
        .build();
    objects[2] = olb(
        "cp",
        &h,
        json!({"listener": {"allowedCIDRs": ["10.0.0.0/8"]}}),
    );
    let world = World::new(objects).await.unwrap();
    let lb = reconcile_cp_until(&world, "Ready", is_ready).await;
    assert_eq!(
        cond(&lb, "SpecHonoured"),
        ("True".to_string(), "Honoured".to_string())
    );
    let status = octavia_status(&world, "cp").await;
    assert_eq!(allowed_cidrs(&h, &status), ["10.1.0.0/16", "10.2.0.0/16"]);

    // Wider than the infrastructure allows: refused, the listener keeps what it had.
    merge_patch::<LoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"sourceRanges": ["192.0.2.0/24"]}}),
    )
    .await;
    world.reconcile(NS, "cp").await.unwrap();
    let c = condition(&get_lb(&world, "cp").await, "InfrastructureReady");
    assert_eq!(c.reason, "ProviderFailed", "{c:?}");
    assert!(
        c.message.contains("192.0.2.0/24 are not within OctaviaLoadBalancer cp's listener.allowedCIDRs (10.0.0.0/8)"),
        "{c:?}"
    );
    assert_eq!(allowed_cidrs(&h, &status), ["10.1.0.0/16", "10.2.0.0/16"]);

    // Without the LoadBalancer's ranges, the infrastructure's apply.
    merge_patch::<LoadBalancer>(&world, "cp", json!({"spec": {"sourceRanges": null}})).await;
    let mut rounds = 0;
    while allowed_cidrs(&h, &status) != ["10.0.0.0/8"] {
        rounds += 1;
        assert!(
            rounds < 40,
            "listener still allows {:?}",
            allowed_cidrs(&h, &status)
        );
        let _ = world.reconcile(NS, "cp").await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let lb = reconcile_cp_until(&world, "Ready again", is_ready).await;
    delete_and_settle(&world, &h, &uid_tag(&lb)).await;
}
