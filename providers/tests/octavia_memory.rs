//! How much reading OpenStack answers of the byte cap's size holds: a version document
//! (`octavia::versions`) and Keystone's token (`octavia::keystone::TokenDocument`) are visited one
//! entry at a time, where a JSON value tree of the same answer holds many times its size. Measured
//! with dhat's heap statistics (dhat's profiler is one per process, so the answers are measured in
//! one test, the only one of this binary: no other test's allocations are counted).

#![allow(clippy::unwrap_used)]

use capi_lb_providers::octavia::keystone::TokenDocument;
use capi_lb_providers::octavia::versions::{Listed, highest};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// At least the most bytes held at once while `f` ran beyond what was held before: dhat's peak is
/// over the whole run, so this is exact when `f` raised it and otherwise bounds `f`'s peak by how far
/// the peak before stood above what was then held (kept small by the caller).
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = dhat::HeapStats::get();
    let out = f();
    let after = dhat::HeapStats::get();
    (out, after.max_bytes.saturating_sub(before.curr_bytes))
}

#[test]
fn answers_of_four_mib_are_read_holding_what_is_kept() {
    let _profiler = dhat::Profiler::builder().testing().build();
    // dhat's peak is over the whole run: the parsers are measured first, each answer in a buffer of
    // the same size, the value trees (tens of MiB) after.
    let document = a_version_document_of_four_mib_is_read_holding_a_few_kib();
    let token = a_token_of_four_mib_is_read_holding_the_kept_catalog();

    // The same answers as value trees, for scale: what the parsers avoid.
    for (what, answer) in [("version document", document), ("token", token)] {
        let (tree, tree_held) = peak_of(|| serde_json::from_slice::<serde_json::Value>(&answer));
        assert!(tree.unwrap().is_object());
        eprintln!("the {what} as a value tree held {tree_held} bytes");
        assert!(
            tree_held > 16 << 20,
            "a value tree of the {what} held {tree_held} bytes"
        );
    }
}

fn a_version_document_of_four_mib_is_read_holding_a_few_kib() -> Vec<u8> {
    // 4 MiB (the answer's byte cap, untrusted::OPENSTACK) of entries with unread fields, in a buffer
    // of its final size from the start (no peak left behind by its growth).
    let mut body = String::with_capacity(5 << 20);
    body.push_str(r#"{"versions": ["#);
    let mut i = 0;
    while body.len() < 4 << 20 {
        body.push_str(r#"{"id": "v2."#);
        body.push_str(itoa(i).as_str());
        body.push_str(r#"", "media-types": [{}, {}, [0, 0, 0]]},"#);
        i += 1;
    }
    body.push_str(r#"{"id": "v1.0"}]}"#);
    let document = body.into_bytes();

    let (chosen, held) = peak_of(|| highest(&document, "v2"));
    assert_eq!(
        chosen,
        Some(Listed {
            id: format!("v2.{}", i - 1),
            href: None,
            highest_minor: Some(i - 1),
        })
    );
    eprintln!(
        "reading a {} byte version document held {held} bytes at most",
        document.len()
    );
    assert!(held < 16 << 10, "reading the document held {held} bytes");
    document
}

fn a_token_of_four_mib_is_read_holding_the_kept_catalog() -> Vec<u8> {
    // A catalog of many services, the kept kinds among them, each with many endpoints.
    let mut body = String::with_capacity(5 << 20);
    body.push_str(r#"{"token": {"expires_at": "2026-11-30T00:00:00Z", "catalog": ["#);
    let mut services = 0;
    while body.len() < 4 << 20 {
        body.push_str(r#"{"type": ""#);
        body.push_str(["network", "compute", "load-balancer"][services % 3]);
        body.push_str(r#"", "endpoints": ["#);
        for _ in 0..200 {
            body.push_str(r#"{"interface": "public", "url": "http://x"}, {}, "#);
        }
        body.push_str("{}]},");
        services += 1;
    }
    body.push_str("{}]}}");
    let answer = body.into_bytes();

    let (document, held) = peak_of(|| serde_json::from_slice::<TokenDocument>(&answer));
    let document = document.unwrap();
    assert_eq!(document.expires_at(), Some("2026-11-30T00:00:00Z"));
    let kept = document.kept();
    let catalog = kept["token"]["catalog"].as_array().unwrap();
    assert_eq!(catalog.len(), 32, "{services} services");
    assert!(
        catalog
            .iter()
            .all(|s| s["endpoints"].as_array().unwrap().len() == 16)
    );
    eprintln!(
        "reading a {} byte token with {services} services held {held} bytes at most",
        answer.len()
    );
    // 32 services of 16 endpoints with four short texts each: about 100 KiB.
    assert!(held < 256 << 10, "reading the token held {held} bytes");
    answer
}

/// `n` in decimal (a short string: the largest allocation while the document is built).
fn itoa(n: u32) -> String {
    n.to_string()
}
