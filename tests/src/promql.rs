//! The metric names a PromQL expression reads, found by a small tokenizer (enough for the alerts and
//! the dashboard capi-lb ships, not a PromQL parser): strings, label matchers (`{...}`), ranges
//! (`[...]`), numbers and the label lists of `by`, `without`, `on`, `ignoring`, `group_left` and
//! `group_right` are skipped; an identifier followed by `(` is a function, aggregation operators
//! and keywords are not names. What is left are the names of the series selected.

use std::collections::BTreeSet;

use serde_json::Value;

/// Words that are never metric names.
const KEYWORDS: [&str; 11] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
];

/// Aggregation operators: a call, even with its `by`/`without` clause before the parenthesis.
const AGGREGATIONS: [&str; 14] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// Keywords followed by a parenthesised list of label names.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names `expr` selects.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    // The previous identifier, when it opens a label list.
    let mut labels_next = false;
    while i < chars.len() {
        let ch = chars[i];
        match ch {
            '"' | '\'' | '`' => i = skip_string(&chars, i),
            '{' => i = skip_to(&chars, i, '}'),
            '[' => i = skip_to(&chars, i, ']'),
            '(' if labels_next => {
                i = skip_to(&chars, i, ')');
                labels_next = false;
            }
            c if c.is_ascii_digit() || c == '.' => {
                // A number (0.99, 1e3, 600): letters and digits up to the next separator.
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut j = i;
                while j < chars.len() && chars[j].is_whitespace() {
                    j += 1;
                }
                let call = j < chars.len() && chars[j] == '(';
                labels_next = LABEL_LISTS.contains(&word.as_str());
                let operator =
                    KEYWORDS.contains(&word.as_str()) || AGGREGATIONS.contains(&word.as_str());
                if !call && !operator {
                    names.insert(word);
                }
            }
            '$' => {
                // A Grafana variable outside a matcher or range: not a name.
                i += 1;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    names
}

fn skip_string(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() {
        if chars[i] == '\\' && quote != '`' {
            i += 2;
            continue;
        }
        if chars[i] == quote {
            return i + 1;
        }
        i += 1;
    }
    i
}

/// Past the `close` that ends the group opened at `start`, strings inside skipped.
fn skip_to(chars: &[char], start: usize, close: char) -> usize {
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => i = skip_string(chars, i),
            c if c == close => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// The metric name a Grafana variable query `label_values(<selector>, <label>)` reads (or the
/// names of a plain PromQL query).
pub fn variable_query_names(query: &str) -> BTreeSet<String> {
    match query
        .trim()
        .strip_prefix("label_values(")
        .and_then(|rest| rest.strip_suffix(')'))
    {
        Some(args) => {
            let selector = args.rsplit_once(',').map_or(args, |(s, _)| s);
            metric_names(selector)
        }
        None => metric_names(query),
    }
}

/// The alerting rules capi-lb ships (`capi_lb::install::monitoring::rules_yaml`), every group's.
pub fn alert_rules() -> Vec<Value> {
    let rules: Value =
        serde_saphyr::from_str(capi_lb::install::monitoring::rules_yaml()).expect("valid YAML");
    rules["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").clone())
        .filter(|r| r.get("alert").is_some())
        .collect()
}

/// The expressions of the queries of a dashboard's panels.
pub fn panel_exprs(dashboard: &Value) -> Vec<String> {
    dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().expect("an expr").to_string())
        .collect()
}

/// Every metric capi-lb's alerts and dashboard read (the panels' queries and the variables'),
/// but Prometheus' own `up`.
pub fn shipped_metric_names() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for alert in alert_rules() {
        names.extend(metric_names(alert["expr"].as_str().expect("expr")));
    }
    let dashboard = capi_lb::install::monitoring::dashboard();
    for expr in panel_exprs(&dashboard) {
        names.extend(metric_names(&expr));
    }
    for v in dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
    {
        if let Some(query) = v["query"]["query"].as_str() {
            names.extend(variable_query_names(query));
        }
    }
    names.remove("up");
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(expr: &str) -> Vec<String> {
        metric_names(expr).into_iter().collect()
    }

    #[test]
    fn finds_the_series_and_skips_everything_else() {
        assert_eq!(
            names(
                r#"sum without (instance, pod, result) (rate(capi_lb_reconciles_total{result="error", job=~"a|b"}[10m])) / sum by (controller) (rate(capi_lb_reconciles_total[$__rate_interval])) > 0.1"#
            ),
            vec!["capi_lb_reconciles_total"]
        );
        assert_eq!(
            names(
                r#"histogram_quantile(0.99, sum by (le) (rate(x_bucket{a="{b}"}[5m]))) and on (job) y unless z offset 5m"#
            ),
            vec!["x_bucket", "y", "z"]
        );
        assert_eq!(names(r#"absent(up{job=~"capi-lb.*"} == 1)"#), vec!["up"]);
        assert_eq!(names("max(a) > 1e3 or vector(0)"), vec!["a"]);
        assert_eq!(
            variable_query_names(r#"label_values(capi_lb_leader{job=~"$job"}, namespace)"#),
            ["capi_lb_leader".to_string()].into()
        );
    }
}
