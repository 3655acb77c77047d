//! The one door to servers a tenant points capi-lb at: a remote kube-dc cluster (a kubeconfig
//! Secret), a workload cluster (Cluster API's kubeconfig Secret), Keystone, Octavia and Neutron (a
//! `clouds.yaml` Secret and the catalog it leads to), the addresses a probe connects to, and the DNS
//! servers a hostname is asked of. Every client of such a server is built here, so a new one cannot
//! forget a bound:
//!
//! - **no client-side retries**: a request is sent once; a `Retry-After` is never obeyed (the
//!   object's own back-off decides when to try again). kube-client 4's default retry layer obeyed
//!   any `Retry-After`, and `18446744073709551615` made it panic on `Instant` arithmetic (kube 5
//!   checks the sum, but still sleeps for any longer delay the server asks that does not overflow);
//! - **deadlines**: connecting (TCP and TLS) within [`Limits::connect`], the **whole** answer
//!   (headers and every byte of the body) within [`Limits::answer`], counted from the request's
//!   start: a read timeout alone starts again with every byte, so a server trickling a byte a
//!   second held a request for ever;
//! - **a byte cap**: at most [`Limits::bytes`] of an answer are read; a larger one fails its
//!   request (checked while reading, not after);
//! - **a value budget**: an answer is parsed only when it holds at most [`Limits::values`] JSON
//!   values, at most [`MAX_DEPTH`] deep ([`budget`], a counting pass over the bytes that allocates
//!   nothing), so what parsing makes of it is bounded too: `{"x":[0,0,...]}` is 2 bytes a value in
//!   the answer and about 80 in a parsed tree.
//!
//! Memory per answer is therefore at most [`Limits::bytes`] for the bytes plus
//! [`Limits::values`] times [`PARSED_VALUE_MAX`] for what is parsed of them, whatever the caller
//! parses into ([`Limits::memory_bound`]); where capi-lb has types for an answer (Octavia's and
//! Keystone's documents, Kubernetes' objects) parsing drops unknown fields as it goes and takes less.
//!
//! The profiles below are the limits of each kind of tenant server; docs/security.md lists them
//! with the test that shows each.

pub mod budget;
pub mod http;
pub mod kube;

use std::time::Duration;

/// The deepest nesting of arrays and objects an answer may have (capi-lb reads nothing deeper than
/// about eight levels; serde_json itself refuses 128).
pub const MAX_DEPTH: usize = 32;

/// An upper bound of the memory one parsed JSON value takes (a `serde_json::Value` is 32 bytes; in
/// an object, its key and the map's entry add up to about 48 more), used for the documented bound.
pub const PARSED_VALUE_MAX: usize = 96;

/// The bounds of every request to one kind of tenant server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How long connecting (TCP and TLS) may take.
    pub connect: Duration,
    /// How long the whole answer may take, from the request's start to its last byte.
    pub answer: Duration,
    /// The largest answer read, in bytes.
    pub bytes: usize,
    /// The most JSON values (scalars, arrays and objects) an answer may hold.
    pub values: usize,
}

impl Limits {
    /// The most memory one answer may take, read and parsed: its bytes, and what parsing makes of
    /// its values.
    pub const fn memory_bound(&self) -> usize {
        self.bytes + self.values * PARSED_VALUE_MAX
    }
}

/// A kube-dc cluster reached through a kubeconfig Secret: the provider reads single objects and
/// lists of one namespace's EIps, Services and Endpoints (a list of 1,000 Services is about 2 MB
/// and 40,000 values).
pub const KUBE_DC: Limits = Limits {
    connect: Duration::from_secs(5),
    answer: Duration::from_secs(10),
    bytes: 4 << 20,
    values: 1 << 17,
};

/// A workload cluster (`spec.workloadEndpoints`): a few small objects of `default`.
pub const WORKLOAD: Limits = Limits {
    connect: Duration::from_secs(5),
    answer: Duration::from_secs(10),
    bytes: 1 << 20,
    values: 1 << 15,
};

/// Keystone, Octavia and Neutron: a Keystone catalog of a large public cloud is about 100 KB and
/// 5,000 values; Octavia's largest answer capi-lb asks for (the status tree of one load balancer,
/// the members of one pool) is smaller.
pub const OPENSTACK: Limits = Limits {
    connect: Duration::from_secs(5),
    answer: Duration::from_secs(15),
    bytes: 4 << 20,
    values: 1 << 17,
};

/// The fault of a request to a tenant server, as its caller reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Not sent, not connected, or the connection broke.
    Failed(String),
    /// Not connected within [`Limits::connect`], or no whole answer within [`Limits::answer`].
    TimedOut(String),
    /// The answer is larger than [`Limits::bytes`].
    TooLarge(usize),
    /// The answer holds more values than [`Limits::values`], or nests deeper than [`MAX_DEPTH`].
    TooComplex(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Failed(why) => f.write_str(why),
            Refused::TimedOut(why) => f.write_str(why),
            Refused::TooLarge(max) if max % (1 << 20) == 0 => write!(
                f,
                "the answer is larger than {} MiB, the most capi-lb reads",
                max >> 20
            ),
            Refused::TooLarge(max) => write!(
                f,
                "the answer is larger than {} KiB, the most capi-lb reads",
                max >> 10
            ),
            Refused::TooComplex(why) => write!(f, "the answer is not read: {why}"),
        }
    }
}

/// The most of a tenant server's text (an error body, a fault string) quoted in a condition, an
/// Event or a log line: its server chose it.
pub const QUOTE_MAX: usize = 512;

/// `text` as capi-lb may quote it: at most [`QUOTE_MAX`] bytes (cut on a character boundary, with
/// `…`), control characters replaced.
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(QUOTE_MAX + 4));
    for c in text.chars() {
        if out.len() + c.len_utf8() > QUOTE_MAX {
            out.push('…');
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_short_and_printable() {
        assert_eq!(quote("no such pool"), "no such pool");
        assert_eq!(quote("a\nb\u{1b}[31m"), "a b [31m");
        let long = quote(&"x".repeat(20_000));
        assert!(long.len() <= QUOTE_MAX + '…'.len_utf8());
        assert!(long.ends_with('…'));
        let wide = quote(&"é".repeat(1_000));
        assert!(wide.len() <= QUOTE_MAX + '…'.len_utf8());
    }

    #[test]
    fn the_documented_bounds_hold() {
        // docs/security.md states these figures.
        assert_eq!(KUBE_DC.memory_bound(), (4 << 20) + (1 << 17) * 96);
        assert!(KUBE_DC.memory_bound() < 17 << 20);
        assert!(WORKLOAD.memory_bound() < 5 << 20);
        assert!(OPENSTACK.memory_bound() < 17 << 20);
    }
}
