//! Client-side validation of capi-lb objects against their own generated CRD schema: schema defaults,
//! unknown fields, OpenAPI constraints (types, lengths, patterns, ranges, enums, required) and the CEL
//! rules (`x-kubernetes-validations`, evaluated with kube-cel). The apiserver enforces the same schema
//! at admission; the reconciler and `capi-lb simulate` enforce it again through this module, so an
//! object that slipped past admission (an older CRD, a manifest that never saw an apiserver) gets the
//! same clear, field-named error instead of undefined behaviour.

use std::fmt;

use jsonschema::error::ValidationErrorKind;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use kube::core::cel::{CompiledSchema, Validator, compile_schema};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// One problem with one field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted path of the field, e.g. `spec.ports[0].port`; empty for the whole object.
    pub field: String,
    /// What is wrong, in words a user can act on.
    pub message: String,
}

impl FieldError {
    /// A new field error.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

/// A list of field errors, displayed as `field: message; field: message`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct FieldErrors(pub Vec<FieldError>);

impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        write!(f, "{}", parts.join("; "))
    }
}

impl From<FieldError> for FieldErrors {
    fn from(e: FieldError) -> Self {
        FieldErrors(vec![e])
    }
}

/// Validates objects of one CRD against that CRD's schema.
pub struct SchemaValidator {
    schema: Value,
    openapi: jsonschema::Validator,
    cel: CompiledSchema,
}

impl fmt::Debug for SchemaValidator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchemaValidator").finish_non_exhaustive()
    }
}

impl SchemaValidator {
    /// Build a validator from the first version of a CRD.
    pub fn for_crd(crd: &CustomResourceDefinition) -> Result<Self, String> {
        let schema = crd
            .spec
            .versions
            .first()
            .and_then(|v| v.schema.as_ref())
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .ok_or_else(|| format!("CRD {} has no openAPIV3Schema", crd.spec.names.kind))
            .and_then(|s| serde_json::to_value(s).map_err(|e| e.to_string()))?;
        let openapi = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft4)
            .build(&as_json_schema(&schema))
            .map_err(|e| format!("CRD schema of {} is invalid: {e}", crd.spec.names.kind))?;
        // The CEL engine gets a copy whose rule `fieldPath`s are checked as the apiserver checks
        // them and rewritten to the path the apiserver reports (see `apiserver_field_paths`).
        let mut cel_schema = schema.clone();
        apiserver_field_paths(&mut cel_schema, "")
            .map_err(|e| format!("CRD {} is invalid: {e}", crd.spec.names.kind))?;
        let cel = compile_schema(&cel_schema);
        if cel.has_errors() {
            let errors: Vec<String> = cel
                .compilation_errors()
                .iter()
                .map(|e| e.to_string())
                .collect();
            return Err(format!(
                "CEL rules of {} do not compile: {}",
                crd.spec.names.kind,
                errors.join("; ")
            ));
        }
        Ok(Self {
            schema,
            openapi,
            cel,
        })
    }

    /// The OpenAPI schema this validator enforces.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// Apply schema defaults to `object` (without its `status`) and check it. Returns the defaulted
    /// object, or every problem found.
    pub fn validate(&self, object: &Value) -> Result<Value, FieldErrors> {
        let mut object = object.clone();
        if let Some(map) = object.as_object_mut() {
            map.remove("status");
        }
        prune_nulls(&self.schema, &mut object, false);
        let defaulted = kube::core::cel::apply_defaults(&self.schema, &object);
        let mut errors = Vec::new();
        unknown_fields(&self.schema, &defaulted, "", &mut errors);
        // Unknown fields: the apiserver refuses the object before validating it.
        let mut blocking = !errors.is_empty();
        for e in self.openapi.iter_errors(&defaulted) {
            let mut field = pointer_to_path(&e.instance_path().to_string());
            match e.kind() {
                // The apiserver names the missing field itself (`spec.infrastructureRef: Required
                // value`), not the object that lacks it.
                ValidationErrorKind::Required { property } => {
                    field = join(&field, property.as_str().unwrap_or_default());
                    blocking = true;
                }
                ValidationErrorKind::Enum { .. }
                | ValidationErrorKind::MaxLength { .. }
                | ValidationErrorKind::MaxItems { .. }
                | ValidationErrorKind::MaxProperties { .. }
                | ValidationErrorKind::Type { .. } => blocking = true,
                _ => {}
            }
            errors.push(FieldError::new(field, e.to_string()));
        }
        // The apiserver evaluates the CEL rules unless a schema error blocks them (a required
        // field missing, a value not of the enum, too long, too many items or properties, a wrong
        // type: `hasBlockingErr` in k8s.io/apiextensions-apiserver); other schema errors (patterns,
        // ranges, formats) are reported together with the failed rules.
        // A rule is not evaluated on a null value (a nullable field's), and `has()` of a field
        // holding null is false: what the apiserver does (a KubeDCLoadBalancer or
        // OctaviaLoadBalancer with `address: null` is stored as is, its `isIP` rule not run).
        let mut seen_by_rules = defaulted.clone();
        prune_nulls(&self.schema, &mut seen_by_rules, true);
        if !blocking
            && let Err(cel_errors) =
                Validator::new().validate_compiled(&self.cel, &seen_by_rules, None)
        {
            for e in cel_errors.iter() {
                // kube-cel reports `<path of the rule's node><fieldPath>`. With the fieldPaths
                // rewritten to `.<path>` (see `for_crd`) that is the apiserver's field
                // (`spec.controlPlane`), except for a rule on the root: `.spec.publication.suffix`
                // there, which the apiserver reports as `spec.publication.suffix`.
                let field = e.field_path.strip_prefix('.').unwrap_or(&e.field_path);
                errors.push(FieldError::new(field, e.message.clone()));
            }
        }
        if errors.is_empty() {
            Ok(defaulted)
        } else {
            Err(FieldErrors(errors))
        }
    }
}

/// A capi-lb custom resource that can be validated against its own CRD.
pub trait Validated: CustomResourceExt + DeserializeOwned {
    /// The (lazily built, shared) validator of this kind.
    fn validator() -> Result<&'static SchemaValidator, String>;
}

/// Implement [`Validated`] for a kind (each infrastructure kind does it beside its type).
macro_rules! validated {
    ($kind:ty) => {
        impl $crate::validation::Validated for $kind {
            fn validator() -> Result<&'static $crate::validation::SchemaValidator, String> {
                static VALIDATOR: std::sync::OnceLock<
                    Result<$crate::validation::SchemaValidator, String>,
                > = std::sync::OnceLock::new();
                VALIDATOR
                    .get_or_init(|| {
                        $crate::validation::SchemaValidator::for_crd(
                            &<$kind as kube::CustomResourceExt>::crd(),
                        )
                    })
                    .as_ref()
                    .map_err(Clone::clone)
            }
        }
    };
}

pub(crate) use validated;

validated!(crate::loadbalancer::LoadBalancer);

/// Validate `object` against the schema of `K` and deserialize it, defaults applied. Every error
/// names the field.
pub fn parse<K: Validated>(object: &Value) -> Result<K, FieldErrors> {
    let validator = K::validator().map_err(|e| FieldError::new("", e))?;
    let defaulted = validator.validate(object)?;
    serde_path_to_error::deserialize::<_, K>(defaulted).map_err(|e| {
        FieldErrors(vec![FieldError::new(
            e.path().to_string(),
            e.inner().to_string(),
        )])
    })
}

/// Validate a typed object against its own schema (for objects read from the apiserver).
pub fn check<K: Validated + serde::Serialize>(object: &K) -> Result<(), FieldErrors> {
    let value = serde_json::to_value(object)
        .map_err(|e| FieldError::new("", format!("cannot serialize: {e}")))?;
    let validator = K::validator().map_err(|e| FieldError::new("", e))?;
    validator.validate(&value).map(|_| ())
}

/// Check every CEL rule's `fieldPath` in `schema` (whose node is at `path`, for messages) the way
/// the apiserver checks it when the CRD is created, and rewrite each to `.` followed by the path the
/// apiserver appends to the rule's node when it reports a failed rule (see [`resolve_field_path`]).
/// kube-cel then reports `<node path>.<that path>`, the apiserver's field. An empty `fieldPath` is
/// dropped (the apiserver treats it as unset).
fn apiserver_field_paths(schema: &mut Value, path: &str) -> Result<(), String> {
    let mut resolved = Vec::new();
    if let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for (i, rule) in rules.iter().enumerate() {
            if let Some(field_path) = rule.get("fieldPath").and_then(Value::as_str) {
                let normalized = if field_path.is_empty() {
                    None
                } else {
                    Some(resolve_field_path(schema, field_path).map_err(|e| {
                        format!(
                            "x-kubernetes-validations fieldPath {field_path:?} of the rule on {}: {e}",
                            if path.is_empty() { "the object" } else { path }
                        )
                    })?)
                };
                resolved.push((i, normalized));
            }
        }
    }
    if let Some(rules) = schema
        .get_mut("x-kubernetes-validations")
        .and_then(Value::as_array_mut)
    {
        for (i, normalized) in resolved {
            if let Some(rule) = rules.get_mut(i).and_then(Value::as_object_mut) {
                match normalized {
                    Some(p) => rule.insert("fieldPath".into(), Value::String(format!(".{p}"))),
                    None => rule.remove("fieldPath"),
                };
            }
        }
    }
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for (name, child) in props.iter_mut() {
            apiserver_field_paths(child, &join(path, name))?;
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(child) = schema.get_mut(key)
            && child.is_object()
        {
            apiserver_field_paths(child, &format!("{path}[*]"))?;
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(children) = schema.get_mut(key).and_then(Value::as_array_mut) {
            for child in children {
                apiserver_field_paths(child, path)?;
            }
        }
    }
    Ok(())
}

/// Resolve the `fieldPath` of a CEL rule (`x-kubernetes-validations[].fieldPath`) against the schema
/// node carrying the rule, as the apiserver does (`ValidFieldPath` in k8s.io/apiextensions-apiserver
/// pkg/apiserver/schema/cel): a path relative to that node, made of `.name` and `['name']` steps, each
/// naming a property of an object with `properties` or, on a map (`additionalProperties`), any key;
/// list indices are not allowed. Returns the path in the apiserver's `field.Path` notation
/// (`listener.allowedCIDRs`, `labels[key]`), which the apiserver appends to the node's path when it
/// reports a failed rule; or why the apiserver would refuse the CRD.
pub fn resolve_field_path(schema: &Value, json_path: &str) -> Result<String, String> {
    enum Step {
        Child(String),
        Key(String),
    }
    if json_path.contains(['\n', '\r']) {
        return Err("fieldPath must not contain line breaks".into());
    }
    let tokens = field_path_tokens(json_path);
    let mut tokens = tokens.iter().map(String::as_str);
    let mut node = schema;
    let mut steps = Vec::new();
    while let Some(token) = tokens.next() {
        let name = match token {
            "[" => {
                let quoted = tokens.next().ok_or("unexpected end of JSON path")?;
                let inner = quoted
                    .strip_prefix('\'')
                    .and_then(|q| q.strip_suffix('\''))
                    .ok_or_else(|| format!("expected single quoted string but got {quoted}"))?;
                let name = unescape_single_quoted(inner)?;
                match tokens.next() {
                    Some("]") => {}
                    Some(other) => return Err(format!("expected ] but got {other}")),
                    None => return Err("unexpected end of JSON path".into()),
                }
                name
            }
            "." => tokens
                .next()
                .ok_or("unexpected end of JSON path")?
                .to_string(),
            other => return Err(format!("expected [ or . but got: {other}")),
        };
        if let Some(props) = node.get("properties").and_then(Value::as_object) {
            node = props.get(&name).ok_or("does not refer to a valid field")?;
            steps.push(Step::Child(name));
        } else if let Some(additional) = node.get("additionalProperties") {
            node = additional;
            steps.push(Step::Key(name));
        } else {
            return Err("does not refer to a valid field".into());
        }
    }
    // `field.Path.String()`: children joined by `.`, map keys as `[key]`.
    let mut out = String::new();
    for step in steps {
        match step {
            Step::Child(name) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&name);
            }
            Step::Key(key) => {
                out.push('[');
                out.push_str(&key);
                out.push(']');
            }
        }
    }
    Ok(out)
}

/// The apiserver's tokens of a field path: `.`, `[` and `]` alone, a single-quoted string (up to the
/// first `'` not preceded by `\`) when a token starts with `'`, otherwise the text up to the next
/// delimiter.
fn field_path_tokens(path: &str) -> Vec<String> {
    let chars: Vec<char> = path.chars().collect();
    let mut tokens = Vec::new();
    let mut start = 0;
    while start < chars.len() {
        let rest = &chars[start..];
        let len = if rest[0] == '\'' {
            (1..rest.len())
                .find(|&i| rest[i] == '\'' && rest[i - 1] != '\\')
                .map_or(rest.len(), |i| i + 1)
        } else if matches!(rest[0], '.' | '[' | ']') {
            1
        } else {
            rest.iter()
                .position(|c| matches!(c, '.' | '[' | ']'))
                .unwrap_or(rest.len())
        };
        tokens.push(rest[..len].iter().collect());
        start += len;
    }
    tokens
}

/// The escapes the apiserver accepts in a single-quoted field path step.
fn unescape_single_quoted(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('a') => out.push('\u{7}'),
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('v') => out.push('\u{b}'),
            Some('\'') => out.push('\''),
            Some('\\') => out.push('\\'),
            Some(other) => {
                return Err(format!(
                    "invalid string literal: invalid escape char \\{other}"
                ));
            }
            None => out.push('\\'),
        }
    }
    Ok(out)
}

/// `/spec/ports/0/port` -> `spec.ports[0].port`.
fn pointer_to_path(pointer: &str) -> String {
    let mut out = String::new();
    for token in pointer.split('/').filter(|t| !t.is_empty()) {
        let token = token.replace("~1", "/").replace("~0", "~");
        if token.bytes().all(|b| b.is_ascii_digit()) {
            out.push('[');
            out.push_str(&token);
            out.push(']');
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&token);
        }
    }
    out
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Drop the `null` values of fields whose schema is not `nullable`, as the apiserver does before
/// defaulting (with `all`, of every field: what the CEL rules see).
fn prune_nulls(schema: &Value, value: &mut Value, all: bool) {
    match value {
        Value::Object(map) => {
            let Some(props) = schema.get("properties").and_then(Value::as_object) else {
                return;
            };
            map.retain(|key, child| {
                let nullable = props
                    .get(key)
                    .and_then(|s| s.get("nullable"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                !(child.is_null() && props.contains_key(key) && (all || !nullable))
            });
            for (key, child) in map.iter_mut() {
                if let Some(child_schema) = props.get(key) {
                    prune_nulls(child_schema, child, all);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    prune_nulls(item_schema, item, all);
                }
            }
        }
        _ => {}
    }
}

/// Report fields the schema does not know (the apiserver would prune them silently; kubectl's strict
/// field validation rejects them). `metadata` is not checked beyond its presence.
fn unknown_fields(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        .unwrap_or(false)
        || path == "metadata"
    {
        return;
    }
    match value {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (key, child) in map {
                    match props.get(key) {
                        Some(child_schema) => {
                            unknown_fields(child_schema, child, &join(path, key), errors)
                        }
                        None if path.is_empty()
                            && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") => {}
                        None => errors.push(FieldError::new(join(path, key), "unknown field")),
                    }
                }
            } else if let Some(additional) = schema.get("additionalProperties")
                && additional.is_object()
            {
                for (key, child) in map {
                    unknown_fields(additional, child, &join(path, key), errors);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    unknown_fields(item_schema, item, &format!("{path}[{i}]"), errors);
                }
            }
        }
        _ => {}
    }
}

/// Turn the OpenAPI v3.0 schema into one a JSON Schema validator reads the same way: `nullable: true`
/// becomes a `null` alternative of `type`, and Kubernetes extensions (which a JSON Schema validator
/// ignores anyway) are dropped.
fn as_json_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out = Map::new();
            let nullable = map
                .get("nullable")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            for (k, v) in map {
                if k.starts_with("x-kubernetes-") || k == "nullable" || k == "default" {
                    continue;
                }
                if k == "properties" {
                    let props = v
                        .as_object()
                        .map(|p| {
                            p.iter()
                                .map(|(name, s)| (name.clone(), as_json_schema(s)))
                                .collect::<Map<_, _>>()
                        })
                        .unwrap_or_default();
                    out.insert(k.clone(), Value::Object(props));
                } else {
                    out.insert(k.clone(), as_json_schema(v));
                }
            }
            if nullable && let Some(Value::String(t)) = out.get("type").cloned() {
                out.insert("type".into(), serde_json::json!([t, "null"]));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(as_json_schema).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_paths_read_like_kubectl() {
        assert_eq!(pointer_to_path("/spec/ports/0/port"), "spec.ports[0].port");
        assert_eq!(pointer_to_path(""), "");
        assert_eq!(
            pointer_to_path("/metadata/labels/a~1b"),
            "metadata.labels.a/b"
        );
    }

    /// As the apiserver: a missing field is reported on itself, a pattern error does not hide the
    /// failed CEL rules, an enum error does (`hasBlockingErr`).
    #[test]
    fn schema_errors_are_reported_and_block_rules_as_the_apiserver_does() {
        use crate::loadbalancer::LoadBalancer;
        let lb = |spec: Value| {
            serde_json::json!({"apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1",
                "kind": "LoadBalancer", "metadata": {"name": "cp", "namespace": "default"},
                "spec": spec})
        };
        let infra_ref = serde_json::json!({"apiGroup": "infrastructure.cluster.x-k8s.io",
            "kind": "InMemoryLoadBalancer", "name": "cp"});
        let fields = |spec: Value| -> Vec<String> {
            let errors = parse::<LoadBalancer>(&lb(spec)).unwrap_err();
            errors.0.into_iter().map(|e| e.field).collect()
        };
        assert_eq!(fields(serde_json::json!({})), ["spec.infrastructureRef"]);
        // Pattern error and the failed rule on the same field.
        let errors = parse::<LoadBalancer>(&lb(serde_json::json!({
            "infrastructureRef": infra_ref, "publication": {"suffix": "-Ext"}})))
        .unwrap_err();
        assert_eq!(errors.0.len(), 2, "{errors}");
        assert!(
            errors.to_string().contains("must be a DNS label"),
            "{errors}"
        );
        // An enum error blocks the rules (the duplicate port would fail one).
        assert_eq!(
            fields(
                serde_json::json!({"infrastructureRef": infra_ref, "ports": [
                {"name": "a", "port": 1, "protocol": "SCTP"}, {"name": "a", "port": 2}]})
            ),
            ["spec.ports[0].protocol"]
        );
    }

    fn schema() -> Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "a.c": {"type": "number"},
                "foo": {"type": "object", "properties": {
                    "b.c": {"type": "object", "properties": {"c": {"type": "number"}}},
                }},
                "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "number"}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "object", "properties": {"x": {"type": "string"}}}},
                "n": {"type": "number"},
            },
        })
    }

    /// The accepted and refused paths, and the refusals' wording, of the apiserver's own tests of
    /// `ValidFieldPath`.
    #[test]
    fn field_paths_resolve_as_the_apiserver_resolves_them() {
        let s = schema();
        for (path, want) in [
            (".n", "n"),
            ("['n']", "n"),
            (".foo['b.c'].c", "foo.b.c.c"),
            ("['a.c']", "a.c"),
            (".labels.k", "labels[k]"),
            (".labels['k.l'].x", "labels[k.l].x"),
            (".labels['it\\'s']", "labels[it's]"),
        ] {
            assert_eq!(resolve_field_path(&s, path).as_deref(), Ok(want), "{path}");
        }
        for (path, why) in [
            (".a.c", "does not refer to a valid field"),
            (".list[0]", "expected single quoted string but got 0"),
            (".list.a", "does not refer to a valid field"),
            ("   ", "expected [ or . but got:    "),
            (".", "unexpected end of JSON path"),
            ("..", "does not refer to a valid field"),
            ("n", "expected [ or . but got: n"),
            ("spec.n", "expected [ or . but got: spec"),
            (".n.m", "does not refer to a valid field"),
            ("['n'", "unexpected end of JSON path"),
            ("['n'.", "expected ] but got ."),
            (
                ".labels['a\\q']",
                "invalid string literal: invalid escape char \\q",
            ),
            (".n\n", "fieldPath must not contain line breaks"),
        ] {
            assert_eq!(resolve_field_path(&s, path), Err(why.to_string()), "{path}");
        }
    }

    #[test]
    fn field_paths_are_rewritten_to_the_reported_path_or_refused() {
        let mut s = schema();
        s["x-kubernetes-validations"] = serde_json::json!([
            {"rule": "true", "fieldPath": "['foo'].b\\.c"},
            {"rule": "true", "fieldPath": ".labels['k']"},
            {"rule": "true", "fieldPath": ""},
            {"rule": "true"},
        ]);
        // `['foo'].b\.c` does not resolve (`\.` is not an escape outside quotes): refused.
        assert!(apiserver_field_paths(&mut s.clone(), "").is_err());
        s["x-kubernetes-validations"][0]["fieldPath"] = ".foo['b.c'].c".into();
        apiserver_field_paths(&mut s, "").unwrap();
        assert_eq!(
            s["x-kubernetes-validations"],
            serde_json::json!([
                {"rule": "true", "fieldPath": ".foo.b.c.c"},
                {"rule": "true", "fieldPath": ".labels[k]"},
                {"rule": "true"},
                {"rule": "true"},
            ])
        );
        let mut nested = schema();
        nested["properties"]["foo"]["x-kubernetes-validations"] =
            serde_json::json!([{"rule": "true", "fieldPath": "foo.b"}]);
        let err = apiserver_field_paths(&mut nested, "").unwrap_err();
        assert!(
            err.contains("\"foo.b\" of the rule on foo: expected [ or . but got: foo"),
            "{err}"
        );
    }
}
