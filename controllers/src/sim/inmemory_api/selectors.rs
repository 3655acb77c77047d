//! Label and field selectors of lists and watches (pure), as the apiserver reads them: label
//! requirements `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>n`, `k<n`;
//! field requirements `path=v`, `path==v`, `path!=v`. A field selector may name any field of the
//! object by its dotted path (the apiserver accepts only the fields each kind declares, e.g.
//! `metadata.name`, `metadata.namespace`, an Event's `involvedObject.uid`): a missing field reads as
//! the empty string.

use std::collections::BTreeSet;

use serde_json::Value;

/// One label requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Label {
    Equals(String, String),
    NotEquals(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    NotExists(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

/// A label selector: every requirement must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct LabelSelector(Vec<Label>);

/// Split `text` at the commas outside parentheses.
fn terms(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0_i32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect()
}

fn key(text: &str) -> Result<String, String> {
    let key = text.trim();
    if key.is_empty() || key.contains(char::is_whitespace) {
        return Err(format!("invalid label key {key:?}"));
    }
    Ok(key.to_string())
}

/// `(a, b)` as a set.
fn values(text: &str) -> Result<BTreeSet<String>, String> {
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesised set of values, found {text:?}"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn label(term: &str) -> Result<Label, String> {
    if let Some(rest) = term.strip_prefix('!') {
        return Ok(Label::NotExists(key(rest)?));
    }
    if let Some(open) = term.find('(') {
        let (head, set) = term.split_at(open);
        let mut words = head.split_whitespace();
        let (Some(k), Some(op), None) = (words.next(), words.next(), words.next()) else {
            return Err(format!("invalid set requirement {term:?}"));
        };
        return match op {
            "in" => Ok(Label::In(key(k)?, values(set)?)),
            "notin" => Ok(Label::NotIn(key(k)?, values(set)?)),
            _ => Err(format!("unknown operator {op:?} in {term:?}")),
        };
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(Label::NotEquals(key(k)?, v.trim().to_string()));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(Label::Equals(key(k)?, v.trim().to_string()));
    }
    for (op, greater) in [('>', true), ('<', false)] {
        if let Some((k, v)) = term.split_once(op) {
            let n = v
                .trim()
                .parse()
                .map_err(|_| format!("{term:?}: {v:?} is not an integer"))?;
            return Ok(if greater {
                Label::GreaterThan(key(k)?, n)
            } else {
                Label::LessThan(key(k)?, n)
            });
        }
    }
    Ok(Label::Exists(key(term)?))
}

impl LabelSelector {
    /// Parse a selector; `Err` says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        terms(text)
            .into_iter()
            .map(label)
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// Whether `object`'s labels satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        let number = |k: &str| get(k).and_then(|v| v.parse::<i64>().ok());
        self.0.iter().all(|requirement| match requirement {
            Label::Equals(k, v) => get(k) == Some(v.as_str()),
            Label::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Label::In(k, set) => get(k).is_some_and(|v| set.contains(v)),
            Label::NotIn(k, set) => get(k).is_none_or(|v| !set.contains(v)),
            Label::Exists(k) => get(k).is_some(),
            Label::NotExists(k) => get(k).is_none(),
            Label::GreaterThan(k, n) => number(k).is_some_and(|v| v > *n),
            Label::LessThan(k, n) => number(k).is_some_and(|v| v < *n),
        })
    }
}

/// One field requirement: the field's dotted path, whether it must equal (or differ from) the
/// value, and the value.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Field {
    path: String,
    equal: bool,
    value: String,
}

/// A field selector: every requirement must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct FieldSelector(Vec<Field>);

impl FieldSelector {
    /// Parse a selector; `Err` says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        terms(text)
            .into_iter()
            .map(|term| {
                let (path, equal, value) = if let Some((p, v)) = term.split_once("!=") {
                    (p, false, v)
                } else if let Some((p, v)) = term.split_once("==").or_else(|| term.split_once('='))
                {
                    (p, true, v)
                } else {
                    return Err(format!("invalid field selector requirement {term:?}"));
                };
                let path = path.trim();
                if path.is_empty() {
                    return Err(format!("invalid field selector requirement {term:?}"));
                }
                Ok(Field {
                    path: path.to_string(),
                    equal,
                    value: value.trim().to_string(),
                })
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// Whether `object` satisfies every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|f| {
            let pointer = format!("/{}", f.path.replace('.', "/"));
            let found = match object.pointer(&pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (found == f.value) == f.equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labelled(labels: Value) -> Value {
        json!({"metadata": {"name": "x", "labels": labels}})
    }

    fn label_matches(selector: &str, labels: Value) -> bool {
        LabelSelector::parse(selector)
            .unwrap()
            .matches(&labelled(labels))
    }

    #[test]
    fn equality_and_inequality() {
        assert!(label_matches("a=1", json!({"a": "1"})));
        assert!(label_matches("a==1,b=2", json!({"a": "1", "b": "2"})));
        assert!(!label_matches("a=1,b=2", json!({"a": "1"})));
        assert!(label_matches("a!=1", json!({})));
        assert!(!label_matches("a!=1", json!({"a": "1"})));
        assert!(label_matches("", json!({})));
    }

    #[test]
    fn sets_and_existence() {
        assert!(label_matches("a in (1, 2)", json!({"a": "2"})));
        assert!(!label_matches("a in (1,2)", json!({})));
        assert!(label_matches("a notin (1,2)", json!({})));
        assert!(!label_matches("a notin (1,2),b", json!({"a": "3"})));
        assert!(label_matches("a notin (1,2),b", json!({"a": "3", "b": ""})));
        assert!(label_matches("!a", json!({"b": "1"})));
        assert!(!label_matches("!a", json!({"a": "1"})));
        assert!(label_matches("a>3,a<5", json!({"a": "4"})));
        assert!(!label_matches("a>3", json!({"a": "x"})));
    }

    #[test]
    fn bad_label_selectors_are_refused() {
        assert!(LabelSelector::parse("a in 1,2").is_err());
        assert!(LabelSelector::parse("a among (1)").is_err());
        assert!(LabelSelector::parse("=1").is_err());
        assert!(LabelSelector::parse("a>x").is_err());
    }

    #[test]
    fn fields_by_path() {
        let event = json!({"metadata": {"name": "e", "namespace": "ns"},
                           "involvedObject": {"uid": "u1"}, "count": 3});
        let m = |s: &str| FieldSelector::parse(s).unwrap().matches(&event);
        assert!(m("metadata.name=e"));
        assert!(m("metadata.namespace==ns,involvedObject.uid=u1"));
        assert!(!m("involvedObject.uid=u2"));
        assert!(m("involvedObject.uid!=u2"));
        assert!(m("spec.nodeName="));
        assert!(m("count=3"));
        assert!(FieldSelector::parse("metadata.name").is_err());
    }
}
