//! Template variables for `capi-lb simulate`, rendered as `clusterctl generate cluster` renders a
//! flavor: `${VAR}`, `${VAR:=default}`, `${VAR=default}`, `${VAR:-default}` and `${VAR-default}`
//! take their value from the given variables (the process environment), else from a default the
//! text declares for that variable anywhere (a flavor declares a default once and may use the
//! variable bare elsewhere). Variables left without a value are all returned, so that one error can
//! list them (pure; no I/O).

use std::collections::{BTreeMap, BTreeSet};

/// One `${...}` reference in a text.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Reference {
    /// Byte range of the whole `${...}`.
    start: usize,
    end: usize,
    name: String,
    /// The default and whether an empty value also takes it (`:=`, `:-`).
    default: Option<(String, bool)>,
}

/// Every `${NAME...}` in `text` whose NAME is a variable name; anything else is left as it is.
fn references(text: &str) -> Vec<Reference> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("${") {
        let start = from + at;
        let body_start = start + 2;
        let Some(close) = text[body_start..].find('}') else {
            break;
        };
        let end = body_start + close + 1;
        let body = &text[body_start..end - 1];
        let name_len = body
            .char_indices()
            .find(|(i, c)| {
                !(c.is_ascii_alphabetic() || *c == '_' || (*i > 0 && c.is_ascii_digit()))
            })
            .map_or(body.len(), |(i, _)| i);
        let (name, rest) = body.split_at(name_len);
        let default = [(":=", true), (":-", true), ("=", false), ("-", false)]
            .iter()
            .find_map(|(op, empty)| rest.strip_prefix(op).map(|d| (d.to_string(), *empty)));
        if !name.is_empty() && (rest.is_empty() || default.is_some()) {
            found.push(Reference {
                start,
                end,
                name: name.to_string(),
                default,
            });
            from = end;
        } else {
            from = body_start;
        }
    }
    found
}

/// Whether `text` uses template variables.
pub fn has_variables(text: &str) -> bool {
    !references(text).is_empty()
}

/// `text` with every variable replaced (see the module documentation), or the names of the
/// variables without a value (sorted, each once).
pub fn render(text: &str, values: &BTreeMap<String, String>) -> Result<String, Vec<String>> {
    let refs = references(text);
    // The first default the text declares for each variable.
    let mut defaults: BTreeMap<&str, (&str, bool)> = BTreeMap::new();
    for r in &refs {
        if let Some((default, empty)) = &r.default {
            defaults
                .entry(r.name.as_str())
                .or_insert((default.as_str(), *empty));
        }
    }
    let mut unset = BTreeSet::new();
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for r in &refs {
        out.push_str(&text[last..r.start]);
        last = r.end;
        let own = r.default.as_ref().map(|(d, e)| (d.as_str(), *e));
        let value = match (
            values.get(&r.name),
            own.or_else(|| defaults.get(r.name.as_str()).copied()),
        ) {
            (Some(v), Some((default, true))) if v.is_empty() => Some(default.to_string()),
            (Some(v), _) => Some(v.clone()),
            (None, Some((default, _))) => Some(default.to_string()),
            (None, None) => None,
        };
        match value {
            Some(v) => out.push_str(&v),
            None => {
                unset.insert(r.name.clone());
            }
        }
    }
    out.push_str(&text[last..]);
    if unset.is_empty() {
        Ok(out)
    } else {
        Err(unset.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn every_clusterctl_form_is_rendered() {
        let text = "a: ${A}\nb: ${B:=two}\nc: ${C=three}\nd: ${D:-four}\ne: ${E-five}\n";
        assert_eq!(
            render(text, &values(&[("A", "one")])).unwrap(),
            "a: one\nb: two\nc: three\nd: four\ne: five\n"
        );
        // An empty value takes the default only with the colon forms.
        let empty = values(&[("A", ""), ("B", ""), ("C", ""), ("D", ""), ("E", "")]);
        assert_eq!(
            render(text, &empty).unwrap(),
            "a: \nb: two\nc: \nd: four\ne: \n"
        );
        // A value from the environment wins over a default.
        assert_eq!(render("${B:=two}", &values(&[("B", "2")])).unwrap(), "2");
    }

    #[test]
    fn a_default_declared_once_applies_to_bare_uses() {
        let text = "name: ${SECRET}\nagain: ${SECRET:=cloud}\n";
        assert_eq!(
            render(text, &values(&[])).unwrap(),
            "name: cloud\nagain: cloud\n"
        );
    }

    #[test]
    fn every_unset_variable_is_listed_once_and_sorted() {
        let text = "${NAMESPACE} ${CLUSTER_NAME} ${CLUSTER_NAME}-cp ${SET} ${X:=x}";
        assert_eq!(
            render(text, &values(&[("SET", "s")])),
            Err(vec!["CLUSTER_NAME".to_string(), "NAMESPACE".to_string()])
        );
    }

    #[test]
    fn what_is_not_a_variable_is_left_alone() {
        let text = "${} ${1A} ${a b} $HOME ${unclosed";
        assert!(!has_variables(text));
        assert_eq!(render(text, &values(&[])).unwrap(), text);
        assert!(has_variables("x: ${CLUSTER_NAME}"));
    }
}
