//! Every parser of what a tenant writes or a tenant's server answers, driven with generated input
//! (proptest): kubeconfigs from Secrets, remote answers through the value budget, the Namespace
//! annotations of the address and name policies, target state annotations, and addresses. None may
//! panic, and an answer the budget lets through parses into no more values than the budget allows.

use std::net::IpAddr;
use std::time::Duration;

use capi_lb::policy::addresses::{AddressPolicy, Context, canonical, namespace_allow};
use capi_lb::policy::names::{NamePolicy, NamespaceNames};
use capi_lb_api::loadbalancer::LoadBalancerAddress;
use capi_lb_api::target::TargetState;
use capi_lb_providers::untrusted::{Limits, budget};
use proptest::prelude::*;
use serde_json::Value;

const SMALL: Limits = Limits {
    connect: Duration::from_secs(1),
    answer: Duration::from_secs(1),
    bytes: 1 << 16,
    values: 512,
};

/// JSON values of every shape, nested up to 40 deep (deeper than the budget allows).
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| Value::Number(n.into())),
        ".{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(40, 2_000, 16, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..16).prop_map(Value::Array),
            prop::collection::btree_map(".{0,6}", inner, 0..16)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Every value of `v`, keys of objects included (as the budget counts them).
fn count(v: &Value) -> usize {
    1 + match v {
        Value::Array(items) => items.iter().map(count).sum(),
        Value::Object(map) => map.values().map(|v| 1 + count(v)).sum(),
        _ => 0,
    }
}

fn depth(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_budget_lets_through_only_what_parses_within_it(value in json()) {
        let bytes = serde_json::to_vec(&value).unwrap();
        match budget::check(&bytes, &SMALL) {
            Ok(()) => {
                let parsed: Value = serde_json::from_slice(&bytes).unwrap();
                prop_assert!(count(&parsed) <= SMALL.values);
                prop_assert!(depth(&parsed) <= capi_lb_providers::untrusted::MAX_DEPTH);
            }
            Err(_) => prop_assert!(
                count(&value) > SMALL.values || depth(&value) > capi_lb_providers::untrusted::MAX_DEPTH
            ),
        }
    }

    #[test]
    fn no_byte_string_panics_the_budget(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        let _ = budget::check(&bytes, &SMALL);
    }

    #[test]
    fn no_kubeconfig_panics_its_parser(text in ".{0,600}", yaml_ish in "(apiVersion: v1\nkind: Config\n)?(clusters:\n- name: [a-z]{1,4}\n  cluster:\n    server: [ -~]{0,40}\n)?(users:\n- name: [a-z]{1,4}\n  user:\n    (token|tokenFile|client-key|exec): [ -~]{0,20}\n)?(contexts:\n- name: x\n  context: \\{cluster: [a-z]{1,4}, user: [a-z]{1,4}\\}\ncurrent-context: x\n)?") {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        for candidate in [text, yaml_ish] {
            let made = runtime.block_on(capi_lb_providers::untrusted::kube::client(
                &candidate,
                "Secret a/b key value",
                SMALL,
            ));
            if let Err(why) = made {
                // Never quotes what it was given beyond its place.
                prop_assert!(why.starts_with("Secret a/b key value"), "{}", why);
            }
        }
    }

    #[test]
    fn no_annotation_panics_the_policies(value in ".{0,200}", name in ".{0,80}", ns in "[a-z0-9-]{1,20}") {
        // An annotation that does not parse allows nothing; one that does is CIDRs.
        if let Ok(ranges) = namespace_allow(&value) {
            prop_assert!(ranges.len() <= value.split(',').count());
        }
        let policy = NamePolicy { domains: vec!["{namespace}.example.com".into()], wildcards: false };
        let _ = policy.check(&name, &ns, NamespaceNames { domains: Some(&value), wildcards: Some(&value) });
        let _ = policy.check(&name, &ns, NamespaceNames::default());
        let _ = TargetState::parse(&value);
    }

    #[test]
    fn an_address_is_judged_as_its_canonical_form(text in ".{0,60}", v4 in any::<[u8; 4]>()) {
        let policy = AddressPolicy::default();
        let never = |_: IpAddr| false;
        let context = Context { provider: Some("inmemory"), namespace_allow: None, is_cluster_ip: &never };
        let _ = policy.check(&text, context);
        let _ = canonical(&LoadBalancerAddress::ip(text.clone()));
        let plain = std::net::Ipv4Addr::from(v4);
        let mapped = format!("::ffff:{plain}");
        prop_assert_eq!(policy.check(&mapped, context), policy.check(&plain.to_string(), context));
        prop_assert_eq!(canonical(&LoadBalancerAddress::ip(mapped)).address, plain.to_string());
    }
}
