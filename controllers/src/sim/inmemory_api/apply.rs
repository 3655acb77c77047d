//! Server-side apply and `metadata.managedFields` (pure): each field manager's entry (operation
//! `Apply` or `Update`, per subresource) with the set of fields it owns; an apply merged into the
//! object, refused with the conflicting managers named unless forced (then ownership moves), and
//! the fields its manager applied before and no longer applies removed when no one else owns them;
//! any other write giving its manager the fields it changed and taking them from the others.
//!
//! Simplified against structured-merge-diff: no schema, so the list types of [`super::fields`]
//! stand in for the OpenAPI ones, objects are always granular and values are not defaulted or
//! converted between versions; entries are keyed by manager, operation and subresource (not by API
//! version), and the apiserver's cap on the number of `Update` entries is not applied.

use serde_json::{Map, Value, json};

use super::fields::{
    Elem, FieldSet, Path, all_paths, changed, display, field_set, from_fields_v1, merge, remove,
    to_fields_v1,
};

/// Server-set metadata that no manager owns.
const SERVER_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// Who writes, where and when.
#[derive(Clone, Copy, Debug)]
pub(super) struct Writer<'a> {
    /// The field manager.
    pub manager: &'a str,
    /// The API version of the request.
    pub api_version: &'a str,
    /// The resource (for its list types).
    pub resource: &'a str,
    /// Whether the write is to the `status` subresource.
    pub status: bool,
    /// Whether the resource has a `status` subresource (then writes to the object own no status).
    pub status_separate: bool,
    /// The time of the write (`metadata.managedFields[].time`).
    pub time: &'a str,
}

impl Writer<'_> {
    fn subresource(&self) -> Option<&str> {
        self.status.then_some("status")
    }

    /// The part of `set` this write can own: the status alone through the subresource, no status
    /// when the resource has the subresource, never the server's metadata.
    fn scoped(&self, mut set: FieldSet) -> FieldSet {
        let status = Elem::Field("status".into());
        let metadata = Elem::Field("metadata".into());
        set.retain(|path| {
            let first = path.first();
            if first == Some(&Elem::Field("apiVersion".into()))
                || first == Some(&Elem::Field("kind".into()))
            {
                return false;
            }
            if first == Some(&metadata) {
                match path.get(1) {
                    None => return false,
                    Some(Elem::Field(name)) if SERVER_METADATA.contains(&name.as_str()) => {
                        return false;
                    }
                    _ => {}
                }
            }
            if self.status {
                first == Some(&status)
            } else {
                !(self.status_separate && first == Some(&status))
            }
        });
        set
    }
}

/// One entry of `metadata.managedFields`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    subresource: Option<String>,
    time: Option<String>,
    fields: FieldSet,
}

impl Entry {
    fn is(&self, manager: &str, operation: &str, subresource: Option<&str>) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
    }

    fn to_json(&self) -> Value {
        let mut entry = json!({
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(&self.fields),
        });
        if let Some(time) = &self.time {
            entry["time"] = Value::String(time.clone());
        }
        if let Some(sub) = &self.subresource {
            entry["subresource"] = Value::String(sub.clone());
        }
        entry
    }
}

/// The entries of `object`'s `metadata.managedFields`.
fn entries(object: &Value) -> Vec<Entry> {
    let text = |e: &Value, k: &str| e.get(k).and_then(Value::as_str).map(str::to_string);
    object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| Entry {
            manager: text(e, "manager").unwrap_or_default(),
            operation: text(e, "operation").unwrap_or_default(),
            api_version: text(e, "apiVersion").unwrap_or_default(),
            subresource: text(e, "subresource"),
            time: text(e, "time"),
            fields: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
        })
        .collect()
}

/// Write `entries` (the empty ones dropped, in the apiserver's order: operation, time, manager)
/// into `object`'s metadata.
fn set_entries(object: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|a, b| {
        (
            &a.operation,
            &a.time,
            &a.manager,
            &a.api_version,
            &a.subresource,
        )
            .cmp(&(
                &b.operation,
                &b.time,
                &b.manager,
                &b.api_version,
                &b.subresource,
            ))
    });
    let Some(meta) = metadata(object) else {
        return;
    };
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert(
            "managedFields".into(),
            Value::Array(entries.iter().map(Entry::to_json).collect()),
        );
    }
}

fn metadata(object: &mut Value) -> Option<&mut Map<String, Value>> {
    let root = object.as_object_mut()?;
    root.entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
}

/// The entry of `writer` with `operation` and `fields`: the existing one keeps its time when its
/// fields do not change (so a repeated write changes nothing).
fn own(entries: &mut Vec<Entry>, writer: &Writer<'_>, operation: &str, fields: FieldSet) {
    let subresource = writer.subresource();
    let previous = entries
        .iter()
        .position(|e| e.is(writer.manager, operation, subresource))
        .map(|i| entries.remove(i));
    let time = match previous {
        Some(p) if p.fields == fields && p.api_version == writer.api_version => p.time,
        _ => Some(writer.time.to_string()),
    };
    entries.push(Entry {
        manager: writer.manager.to_string(),
        operation: operation.to_string(),
        api_version: writer.api_version.to_string(),
        subresource: subresource.map(str::to_string),
        time,
        fields,
    });
}

/// A field another manager owns that an apply would change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Conflict {
    /// The manager that owns it.
    pub manager: String,
    /// The API version it wrote with.
    pub api_version: String,
    /// The subresource it wrote through.
    pub subresource: Option<String>,
    /// Whether it owns the field by an apply (else by another write).
    pub applied: bool,
    /// The field.
    pub path: Path,
}

impl Conflict {
    /// How the apiserver names the owner: `conflict with "m"` for an applier, `conflict with "m"
    /// using v1` for another writer, either `with subresource "status"` when it wrote the status.
    pub fn owner(&self) -> String {
        let mut owner = format!("conflict with {:?}", self.manager);
        if let Some(s) = &self.subresource {
            owner.push_str(&format!(" with subresource {s:?}"));
        }
        if !self.applied {
            owner.push_str(&format!(" using {}", self.api_version));
        }
        owner
    }

    /// The field, as `.spec.x`.
    pub fn field(&self) -> String {
        display(&self.path)
    }
}

/// The apiserver's message for `conflicts`.
pub(super) fn conflict_message(conflicts: &[Conflict]) -> String {
    let count = conflicts.len();
    let plural = if count == 1 { "" } else { "s" };
    let detail = match conflicts {
        [one] => format!("{}: {}", one.owner(), one.field()),
        _ => {
            let mut owners: Vec<String> = conflicts.iter().map(Conflict::owner).collect();
            owners.sort();
            owners.dedup();
            let mut lines = Vec::new();
            for owner in owners {
                lines.push(format!(
                    "{}:",
                    owner.replacen("conflict with", "conflicts with", 1)
                ));
                for c in conflicts.iter().filter(|c| c.owner() == owner) {
                    lines.push(format!("- {}", c.field()));
                }
            }
            lines.join("\n")
        }
    };
    format!("Apply failed with {count} conflict{plural}: {detail}")
}

/// `applied` (the configuration of `writer`'s manager) applied to `live` (`{}` when the apply
/// creates the object): the merged object with its managed fields, or the conflicts when another
/// manager owns a field the apply would change and `force` is not set.
pub(super) fn apply(
    live: &Value,
    applied: &Value,
    writer: &Writer<'_>,
    force: bool,
) -> Result<Value, Vec<Conflict>> {
    let resource = writer.resource;
    let mut applied = applied.clone();
    if let Some(meta) = applied.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    let wanted = writer.scoped(field_set(&applied, resource));
    let mut all = entries(live);
    let subresource = writer.subresource();
    let previous = all
        .iter()
        .position(|e| e.is(writer.manager, "Apply", subresource))
        .map(|i| all[i].fields.clone())
        .unwrap_or_default();
    let others: FieldSet = all
        .iter()
        .filter(|e| !e.is(writer.manager, "Apply", subresource))
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    // What this manager applied before, applies no more and no one else owns goes.
    let dropped: FieldSet = previous
        .difference(&wanted)
        .filter(|p| !others.contains(*p))
        .cloned()
        .collect();
    let mut base = live.clone();
    remove(&mut base, &dropped, resource);
    let merged = merge(&base, &applied, resource);
    let changes = changed(live, &merged, resource);
    let mut conflicts = Vec::new();
    for entry in all
        .iter()
        .filter(|e| !e.is(writer.manager, "Apply", subresource))
    {
        for path in entry
            .fields
            .intersection(&wanted)
            .filter(|p| changes.contains(*p))
        {
            conflicts.push(Conflict {
                manager: entry.manager.clone(),
                api_version: entry.api_version.clone(),
                subresource: entry.subresource.clone(),
                applied: entry.operation == "Apply",
                path: path.clone(),
            });
        }
    }
    if !conflicts.is_empty() {
        if !force {
            return Err(conflicts);
        }
        for entry in &mut all {
            entry.fields.retain(|p| {
                !conflicts
                    .iter()
                    .any(|c| c.manager == entry.manager && &c.path == p)
            });
        }
    }
    let mut merged = merged;
    own(&mut all, writer, "Apply", wanted);
    set_entries(&mut merged, all);
    Ok(merged)
}

/// The managed fields of `new` after a write that is not an apply (a create when `old` is `None`):
/// `writer`'s manager owns what the write added or changed, the others lose it, and every manager
/// loses what it removed. Managed fields the write itself set to something else are kept as written
/// (a client resetting them).
pub(super) fn record_update(old: Option<&Value>, new: &mut Value, writer: &Writer<'_>) {
    let resource = writer.resource;
    let before = old
        .and_then(|o| o.pointer("/metadata/managedFields"))
        .cloned();
    let written = new.pointer("/metadata/managedFields").cloned();
    if old.is_some() && written != before {
        return;
    }
    let empty = Value::Object(Map::new());
    let old = old.unwrap_or(&empty);
    let present = all_paths(new, resource);
    let changes = writer.scoped(changed(old, new, resource));
    let mut all = if before.is_some() {
        entries(old)
    } else {
        Vec::new()
    };
    for entry in &mut all {
        entry.fields.retain(|p| !changes.contains(p));
    }
    let subresource = writer.subresource();
    let mut mine = all
        .iter()
        .find(|e| e.is(writer.manager, "Update", subresource))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    mine.extend(changes.iter().filter(|p| present.contains(*p)).cloned());
    mine.retain(|p| present.contains(p));
    own(&mut all, writer, "Update", mine);
    set_entries(new, all);
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: &str = "2026-01-01T00:00:00Z";
    const T1: &str = "2026-01-01T00:01:00Z";

    fn writer<'a>(manager: &'a str, time: &'a str) -> Writer<'a> {
        Writer {
            manager,
            api_version: "v1",
            resource: "configmaps",
            status: false,
            status_separate: false,
            time,
        }
    }

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data})
    }

    fn managers(object: &Value) -> Vec<(String, String)> {
        entries(object)
            .into_iter()
            .map(|e| (e.manager, e.operation))
            .collect()
    }

    #[test]
    fn an_apply_creates_and_a_repeat_changes_nothing() {
        let created = apply(&json!({}), &cm(json!({"a": "1"})), &writer("m", T0), false).unwrap();
        assert_eq!(created["data"], json!({"a": "1"}));
        assert_eq!(
            created["metadata"]["managedFields"],
            json!([{"manager": "m", "operation": "Apply", "apiVersion": "v1", "time": T0,
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}}])
        );
        let again = apply(&created, &cm(json!({"a": "1"})), &writer("m", T1), false).unwrap();
        assert_eq!(again, created);
    }

    #[test]
    fn another_manager_conflicts_unless_the_value_is_the_same_or_forced() {
        let live = apply(
            &json!({}),
            &cm(json!({"a": "1", "b": "2"})),
            &writer("one", T0),
            false,
        )
        .unwrap();
        let conflicts = apply(
            &live,
            &cm(json!({"a": "9", "b": "2"})),
            &writer("two", T1),
            false,
        )
        .unwrap_err();
        assert_eq!(
            conflict_message(&conflicts),
            "Apply failed with 1 conflict: conflict with \"one\": .data.a"
        );
        // The same value is shared.
        let shared = apply(&live, &cm(json!({"b": "2"})), &writer("two", T1), false).unwrap();
        assert_eq!(
            managers(&shared),
            [
                ("one".into(), "Apply".into()),
                ("two".into(), "Apply".into())
            ]
        );
        // Forced: the field moves.
        let forced = apply(&live, &cm(json!({"a": "9"})), &writer("two", T1), true).unwrap();
        assert_eq!(forced["data"], json!({"a": "9", "b": "2"}));
        let one = entries(&forced)
            .into_iter()
            .find(|e| e.manager == "one")
            .unwrap();
        assert_eq!(to_fields_v1(&one.fields), json!({"f:data": {"f:b": {}}}));
    }

    #[test]
    fn fields_no_longer_applied_go_unless_someone_else_owns_them() {
        let live = apply(
            &json!({}),
            &cm(json!({"a": "1", "b": "2"})),
            &writer("one", T0),
            false,
        )
        .unwrap();
        let live = apply(&live, &cm(json!({"b": "2"})), &writer("two", T0), false).unwrap();
        let nothing = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let after = apply(&live, &nothing, &writer("one", T1), false).unwrap();
        assert_eq!(after["data"], json!({"b": "2"}));
        assert_eq!(managers(&after), [("two".into(), "Apply".into())]);
    }

    #[test]
    fn updates_take_what_they_change() {
        let live = apply(
            &json!({}),
            &cm(json!({"a": "1"})),
            &writer("applier", T0),
            false,
        )
        .unwrap();
        let mut new = live.clone();
        new["data"]["a"] = json!("2");
        new["data"]["c"] = json!("3");
        record_update(Some(&live), &mut new, &writer("editor", T1));
        assert_eq!(managers(&new), [("editor".into(), "Update".into())]);
        let editor = &entries(&new)[0];
        assert_eq!(
            to_fields_v1(&editor.fields),
            json!({"f:data": {"f:a": {}, "f:c": {}}})
        );
        // The applier now conflicts on a, which the editor owns.
        let conflicts =
            apply(&new, &cm(json!({"a": "1"})), &writer("applier", T1), false).unwrap_err();
        assert_eq!(conflicts[0].owner(), "conflict with \"editor\" using v1");
    }

    #[test]
    fn a_create_owns_everything_but_the_servers_metadata() {
        let mut created = cm(json!({"a": "1"}));
        created["metadata"]["uid"] = json!("u");
        created["metadata"]["labels"] = json!({"l": "x"});
        record_update(None, &mut created, &writer("maker", T0));
        let entry = &entries(&created)[0];
        assert_eq!(
            to_fields_v1(&entry.fields),
            json!({"f:data": {".": {}, "f:a": {}}, "f:metadata": {"f:labels": {".": {}, "f:l": {}}}})
        );
    }

    #[test]
    fn status_is_owned_through_its_subresource_only() {
        let status_writer = Writer {
            status: true,
            status_separate: true,
            resource: "loadbalancers",
            ..writer("ctl", T0)
        };
        let object = json!({"metadata": {"name": "lb", "labels": {"a": "b"}}, "spec": {"x": 1},
                            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let applied = apply(&json!({}), &object, &status_writer, false).unwrap();
        let entry = &entries(&applied)[0];
        assert_eq!(entry.subresource.as_deref(), Some("status"));
        assert_eq!(
            to_fields_v1(&entry.fields),
            json!({"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}, "f:type": {}}}}})
        );
        let main_writer = Writer {
            status: false,
            ..status_writer
        };
        let applied = apply(&json!({}), &object, &main_writer, false).unwrap();
        assert!(
            entries(&applied)[0]
                .fields
                .iter()
                .all(|p| p[0] != Elem::Field("status".into()))
        );
    }

    #[test]
    fn a_client_resetting_managed_fields_is_taken_at_its_word() {
        let live = apply(
            &json!({}),
            &cm(json!({"a": "1"})),
            &writer("one", T0),
            false,
        )
        .unwrap();
        let mut new = live.clone();
        new["metadata"]["managedFields"] = json!([]);
        record_update(Some(&live), &mut new, &writer("two", T1));
        assert_eq!(new["metadata"]["managedFields"], json!([]));
    }

    #[test]
    fn conflicts_with_several_managers_are_listed_by_manager() {
        let c = |m: &str, f: &str| Conflict {
            manager: m.into(),
            api_version: "v1".into(),
            subresource: None,
            applied: false,
            path: vec![Elem::Field("data".into()), Elem::Field(f.into())],
        };
        assert_eq!(
            conflict_message(&[c("b", "x"), c("a", "y"), c("a", "z")]),
            "Apply failed with 3 conflicts: conflicts with \"a\" using v1:\n- .data.y\n- .data.z\nconflicts with \"b\" using v1:\n- .data.x"
        );
    }
}
