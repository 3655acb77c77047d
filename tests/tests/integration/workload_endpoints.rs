//! `spec.workloadEndpoints`, its decisions (pure): the workload cluster's
//! `default/kubernetes` EndpointSlices and Endpoints from the load balancer's addresses, the writes
//! that bring what is there to them (none when it already is), and when the API servers' own
//! endpoint reconciler is writing them back (capi-lb then holds).

use std::net::IpAddr;
use std::time::Duration;

use capi_lb::workload::plan::{self, Change, Decision, decide, desired};
use k8s_openapi::api::core::v1::Endpoints;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use serde_json::json;

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

fn slice_addresses(s: &EndpointSlice) -> Vec<String> {
    s.endpoints
        .iter()
        .flat_map(|e| e.addresses.clone())
        .collect()
}

#[test]
fn one_slice_per_family_the_primary_named_kubernetes_and_endpoints_of_the_primary_family() {
    let d = desired(&ips(&["2001:db8::7", "203.0.113.9", "203.0.113.2"]), 6443).unwrap();
    let names: Vec<_> = d
        .slices
        .iter()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["kubernetes", "kubernetes-ipv6"]);
    assert_eq!(d.slices[0].address_type, "IPv4");
    assert_eq!(
        slice_addresses(&d.slices[0]),
        ["203.0.113.2", "203.0.113.9"]
    );
    assert_eq!(d.slices[1].address_type, "IPv6");
    assert_eq!(slice_addresses(&d.slices[1]), ["2001:db8::7"]);
    for s in &d.slices {
        let labels = s.metadata.labels.as_ref().unwrap();
        // As the API server writes it: the Service's name and no managed-by label.
        assert_eq!(labels.len(), 1);
        assert_eq!(labels["kubernetes.io/service-name"], "kubernetes");
        let port = &s.ports.as_ref().unwrap()[0];
        assert_eq!(
            (port.name.as_deref(), port.port),
            (Some("https"), Some(6443))
        );
        assert!(
            s.endpoints
                .iter()
                .all(|e| e.conditions.as_ref().unwrap().ready == Some(true))
        );
    }
    let subsets = d.endpoints.subsets.as_ref().unwrap();
    let addresses: Vec<_> = subsets[0]
        .addresses
        .iter()
        .flatten()
        .map(|a| a.ip.clone())
        .collect();
    assert_eq!(addresses, ["203.0.113.2", "203.0.113.9"]);
    assert_eq!(
        d.endpoints.metadata.labels.as_ref().unwrap()["endpointslice.kubernetes.io/skip-mirror"],
        "true"
    );
    assert_eq!(subsets[0].ports.as_ref().unwrap()[0].port, 6443);

    let v6 = desired(&ips(&["2001:db8::7"]), 443).unwrap();
    assert_eq!(v6.slices.len(), 1);
    assert_eq!(v6.slices[0].metadata.name.as_deref(), Some("kubernetes"));
    assert_eq!(v6.slices[0].address_type, "IPv6");
}

#[test]
fn never_empty_and_never_an_address_a_pod_cannot_use() {
    assert_eq!(desired(&[], 6443), None);
    assert_eq!(
        desired(
            &ips(&["127.0.0.1", "169.254.1.1", "::1", "fe80::1", "0.0.0.0"]),
            6443
        ),
        None
    );
    let d = desired(&ips(&["127.0.0.1", "192.0.2.1", "192.0.2.1"]), 6443).unwrap();
    assert_eq!(slice_addresses(&d.slices[0]), ["192.0.2.1"]);
}

/// What a server-side apply of `d` leaves in the API (the same content, with what the server adds).
fn as_stored(d: &plan::Desired) -> (Vec<EndpointSlice>, Endpoints) {
    let mut slices = d.slices.clone();
    for s in &mut slices {
        s.metadata.resource_version = Some("7".into());
        s.metadata.uid = Some("u".into());
    }
    let mut e = d.endpoints.clone();
    e.metadata.resource_version = Some("8".into());
    (slices, e)
}

#[test]
fn nothing_to_write_when_the_endpoints_are_already_the_load_balancers() {
    let d = desired(&ips(&["203.0.113.2", "2001:db8::7"]), 6443).unwrap();
    let (slices, endpoints) = as_stored(&d);
    assert_eq!(plan::changes(&d, &slices, Some(&endpoints)), []);
}

#[test]
fn every_difference_is_written_and_only_it() {
    let d = desired(&ips(&["203.0.113.2"]), 6443).unwrap();
    // Nothing there yet: the slice and the Endpoints.
    let all = plan::changes(&d, &[], None);
    assert!(
        matches!(&all[..], [Change::ApplySlice(_), Change::ApplyEndpoints(_)]),
        "{all:?}"
    );

    // The API server's own: its advertise address, on its port.
    let theirs = desired(&ips(&["10.0.0.5"]), 6443).unwrap();
    let (slices, endpoints) = as_stored(&theirs);
    let c = plan::changes(&d, &slices, Some(&endpoints));
    assert!(
        matches!(&c[..], [Change::ApplySlice(_), Change::ApplyEndpoints(_)]),
        "{c:?}"
    );

    // Another port only.
    let (slices, endpoints) = as_stored(&desired(&ips(&["203.0.113.2"]), 443).unwrap());
    assert_eq!(plan::changes(&d, &slices, Some(&endpoints)).len(), 2);

    // The slice right, the Endpoints without the skip-mirror label.
    let (slices, mut endpoints) = as_stored(&d);
    endpoints.metadata.labels = None;
    let c = plan::changes(&d, &slices, Some(&endpoints));
    assert!(matches!(&c[..], [Change::ApplyEndpoints(_)]), "{c:?}");

    // A not-ready endpoint in the slice is not ours.
    let (mut slices, endpoints) = as_stored(&d);
    slices[0].endpoints[0].conditions.as_mut().unwrap().ready = Some(false);
    let c = plan::changes(&d, &slices, Some(&endpoints));
    assert!(matches!(&c[..], [Change::ApplySlice(_)]), "{c:?}");
}

#[test]
fn a_family_that_goes_loses_its_slice_and_a_changed_primary_family_replaces_the_slice() {
    let dual = desired(&ips(&["203.0.113.2", "2001:db8::7"]), 6443).unwrap();
    let (slices, endpoints) = as_stored(&dual);
    let v4 = desired(&ips(&["203.0.113.2"]), 6443).unwrap();
    let c = plan::changes(&v4, &slices, Some(&endpoints));
    assert_eq!(c, [Change::DeleteSlice("kubernetes-ipv6".into())]);

    let (slices, endpoints) = as_stored(&v4);
    let v6 = desired(&ips(&["2001:db8::7"]), 6443).unwrap();
    let c = plan::changes(&v6, &slices, Some(&endpoints));
    assert!(
        matches!(&c[..], [Change::ReplaceSlice(s), Change::ApplyEndpoints(_)] if s.address_type == "IPv6"),
        "{c:?}"
    );
    // A slice of another name for the same Service is not capi-lb's: left alone.
    let mut other = slices[0].clone();
    other.metadata.name = Some("kubernetes-abcde".into());
    let c = plan::changes(&v4, &[slices[0].clone(), other], Some(&endpoints));
    assert_eq!(c, []);
}

fn written_by(manager: &str, second: i64) -> ObjectMeta {
    let entry: ManagedFieldsEntry = serde_json::from_value(json!({
        "manager": manager, "operation": "Update", "apiVersion": "v1",
        "time": format!("2026-01-01T00:00:{second:02}Z"),
    }))
    .unwrap();
    ObjectMeta {
        managed_fields: Some(vec![entry]),
        ..ObjectMeta::default()
    }
}

#[test]
fn the_last_writer_is_foreign_unless_it_is_capi_lb() {
    let ours = written_by("capi-lb", 10);
    let apiserver = written_by("kube-apiserver", 20);
    assert_eq!(
        plan::foreign_writer([&ours, &apiserver]),
        Some("kube-apiserver".into())
    );
    let later = written_by("capi-lb", 30);
    assert_eq!(plan::foreign_writer([&apiserver, &later]), None);
    assert_eq!(plan::foreign_writer([&ObjectMeta::default()]), None);
}

#[test]
fn a_write_undone_by_someone_else_soon_after_is_the_api_servers_reconciler_and_capi_lb_holds() {
    let s = Duration::from_secs;
    // In sync: nothing to do, whoever wrote last.
    assert_eq!(
        decide(false, Some("kube-apiserver"), Some(s(5)), None),
        Decision::InSync
    );
    // First look, or the load balancer moved: written (an old foreign write is no fight).
    assert_eq!(
        decide(true, Some("kube-apiserver"), None, None),
        Decision::Write
    );
    assert_eq!(decide(true, None, Some(s(5)), None), Decision::Write);
    // Undone by the API server 15 s after capi-lb's write: hold.
    assert_eq!(
        decide(true, Some("kube-apiserver"), Some(s(15)), None),
        Decision::Hold
    );
    // Holding: no write until the retry.
    assert_eq!(
        decide(true, Some("kube-apiserver"), Some(s(200)), Some(s(60))),
        Decision::Hold
    );
    assert_eq!(
        decide(
            true,
            Some("kube-apiserver"),
            Some(s(400)),
            Some(plan::RETRY)
        ),
        Decision::Write
    );
    // A foreign edit long after capi-lb's write is repaired.
    assert_eq!(
        decide(
            true,
            Some("kubectl-edit"),
            Some(plan::FIGHT_WINDOW + s(1)),
            None
        ),
        Decision::Write
    );
}

/// A DNS server on a loopback UDP port answering from `zone` (name -> A/AAAA addresses, with
/// `ttl`), SERVFAIL for `broken`, NXDOMAIN for any other name; it answers until the test ends.
async fn fake_dns(
    zone: Vec<(&'static str, Vec<IpAddr>)>,
    ttl: u32,
    broken: &'static str,
) -> std::net::SocketAddr {
    use hickory_proto::op::{Message, ResponseCode};
    use hickory_proto::rr::rdata::{A, AAAA};
    use hickory_proto::rr::{RData, Record, RecordType};

    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let address = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 4096];
        loop {
            let (len, peer) = socket.recv_from(&mut buffer).await.unwrap();
            let request = Message::from_vec(&buffer[..len]).unwrap();
            let mut response = Message::response(request.metadata.id, request.metadata.op_code);
            response.metadata.authoritative = true;
            response.metadata.recursion_desired = request.metadata.recursion_desired;
            response.add_queries(request.queries.clone());
            let query = &request.queries[0];
            let name = query.name().to_string().to_lowercase();
            let name = name.trim_end_matches('.');
            if name == broken {
                response.metadata.response_code = ResponseCode::ServFail;
            } else if let Some((_, ips)) = zone.iter().find(|(n, _)| *n == name) {
                for ip in ips {
                    let data = match (ip, query.query_type()) {
                        (IpAddr::V4(v4), RecordType::A) => RData::A(A(*v4)),
                        (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(*v6)),
                        _ => continue,
                    };
                    response.add_answer(Record::from_rdata(query.name().clone(), ttl, data));
                }
            } else {
                response.metadata.response_code = ResponseCode::NXDomain;
            }
            socket
                .send_to(&response.to_vec().unwrap(), peer)
                .await
                .unwrap();
        }
    });
    address
}

/// The resolver of hostname-only load balancers against a DNS server the test controls: both
/// families with the smallest TTL, one family alone, NXDOMAIN and SERVFAIL as errors that say
/// what the server answered.
#[tokio::test]
async fn the_resolver_asks_a_and_aaaa_and_says_what_the_server_answered() {
    use capi_lb::workload::hostnames::TTL_FLOOR;
    use capi_lb::workload::resolver::Dns;

    let server = fake_dns(
        vec![
            (
                "dual.example",
                ips(&["203.0.113.5", "2001:db8::5", "203.0.113.6"]),
            ),
            ("v6.example", ips(&["2001:db8::6"])),
            ("none.example", vec![]),
        ],
        42,
        "broken.example",
    )
    .await;
    let dns = Dns::new(Some(server)).unwrap();

    let answer = dns.lookup("dual.example").await.unwrap();
    let mut found = answer.ips.clone();
    found.sort();
    assert_eq!(found, ips(&["203.0.113.5", "203.0.113.6", "2001:db8::5"]));
    assert_eq!(answer.ttl, Duration::from_secs(42));
    // An absolute name is asked as it is.
    let answer = dns.lookup("v6.example.").await.unwrap();
    assert_eq!(answer.ips, ips(&["2001:db8::6"]));

    let e = dns.lookup("gone.example").await.unwrap_err();
    assert!(
        e.contains("NXDOMAIN") && e.contains(&server.to_string()),
        "{e}"
    );
    let e = dns.lookup("none.example").await.unwrap_err();
    assert!(e.contains("no A or AAAA record"), "{e}");
    let e = dns.lookup("broken.example").await.unwrap_err();
    assert!(e.contains("query to") && e.contains("failed"), "{e}");
    // A TTL below the floor is asked again after the floor.
    assert_eq!(
        capi_lb::workload::hostnames::clamp(Duration::from_secs(1)),
        TTL_FLOOR
    );
}
