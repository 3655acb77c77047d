//! An index of a cache's objects by namespace, label and annotation key, so that a LoadBalancer's
//! listing of its targets looks at the objects its selector or its annotations can match instead
//! of every object of the namespace (with many LoadBalancers in one namespace, that made each
//! pass cost O(Machines), and a warm restart O(LoadBalancers x Machines)).
//!
//! The index files each object under hashes of what it can be looked up by. A hash collision only
//! adds candidates, which the caller's filter then drops, so the index must only never miss an
//! object the store has: it is kept a superset of the store. Keys an event adds are filed
//! before the reflector applies the event ([`Indexing::arriving`]), keys it drops are removed
//! after ([`Indexing::seen`]), and a relist's index is built beside the current one and replaces
//! it when the store swaps in the relist.

use std::collections::hash_map::DefaultHasher;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use kube::core::DynamicObject;
use kube::runtime::watcher::Event;

/// An object's namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Named {
    pub namespace: String,
    pub name: String,
}

impl From<&DynamicObject> for Named {
    fn from(object: &DynamicObject) -> Self {
        Self {
            namespace: object.metadata.namespace.clone().unwrap_or_default(),
            name: object.metadata.name.clone().unwrap_or_default(),
        }
    }
}

impl Named {
    /// An object's name, shared by the keys it is filed under; `None` for one without a name.
    fn of(object: &DynamicObject) -> Option<Arc<Self>> {
        object
            .metadata
            .name
            .is_some()
            .then(|| Arc::new(object.into()))
    }
}

/// What a listing can be narrowed to, within a namespace: the objects `selected` names, and
/// those carrying any of `annotations` or owned by any of `owners` (UIDs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lookup {
    pub selected: Selected,
    pub annotations: Vec<String>,
    pub owners: Vec<String>,
}

/// The objects a label selector can select.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selected {
    /// Every object (no requirement narrows it).
    Everything,
    /// Those meeting every one of these requirements: a label key and the values it may have.
    Labels(Vec<(String, Vec<String>)>),
    /// None.
    Nothing,
}

impl Lookup {
    /// Every object of the namespace.
    pub fn everything() -> Self {
        Self {
            selected: Selected::Everything,
            annotations: Vec::new(),
            owners: Vec::new(),
        }
    }

    /// The objects of the namespace labelled `key=value`.
    pub fn labelled(key: &str, value: &str) -> Self {
        Self {
            selected: Selected::Labels(vec![(key.to_string(), vec![value.to_string()])]),
            annotations: Vec::new(),
            owners: Vec::new(),
        }
    }

    /// The objects of the namespace that `owner` (a UID) owns.
    pub fn owned_by(owner: &str) -> Self {
        Self {
            selected: Selected::Nothing,
            annotations: Vec::new(),
            owners: vec![owner.to_string()],
        }
    }
}

/// What an object is filed under, within its namespace.
#[derive(Hash)]
enum Filed<'a> {
    Namespace,
    Label(&'a str, &'a str),
    Annotation(&'a str),
    Owner(&'a str),
}

fn key(namespace: &str, filed: Filed<'_>) -> u64 {
    // `DefaultHasher::new` has fixed keys: the same key in every index.
    let mut h = DefaultHasher::new();
    namespace.hash(&mut h);
    filed.hash(&mut h);
    h.finish()
}

/// The keys `object` is filed under: its namespace, each label (key and value), each annotation
/// key and each owner's UID.
fn keys(object: &DynamicObject) -> Vec<u64> {
    let meta = &object.metadata;
    let ns = meta.namespace.as_deref().unwrap_or_default();
    let labels = meta.labels.iter().flatten();
    let annotations = meta.annotations.iter().flatten();
    let owners = meta.owner_references.iter().flatten();
    let mut keys: Vec<u64> = std::iter::once(key(ns, Filed::Namespace))
        .chain(labels.map(|(k, v)| key(ns, Filed::Label(k, v))))
        .chain(annotations.map(|(k, _)| key(ns, Filed::Annotation(k))))
        .chain(owners.map(|o| key(ns, Filed::Owner(&o.uid))))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// The objects filed under one key. Most keys are one object's (an annotation naming a
/// LoadBalancer, an owner's UID), so one object is kept inline: a set for each key took 4 MB of a
/// 34 MB heap peak at 1,000 LoadBalancers.
#[derive(Debug)]
enum Posting {
    One(Arc<Named>),
    // Boxed: the map's entries stay 24 bytes (a set inline made each 56, for every key).
    #[allow(clippy::box_collection)]
    Many(Box<HashSet<Arc<Named>>>),
}

impl Posting {
    fn insert(&mut self, named: &Arc<Named>) {
        match self {
            Self::One(one) if one == named => {}
            Self::One(one) => {
                *self = Self::Many(Box::new(HashSet::from([one.clone(), named.clone()])));
            }
            Self::Many(many) => {
                many.insert(named.clone());
            }
        }
    }

    /// Remove `named`; true when nothing is left.
    fn remove(&mut self, named: &Arc<Named>) -> bool {
        match self {
            Self::One(one) => one == named,
            Self::Many(many) => {
                many.remove(named);
                match many.len() {
                    0 => true,
                    1 => {
                        if let Some(last) = many.iter().next().cloned() {
                            *self = Self::One(last);
                        }
                        false
                    }
                    _ => false,
                }
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::One(_) => 1,
            Self::Many(many) => many.len(),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Arc<Named>> {
        let (one, many) = match self {
            Self::One(one) => (Some(one), None),
            Self::Many(many) => (None, Some(many.iter())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }
}

/// Objects by key, and the keys of each object.
#[derive(Debug, Default)]
struct Index {
    postings: HashMap<u64, Posting>,
    filed: HashMap<Arc<Named>, Box<[u64]>>,
}

impl Index {
    /// File `named` under `keys` too (it stays under its other keys).
    fn add(&mut self, named: &Arc<Named>, keys: &[u64]) {
        for k in keys {
            match self.postings.entry(*k) {
                Entry::Occupied(mut posting) => posting.get_mut().insert(named),
                Entry::Vacant(vacant) => {
                    vacant.insert(Posting::One(named.clone()));
                }
            }
        }
    }

    /// `named` is filed under `keys` and nothing else.
    fn set(&mut self, named: Arc<Named>, keys: Vec<u64>) {
        self.add(&named, &keys);
        let stale: Vec<u64> = (self.filed.get(&named).into_iter().flatten())
            .filter(|k| keys.binary_search(k).is_err())
            .copied()
            .collect();
        for k in stale {
            self.unfile(&named, k);
        }
        self.filed.insert(named, keys.into_boxed_slice());
    }

    fn remove(&mut self, named: &Arc<Named>) {
        for k in self.filed.remove(named).unwrap_or_default() {
            self.unfile(named, k);
        }
    }

    fn unfile(&mut self, named: &Arc<Named>, key: u64) {
        if let Some(posting) = self.postings.get_mut(&key)
            && posting.remove(named)
        {
            self.postings.remove(&key);
        }
    }

    fn posting(&self, key: u64) -> impl Iterator<Item = &Arc<Named>> {
        self.postings.get(&key).into_iter().flat_map(Posting::iter)
    }

    fn count(&self, key: u64) -> usize {
        self.postings.get(&key).map_or(0, Posting::len)
    }

    /// The objects of `namespace` that `lookup` can match (and maybe some more): for the label
    /// part, those under the label requirement with the fewest objects.
    fn candidates(&self, namespace: &str, lookup: &Lookup) -> HashSet<Arc<Named>> {
        let requirement_keys = |(label, values): &(String, Vec<String>)| -> Vec<u64> {
            values
                .iter()
                .map(|v| key(namespace, Filed::Label(label, v)))
                .collect()
        };
        let selected = match &lookup.selected {
            Selected::Everything => vec![key(namespace, Filed::Namespace)],
            Selected::Labels(requirements) => requirements
                .iter()
                .map(requirement_keys)
                .min_by_key(|keys| keys.iter().map(|k| self.count(*k)).sum::<usize>())
                .unwrap_or_else(|| vec![key(namespace, Filed::Namespace)]),
            Selected::Nothing => Vec::new(),
        };
        let annotated = lookup
            .annotations
            .iter()
            .map(|a| key(namespace, Filed::Annotation(a)));
        let owned = lookup
            .owners
            .iter()
            .map(|o| key(namespace, Filed::Owner(o)));
        selected
            .into_iter()
            .chain(annotated)
            .chain(owned)
            .flat_map(|k| self.posting(k))
            // A collision with another namespace's key.
            .filter(|n| n.namespace == namespace)
            .cloned()
            .collect()
    }
}

/// A cache's index, and the one a relist is building.
#[derive(Debug, Default)]
pub struct Indexing {
    current: Index,
    building: Option<Index>,
}

impl Indexing {
    /// Before the reflector applies `event`: file the object under its new keys (in the current
    /// index, which may then have more than the store, and in a relist's).
    pub fn arriving(&mut self, event: &Event<DynamicObject>) {
        match event {
            Event::Init => self.building = Some(Index::default()),
            Event::InitApply(o) => {
                if let Some(named) = Named::of(o) {
                    let keys = keys(o);
                    self.current.add(&named, &keys);
                    self.building
                        .get_or_insert_with(Index::default)
                        .set(named, keys);
                }
            }
            Event::Apply(o) => {
                if let Some(named) = Named::of(o) {
                    self.current.add(&named, &keys(o));
                }
            }
            Event::Delete(_) | Event::InitDone => {}
        }
    }

    /// After the reflector applied `event`: drop the keys the object no longer has, a deleted
    /// object, and the index of before a relist once the store has the relist.
    pub fn seen(&mut self, event: &Event<DynamicObject>) {
        match event {
            Event::Apply(o) => {
                if let Some(named) = Named::of(o) {
                    self.current.set(named, keys(o));
                }
            }
            Event::Delete(o) => {
                if let Some(named) = Named::of(o) {
                    self.current.remove(&named);
                }
            }
            Event::InitDone => {
                if let Some(built) = self.building.take() {
                    self.current = built;
                }
            }
            Event::Init | Event::InitApply(_) => {}
        }
    }

    /// See [`Index::candidates`].
    pub fn candidates(&self, namespace: &str, lookup: &Lookup) -> HashSet<Arc<Named>> {
        self.current.candidates(namespace, lookup)
    }

    /// How many objects are filed (for tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.current.filed.len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use kube::ResourceExt;
    use kube::core::{Expression, Selector};
    use proptest::prelude::*;

    use super::*;
    use crate::cache::tests::resource;
    use crate::cache::{ObjectCache, without_managed_fields};
    use crate::loadbalancer::targets;
    use capi_lb_api::target::TargetKeys;

    /// An object from small universes of namespaces, names, labels, annotations and owners.
    #[derive(Clone, Debug)]
    struct Spec {
        ns: usize,
        name: usize,
        role: Option<usize>,
        zone: Option<usize>,
        annotations: Vec<usize>,
        owner: Option<usize>,
    }

    const NAMESPACES: [&str; 2] = ["a", "b"];
    const ROLES: [&str; 2] = ["cp", "worker"];
    const ZONES: [&str; 2] = ["x", "y"];
    /// The annotation keys of the LoadBalancer the lookups are for.
    fn keys_of_lb() -> TargetKeys {
        TargetKeys::new("a", "lb")
    }

    /// Two of the LoadBalancer's annotation keys, and another.
    fn annotation(i: usize) -> String {
        let keys = keys_of_lb();
        [keys.state, keys.pre_drain, "example.com/other".to_string()][i].clone()
    }
    const OWNERS: [&str; 2] = ["u1", "u2"];

    fn spec() -> impl Strategy<Value = Spec> {
        (
            0..2usize,
            0..5usize,
            proptest::option::of(0..2usize),
            proptest::option::of(0..2usize),
            proptest::collection::vec(0..3usize, 0..3),
            proptest::option::of(0..2usize),
        )
            .prop_map(|(ns, name, role, zone, annotations, owner)| Spec {
                ns,
                name,
                role,
                zone,
                annotations,
                owner,
            })
    }

    fn object(spec: &Spec, rv: u64) -> DynamicObject {
        let mut o =
            DynamicObject::new(&format!("m{}", spec.name), &resource()).within(NAMESPACES[spec.ns]);
        o.metadata.uid = Some(format!("{}-m{}", NAMESPACES[spec.ns], spec.name));
        o.metadata.resource_version = Some(rv.to_string());
        let mut labels = BTreeMap::new();
        if let Some(r) = spec.role {
            labels.insert("role".to_string(), ROLES[r].to_string());
        }
        if let Some(z) = spec.zone {
            labels.insert("zone".to_string(), ZONES[z].to_string());
        }
        o.metadata.labels = Some(labels);
        o.metadata.annotations = Some(
            spec.annotations
                .iter()
                .map(|a| (annotation(*a), String::new()))
                .collect(),
        );
        o.metadata.owner_references = spec.owner.map(|u| {
            vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    uid: OWNERS[u].to_string(),
                    ..Default::default()
                },
            ]
        });
        o
    }

    #[derive(Clone, Debug)]
    enum Op {
        Apply(Spec),
        Delete(usize, usize),
        Relist(Vec<Spec>),
        /// capi-lb writes this version of an object (one the store has, or a new one).
        Wrote(Spec),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => spec().prop_map(Op::Apply),
            1 => (0..2usize, 0..5usize).prop_map(|(ns, name)| Op::Delete(ns, name)),
            1 => proptest::collection::vec(spec(), 0..8).prop_map(Op::Relist),
            2 => spec().prop_map(Op::Wrote),
        ]
    }

    /// The lookups LoadBalancers make, each with the filter it covers.
    /// A filter of listed objects.
    type Filter = Box<dyn Fn(&DynamicObject) -> bool>;

    /// The lookups LoadBalancers make ([`targets::lookup`] for selectors of each kind, the
    /// annotations of a LoadBalancer, an owner), each with the filter it must cover.
    fn lookups() -> Vec<(Lookup, Filter)> {
        let selectors: Vec<Selector> = vec![
            Selector::from_iter([("role", "cp")]),
            Selector::from_iter([("role", "cp"), ("zone", "x")]),
            Expression::In("zone".into(), ["x".into(), "y".into()].into()).into(),
            Expression::NotEqual("zone".into(), "x".into()).into(),
            Selector::default(),
        ];
        let mut out: Vec<(Lookup, Filter)> = Vec::new();
        for selector in selectors {
            out.push((
                targets::lookup(&selector, &keys_of_lb()),
                Box::new(move |o: &DynamicObject| targets::concerns(o, &selector, &keys_of_lb())),
            ));
        }
        out.push((
            Lookup::owned_by("u1"),
            Box::new(|o: &DynamicObject| o.owner_references().iter().any(|r| r.uid == "u1")),
        ));
        out
    }

    /// Two caches fed the same events, one indexed.
    struct Pair {
        indexed: ObjectCache,
        plain: ObjectCache,
    }

    impl Pair {
        fn new() -> Self {
            Self {
                indexed: ObjectCache::new(resource(), without_managed_fields).indexed(),
                plain: ObjectCache::new(resource(), without_managed_fields),
            }
        }

        /// Deliver `event` to both; the listings agree once the stores have it (before the
        /// index drops the keys it no longer needs), and after.
        fn deliver(&mut self, event: &Event<DynamicObject>) {
            self.indexed.arriving(event);
            self.indexed.write(event);
            self.plain.write(event);
            self.agree();
            self.plain.seen(event);
            self.indexed.seen(event);
            self.agree();
        }

        fn agree(&self) {
            for (lookup, keep) in lookups() {
                for ns in NAMESPACES {
                    // `None` for both before the first list.
                    let names = |cache: &ObjectCache, lookup: &Lookup| {
                        cache.list(ns, lookup, &keep).map(|listed| {
                            let mut v: Vec<(String, Option<String>)> = listed
                                .iter()
                                .map(|o| (o.name_any(), o.resource_version()))
                                .collect();
                            v.sort();
                            v
                        })
                    };
                    assert_eq!(
                        names(&self.indexed, &lookup),
                        names(&self.plain, &Lookup::everything()),
                        "{lookup:?} in {ns}"
                    );
                }
            }
        }
    }

    proptest! {
        /// Whatever the events and capi-lb's writes, an indexed cache lists what a scan of every
        /// object lists, at every step (also between the store's update and the index's).
        #[test]
        fn an_indexed_listing_is_a_full_scan(ops in proptest::collection::vec(op(), 1..30)) {
            let mut pair = Pair::new();
            let mut rv = 1;
            pair.deliver(&Event::Init);
            pair.deliver(&Event::InitDone);
            for op in ops {
                rv += 1;
                match op {
                    Op::Apply(spec) => pair.deliver(&Event::Apply(object(&spec, rv))),
                    Op::Delete(ns, name) => {
                        let spec = Spec { ns, name, role: None, zone: None, annotations: vec![], owner: None };
                        pair.deliver(&Event::Delete(object(&spec, rv)));
                    }
                    Op::Relist(specs) => {
                        pair.deliver(&Event::Init);
                        for spec in specs {
                            pair.deliver(&Event::InitApply(object(&spec, rv)));
                        }
                        pair.deliver(&Event::InitDone);
                    }
                    Op::Wrote(spec) => {
                        let written = object(&spec, rv);
                        pair.indexed.wrote(&written);
                        pair.plain.wrote(&written);
                        pair.agree();
                    }
                }
            }
        }
    }

    #[test]
    fn looks_only_at_what_a_lookup_can_match_and_forgets_what_an_object_no_longer_has() {
        let mut pair = Pair::new();
        pair.deliver(&Event::Init);
        for name in 0..4 {
            let spec = Spec {
                ns: 0,
                name,
                role: Some(name % 2),
                zone: None,
                annotations: vec![],
                owner: None,
            };
            pair.deliver(&Event::InitApply(object(&spec, 1)));
        }
        pair.deliver(&Event::InitDone);
        let cp = Lookup {
            selected: Selected::Labels(vec![("role".into(), vec!["cp".into()])]),
            annotations: vec![],
            owners: vec![],
        };
        let names = |pair: &Pair, lookup: &Lookup| {
            let mut v: Vec<String> = (pair.indexed.index.as_ref().unwrap())
                .lock()
                .unwrap()
                .candidates("a", lookup)
                .iter()
                .map(|n| n.name.clone())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(&pair, &cp), ["m0", "m2"]);
        assert!(names(&pair, &Lookup::owned_by("u1")).is_empty());
        assert_eq!(names(&pair, &Lookup::everything()).len(), 4);
        // m0 becomes a worker: filed under its new label only, once the store has it.
        let worker = Spec {
            ns: 0,
            name: 0,
            role: Some(1),
            zone: None,
            annotations: vec![],
            owner: None,
        };
        pair.deliver(&Event::Apply(object(&worker, 2)));
        assert_eq!(names(&pair, &cp), ["m2"]);
        pair.deliver(&Event::Delete(object(&worker, 3)));
        assert_eq!(names(&pair, &Lookup::everything()), ["m1", "m2", "m3"]);
        let index = pair.indexed.index.as_ref().unwrap();
        assert_eq!(index.lock().unwrap().len(), 3);
    }
}
