//! The Helm values the documentation names exist in the chart: every key of docs/operations.md's
//! values table (`metrics.enabled`, `.bindAddress`: a leading dot continues the previous key's
//! parent) and every `--set key=...` in the docs and the README is a key of
//! charts/capi-lb/values.yaml. A renamed or misspelt value (`replicas` for `replicaCount`) fails here.

use capi_lb_tests::repo;
use serde_json::Value;

/// Whether the dotted `path` names a key of `values`.
fn has(values: &Value, path: &str) -> bool {
    let mut at = values;
    for part in path.split('.') {
        match at.get(part) {
            Some(next) => at = next,
            None => return false,
        }
    }
    true
}

/// The keys a values-table row names in its first column.
fn row_keys(row: &str) -> Vec<String> {
    let first = row.trim_start_matches('|').split('|').next().unwrap_or("");
    let mut keys = Vec::new();
    let mut parent = String::new();
    for span in first.split('`').skip(1).step_by(2) {
        let key = match span.strip_prefix('.') {
            Some(rest) => format!("{parent}{rest}"),
            None => span.to_string(),
        };
        parent = key
            .rsplit_once('.')
            .map_or(String::new(), |(p, _)| format!("{p}."));
        keys.push(key);
    }
    keys
}

/// The keys of `--set key=value` (and `--set key={...}`) in `text`.
fn set_keys(text: &str) -> Vec<String> {
    text.split("--set ")
        .skip(1)
        .filter_map(|rest| {
            let word = rest.split_whitespace().next()?;
            let word = word.trim_matches(|c| c == '"' || c == '\'');
            let key = word.split('=').next()?;
            (!key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '.'))
                .then(|| key.to_string())
        })
        .collect()
}

fn values() -> Value {
    let text = std::fs::read_to_string(repo("charts/capi-lb/values.yaml")).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

#[test]
fn the_values_the_docs_name_are_the_charts() {
    let values = values();
    let operations = std::fs::read_to_string(repo("docs/operations.md")).unwrap();
    let table: Vec<&str> = operations
        .lines()
        .skip_while(|l| !l.starts_with("| value | default | what |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert!(table.len() >= 10, "the values table: {table:?}");
    let mut missing = Vec::new();
    let mut named = 0;
    for row in &table {
        for key in row_keys(row) {
            named += 1;
            if !has(&values, &key) {
                missing.push(format!("docs/operations.md: `{key}`"));
            }
        }
    }
    let mut files = vec![repo("README.md")];
    for entry in std::fs::read_dir(repo("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for key in set_keys(&text) {
            named += 1;
            if !has(&values, &key) {
                missing.push(format!("{}: --set {key}", file.display()));
            }
        }
    }
    assert!(named >= 25, "only {named} values named");
    assert!(
        missing.is_empty(),
        "values the docs name that the chart does not have:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_scanner_reads_rows_and_set_flags() {
    assert_eq!(
        row_keys("| `metrics.enabled`, `.bindAddress`, `.port` | `true` | x |"),
        ["metrics.enabled", "metrics.bindAddress", "metrics.port"]
    );
    assert_eq!(
        row_keys("| `replicaCount`, `resources` | a | b |"),
        ["replicaCount", "resources"]
    );
    assert_eq!(
        set_keys("helm install x c --set providers={service} --set 'watchNamespace=a' --set x.y=1"),
        ["providers", "watchNamespace", "x.y"]
    );
    let values = values();
    assert!(has(&values, "metrics.port") && !has(&values, "replicas"));
}
