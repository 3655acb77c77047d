//! Field paths and field sets (pure), the vocabulary of server-side apply: which fields an object
//! sets, in the `FieldsV1` form `metadata.managedFields` shows; which of them differ between two
//! objects; an applied configuration merged into an object; fields removed from one.
//!
//! Lists follow Kubernetes' list types where capi-lb meets them: `metadata.finalizers` is a set,
//! `metadata.ownerReferences` a map keyed by `uid`, `status.conditions` (and Cluster API's
//! `status.v1beta2.conditions`) a map keyed by `type`, a Service's `spec.ports` a map keyed by
//! `port` and `protocol`; every other list is atomic (one value, replaced whole), as in a CRD without
//! `x-kubernetes-list-type` and in an EndpointSlice's `endpoints` and `ports`. A JSON object is
//! always granular (structured-merge-diff knows atomic maps and structs from the schema; this has
//! no schema).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde_json::{Map, Value};

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Elem {
    /// A field of an object.
    Field(String),
    /// An item of a map list, by its keys (canonical JSON of an object).
    Key(String),
    /// An item of a set list, by its value (canonical JSON).
    Value(String),
}

/// A path from the object's root.
pub(super) type Path = Vec<Elem>;

/// A set of paths: leaves (scalars, empty objects, atomic lists) and the items of map and set lists.
pub(super) type FieldSet = BTreeSet<Path>;

/// How a list merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ListType {
    /// Replaced whole.
    Atomic,
    /// Items are unique scalars.
    Set,
    /// Items are objects identified by these fields.
    Map(&'static [&'static str]),
}

/// The type of the list at `fields` (the field names from the root, list items skipped) of an
/// object of `resource`.
pub(super) fn list_type(resource: &str, fields: &[String]) -> ListType {
    let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
    match fields.as_slice() {
        ["metadata", "finalizers"] => ListType::Set,
        ["metadata", "ownerReferences"] => ListType::Map(&["uid"]),
        ["status", "conditions"] | ["status", "v1beta2", "conditions"] => ListType::Map(&["type"]),
        ["spec", "ports"] if resource == "services" => ListType::Map(&["port", "protocol"]),
        _ => ListType::Atomic,
    }
}

/// The canonical JSON of `value` (object keys sorted).
fn canonical(value: &Value) -> String {
    value.to_string()
}

/// The keys of each item of a map list (`None`: an item is no object, or two share their keys;
/// the list is then treated as atomic).
fn item_keys(items: &[Value], keys: &[&str]) -> Option<Vec<String>> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let object = item.as_object()?;
        let key: Map<String, Value> = keys
            .iter()
            .filter_map(|k| object.get(*k).map(|v| ((*k).to_string(), v.clone())))
            .collect();
        let key = canonical(&Value::Object(key));
        if !seen.insert(key.clone()) {
            return None;
        }
        out.push(key);
    }
    Some(out)
}

/// The identities of a list's items, as path elements (`None`: atomic).
fn identities(resource: &str, fields: &[String], items: &[Value]) -> Option<Vec<Elem>> {
    match list_type(resource, fields) {
        ListType::Atomic => None,
        ListType::Set => {
            let values: Vec<String> = items.iter().map(canonical).collect();
            let unique: HashSet<&String> = values.iter().collect();
            (unique.len() == values.len()).then(|| values.into_iter().map(Elem::Value).collect())
        }
        ListType::Map(keys) => {
            item_keys(items, keys).map(|k| k.into_iter().map(Elem::Key).collect())
        }
    }
}

/// What a path leads to in a flattened object.
#[derive(Clone, Copy, Debug, PartialEq)]
enum At<'a> {
    /// A leaf and its value.
    Leaf(&'a Value),
    /// An item of a map or set list.
    Item,
    /// A non-empty object inside the object.
    Node,
}

/// `value` flattened to its leaves, list items and inner objects.
fn flatten<'a>(value: &'a Value, resource: &str) -> BTreeMap<Path, At<'a>> {
    fn object<'a>(
        map: &'a Map<String, Value>,
        path: &mut Path,
        fields: &mut Vec<String>,
        resource: &str,
        out: &mut BTreeMap<Path, At<'a>>,
    ) {
        for (name, child) in map {
            path.push(Elem::Field(name.clone()));
            fields.push(name.clone());
            match child {
                Value::Object(m) if !m.is_empty() => {
                    out.insert(path.clone(), At::Node);
                    object(m, path, fields, resource, out);
                }
                Value::Array(items) => match identities(resource, fields, items) {
                    None => {
                        out.insert(path.clone(), At::Leaf(child));
                    }
                    Some(ids) => {
                        if !items.is_empty() {
                            out.insert(path.clone(), At::Node);
                        }
                        for (id, item) in ids.into_iter().zip(items) {
                            path.push(id);
                            out.insert(path.clone(), At::Item);
                            if let Value::Object(m) = item {
                                object(m, path, fields, resource, out);
                            }
                            path.pop();
                        }
                    }
                },
                _ => {
                    out.insert(path.clone(), At::Leaf(child));
                }
            }
            fields.pop();
            path.pop();
        }
    }
    let mut out = BTreeMap::new();
    if let Value::Object(map) = value {
        object(map, &mut Vec::new(), &mut Vec::new(), resource, &mut out);
    }
    out
}

/// The fields an applied configuration `value` sets: its leaves and list items (as
/// structured-merge-diff counts an apply's fields: not the objects and lists that hold them).
pub(super) fn field_set(value: &Value, resource: &str) -> FieldSet {
    flatten(value, resource)
        .into_iter()
        .filter(|(_, at)| *at != At::Node)
        .map(|(path, _)| path)
        .collect()
}

/// Every path of `value`, the objects and lists holding others included.
pub(super) fn all_paths(value: &Value, resource: &str) -> FieldSet {
    flatten(value, resource).into_keys().collect()
}

/// The paths that differ between `old` and `new`: added, removed or changed leaves and items, and
/// the objects and lists added or removed whole (a write owns the map it creates, as with
/// structured-merge-diff's comparison).
pub(super) fn changed(old: &Value, new: &Value, resource: &str) -> FieldSet {
    let old = flatten(old, resource);
    let new = flatten(new, resource);
    let mut out: FieldSet = old
        .iter()
        .filter(|(path, at)| new.get(*path) != Some(*at))
        .map(|(path, _)| path.clone())
        .collect();
    out.extend(new.keys().filter(|p| !old.contains_key(*p)).cloned());
    out
}

/// A set as a tree: whether each node is in the set, and its children.
#[derive(Debug, Default)]
struct Node {
    member: bool,
    children: BTreeMap<Elem, Node>,
}

fn tree(set: &FieldSet) -> Node {
    let mut root = Node::default();
    for path in set {
        let mut node = &mut root;
        for elem in path {
            node = node.children.entry(elem.clone()).or_default();
        }
        node.member = true;
    }
    root
}

impl Elem {
    fn encode(&self) -> String {
        match self {
            Elem::Field(name) => format!("f:{name}"),
            Elem::Key(key) => format!("k:{key}"),
            Elem::Value(value) => format!("v:{value}"),
        }
    }

    fn decode(text: &str) -> Option<Self> {
        let (kind, rest) = text.split_once(':')?;
        match kind {
            "f" => Some(Elem::Field(rest.to_string())),
            "k" => serde_json::from_str::<Value>(rest)
                .ok()
                .map(|v| Elem::Key(canonical(&v))),
            "v" => serde_json::from_str::<Value>(rest)
                .ok()
                .map(|v| Elem::Value(canonical(&v))),
            _ => None,
        }
    }
}

/// `set` in the `fieldsV1` form of `metadata.managedFields`.
pub(super) fn to_fields_v1(set: &FieldSet) -> Value {
    fn encode(node: &Node) -> Value {
        let mut map = Map::new();
        if node.member && !node.children.is_empty() {
            map.insert(".".into(), Value::Object(Map::new()));
        }
        for (elem, child) in &node.children {
            map.insert(elem.encode(), encode(child));
        }
        Value::Object(map)
    }
    encode(&tree(set))
}

/// The set a `fieldsV1` value describes (entries it cannot read are skipped).
pub(super) fn from_fields_v1(value: &Value) -> FieldSet {
    fn decode(value: &Value, path: &mut Path, out: &mut FieldSet) {
        let Some(map) = value.as_object() else {
            return;
        };
        if map.is_empty() && !path.is_empty() {
            out.insert(path.clone());
        }
        for (key, child) in map {
            if key == "." {
                if !path.is_empty() {
                    out.insert(path.clone());
                }
                continue;
            }
            if let Some(elem) = Elem::decode(key) {
                path.push(elem);
                decode(child, path, out);
                path.pop();
            }
        }
    }
    let mut out = FieldSet::new();
    decode(value, &mut Vec::new(), &mut out);
    out
}

/// `path` as the apiserver writes it in a conflict: `.spec.ports[port=80,protocol="TCP"].name`.
pub(super) fn display(path: &Path) -> String {
    let scalar = |v: &Value| match v {
        Value::String(s) => Value::String(s.clone()).to_string(),
        other => other.to_string(),
    };
    path.iter()
        .map(|elem| match elem {
            Elem::Field(name) => format!(".{name}"),
            Elem::Value(value) => {
                let v = serde_json::from_str::<Value>(value).unwrap_or(Value::Null);
                format!("[={}]", scalar(&v))
            }
            Elem::Key(key) => {
                let k = serde_json::from_str::<Map<String, Value>>(key).unwrap_or_default();
                let parts: Vec<String> = k
                    .iter()
                    .map(|(n, v)| format!("{n}={}", scalar(v)))
                    .collect();
                format!("[{}]", parts.join(","))
            }
        })
        .collect()
}

/// `applied` merged into `live`: objects field by field, map and set lists item by item (items of
/// both in the applied order, the live object's others where they stood), anything else replaced.
/// A `null` in `applied` removes the field.
pub(super) fn merge(live: &Value, applied: &Value, resource: &str) -> Value {
    fn value(
        live: Option<&Value>,
        applied: &Value,
        fields: &mut Vec<String>,
        resource: &str,
    ) -> Value {
        match (live, applied) {
            (Some(Value::Object(l)), Value::Object(a)) => {
                let mut out = l.clone();
                for (name, child) in a {
                    if child.is_null() {
                        out.remove(name);
                        continue;
                    }
                    fields.push(name.clone());
                    let merged = value(l.get(name), child, fields, resource);
                    fields.pop();
                    out.insert(name.clone(), merged);
                }
                Value::Object(out)
            }
            (Some(Value::Array(l)), Value::Array(a)) => {
                let ids = (
                    identities(resource, fields, l),
                    identities(resource, fields, a),
                );
                let (Some(live_ids), Some(applied_ids)) = ids else {
                    return applied.clone();
                };
                let items = interleave(l, &live_ids, a, &applied_ids, |live, applied| {
                    value(live, applied, fields, resource)
                });
                Value::Array(items)
            }
            (_, Value::Object(a)) => {
                let empty = Value::Object(Map::new());
                value(Some(&empty), &Value::Object(a.clone()), fields, resource)
            }
            _ => applied.clone(),
        }
    }
    value(Some(live), applied, &mut Vec::new(), resource)
}

/// The items of two keyed lists merged: items of both merged in the applied order, the live list's
/// other items kept where they stood, the applied list's new items where they stand in it.
fn interleave(
    live: &[Value],
    live_ids: &[Elem],
    applied: &[Value],
    applied_ids: &[Elem],
    mut merge_item: impl FnMut(Option<&Value>, &Value) -> Value,
) -> Vec<Value> {
    let in_applied: HashSet<&Elem> = applied_ids.iter().collect();
    let live_at: HashMap<&Elem, usize> = live_ids.iter().enumerate().map(|(i, e)| (e, i)).collect();
    let mut done: HashSet<&Elem> = HashSet::new();
    let mut out = Vec::with_capacity(live.len().max(applied.len()));
    let (mut l, mut r) = (0, 0);
    while l < live.len() || r < applied.len() {
        if let (Some(lid), Some(rid)) = (live_ids.get(l), applied_ids.get(r))
            && lid == rid
        {
            out.push(merge_item(live.get(l), &applied[r]));
            done.insert(rid);
            l += 1;
            r += 1;
            continue;
        }
        if let Some(lid) = live_ids.get(l) {
            if !in_applied.contains(lid) {
                out.push(live[l].clone());
                l += 1;
                continue;
            }
            if done.contains(lid) || r >= applied.len() {
                l += 1;
                continue;
            }
        }
        if let Some(rid) = applied_ids.get(r) {
            let matching = live_at.get(rid).and_then(|i| live.get(*i));
            out.push(merge_item(matching, &applied[r]));
            done.insert(rid);
            r += 1;
        }
    }
    out
}

/// `object` without the fields of `set` (a list item in the set goes whole; an object or list left
/// empty by a removal goes too).
pub(super) fn remove(object: &mut Value, set: &FieldSet, resource: &str) {
    fn prune(value: &mut Value, node: &Node, fields: &mut Vec<String>, resource: &str) {
        match value {
            Value::Object(map) => {
                for (elem, child) in &node.children {
                    let Elem::Field(name) = elem else { continue };
                    if child.member {
                        map.remove(name);
                        continue;
                    }
                    let Some(inner) = map.get_mut(name) else {
                        continue;
                    };
                    fields.push(name.clone());
                    prune(inner, child, fields, resource);
                    fields.pop();
                    if is_empty(inner) {
                        map.remove(name);
                    }
                }
            }
            Value::Array(items) => {
                let Some(ids) = identities(resource, fields, items) else {
                    return;
                };
                let mut kept = Vec::with_capacity(items.len());
                for (id, mut item) in ids.into_iter().zip(items.drain(..)) {
                    match node.children.get(&id) {
                        Some(child) if child.member => continue,
                        Some(child) => {
                            prune(&mut item, child, fields, resource);
                            kept.push(item);
                        }
                        None => kept.push(item),
                    }
                }
                *items = kept;
            }
            _ => {}
        }
    }
    fn is_empty(value: &Value) -> bool {
        match value {
            Value::Object(m) => m.is_empty(),
            Value::Array(a) => a.is_empty(),
            _ => false,
        }
    }
    prune(object, &tree(set), &mut Vec::new(), resource);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(name: &str) -> Elem {
        Elem::Field(name.into())
    }

    #[test]
    fn fields_of_an_object_with_keyed_set_and_atomic_lists() {
        let object = json!({
            "metadata": {"labels": {"a": "1"}, "finalizers": ["x"], "annotations": {}},
            "spec": {"ports": [{"port": 80, "protocol": "TCP", "name": "http"}], "ips": ["1.2.3.4"]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        });
        let set = field_set(&object, "services");
        let fields_v1 = to_fields_v1(&set);
        assert_eq!(
            fields_v1,
            json!({
                "f:metadata": {"f:annotations": {}, "f:finalizers": {"v:\"x\"": {}}, "f:labels": {"f:a": {}}},
                "f:spec": {
                    "f:ips": {},
                    "f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {
                        ".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}}},
                },
                "f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {
                    ".": {}, "f:status": {}, "f:type": {}}}},
            })
        );
        assert_eq!(from_fields_v1(&fields_v1), set);
        // Not a Service: its ports are one atomic value.
        assert!(field_set(&object, "endpointslices").contains(&vec![f("spec"), f("ports")]));
    }

    #[test]
    fn changed_fields_are_the_differing_leaves_and_items() {
        let old = json!({"data": {"a": "1", "b": "2"}, "metadata": {"finalizers": ["x"]}});
        let new =
            json!({"data": {"a": "1", "b": "3", "c": "4"}, "metadata": {"finalizers": ["y"]}});
        let changed = changed(&old, &new, "configmaps");
        let shown: Vec<String> = changed.iter().map(display).collect();
        assert_eq!(
            shown,
            [
                ".data.b",
                ".data.c",
                ".metadata.finalizers[=\"x\"]",
                ".metadata.finalizers[=\"y\"]"
            ]
        );
        // A map created whole is a change too.
        let created: Vec<String> =
            super::changed(&json!({}), &json!({"data": {"a": "1"}}), "configmaps")
                .iter()
                .map(display)
                .collect();
        assert_eq!(created, [".data", ".data.a"]);
    }

    #[test]
    fn keyed_lists_merge_by_key_and_keep_unapplied_items() {
        let live = json!({"status": {"conditions": [
            {"type": "A", "status": "True"}, {"type": "B", "status": "True", "reason": "x"}]}});
        let applied = json!({"status": {"conditions": [
            {"type": "C", "status": "False"}, {"type": "B", "status": "False"}]}});
        assert_eq!(
            merge(&live, &applied, "loadbalancers"),
            json!({"status": {"conditions": [
                {"type": "A", "status": "True"},
                {"type": "C", "status": "False"},
                {"type": "B", "status": "False", "reason": "x"}]}})
        );
        // Finalizers are a set; other lists are replaced.
        let live = json!({"metadata": {"finalizers": ["a"]}, "spec": {"l": [1, 2]}});
        let applied = json!({"metadata": {"finalizers": ["b", "a"]}, "spec": {"l": [3]}});
        assert_eq!(
            merge(&live, &applied, "x"),
            json!({"metadata": {"finalizers": ["b", "a"]}, "spec": {"l": [3]}})
        );
        // A null removes.
        assert_eq!(
            merge(&json!({"a": 1, "b": 2}), &json!({"a": null}), "x"),
            json!({"b": 2})
        );
    }

    #[test]
    fn removal_takes_leaves_and_items_and_drops_what_it_empties() {
        let mut object = json!({
            "metadata": {"labels": {"a": "1"}, "finalizers": ["x", "y"]},
            "status": {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"}]},
            "data": {"keep": "1"},
        });
        let set: FieldSet = [
            vec![f("metadata"), f("labels"), f("a")],
            vec![f("metadata"), f("finalizers"), Elem::Value("\"x\"".into())],
            vec![
                f("status"),
                f("conditions"),
                Elem::Key("{\"type\":\"A\"}".into()),
            ],
        ]
        .into_iter()
        .collect();
        remove(&mut object, &set, "loadbalancers");
        assert_eq!(
            object,
            json!({
                "metadata": {"finalizers": ["y"]},
                "status": {"conditions": [{"type": "B", "status": "True"}]},
                "data": {"keep": "1"},
            })
        );
    }

    #[test]
    fn paths_display_as_the_apiserver_writes_them() {
        let path = vec![
            f("spec"),
            f("ports"),
            Elem::Key("{\"port\":80,\"protocol\":\"TCP\"}".into()),
            f("name"),
        ];
        assert_eq!(display(&path), ".spec.ports[port=80,protocol=\"TCP\"].name");
    }

    #[test]
    fn duplicate_keys_make_a_list_atomic() {
        let object = json!({"status": {"conditions": [{"type": "A"}, {"type": "A"}]}});
        assert_eq!(
            field_set(&object, "x"),
            [vec![f("status"), f("conditions")]].into_iter().collect()
        );
    }
}
