//! Client-side validation of capi-lb objects against their own generated CRD schema: schema defaults,
//! unknown fields, OpenAPI constraints (types, lengths, patterns, ranges, enums, required) and the CEL
//! rules (`x-kubernetes-validations`, evaluated with kube-cel). The apiserver enforces the same schema
//! at admission; the reconciler and `capi-lb simulate` enforce it again through this module, so an
//! object that slipped past admission (an older CRD, a manifest that never saw an apiserver) gets the
//! same clear, field-named error instead of undefined behaviour.

use std::fmt;
use std::sync::OnceLock;

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
        let cel = compile_schema(&schema);
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
        let defaulted = kube::core::cel::apply_defaults(&self.schema, &object);
        let mut errors = Vec::new();
        unknown_fields(&self.schema, &defaulted, "", &mut errors);
        for e in self.openapi.iter_errors(&defaulted) {
            errors.push(FieldError::new(
                pointer_to_path(&e.instance_path().to_string()),
                e.to_string(),
            ));
        }
        // CEL rules assume a schema-valid object (the apiserver only evaluates them then).
        if errors.is_empty()
            && let Err(cel_errors) = Validator::new().validate_compiled(&self.cel, &defaulted, None)
        {
            for e in cel_errors.iter() {
                errors.push(FieldError::new(e.field_path.clone(), e.message.clone()));
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

macro_rules! validated {
    ($kind:ty) => {
        impl Validated for $kind {
            fn validator() -> Result<&'static SchemaValidator, String> {
                static VALIDATOR: OnceLock<Result<SchemaValidator, String>> = OnceLock::new();
                VALIDATOR
                    .get_or_init(|| SchemaValidator::for_crd(&<$kind>::crd()))
                    .as_ref()
                    .map_err(Clone::clone)
            }
        }
    };
}

validated!(crate::loadbalancer::LoadBalancer);
validated!(crate::inmemory::InMemoryLoadBalancer);
validated!(crate::kubedc::KubeDCLoadBalancer);
validated!(crate::octavia::OctaviaLoadBalancer);

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
}
