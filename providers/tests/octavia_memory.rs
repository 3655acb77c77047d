//! How much reading an Octavia version document of the byte cap's size holds: the parser visits its
//! entries one at a time (`octavia::versions`), where a JSON value tree of the same document holds
//! many times its size. Measured with dhat's heap statistics (the only test of this binary, so no
//! other test's allocations are counted).

#![allow(clippy::unwrap_used)]

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
fn a_version_document_of_four_mib_is_read_holding_a_few_kib() {
    let _profiler = dhat::Profiler::builder().testing().build();
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

    // The same document as a value tree, for scale: what the parser avoids.
    let (tree, tree_held) = peak_of(|| serde_json::from_slice::<serde_json::Value>(&document));
    assert!(tree.unwrap().is_object());
    eprintln!("as a value tree it held {tree_held} bytes");
    assert!(
        tree_held > 16 << 20,
        "a value tree of the document held {tree_held} bytes"
    );
}

/// `n` in decimal (a short string: the largest allocation while the document is built).
fn itoa(n: u32) -> String {
    n.to_string()
}
