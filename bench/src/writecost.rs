//! What one write costs the apiserver, by method: the same change written to N LoadBalancers K
//! times with a JSON merge patch, then with server-side apply, once to the metadata (an annotation,
//! as capi-lb writes to Machines) and once to the status subresource; kube-apiserver's and etcd's
//! CPU per write from `/proc` (the harness's pid files), each method in its own window.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use capi_lb_api::LoadBalancer;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::capi::cpu;
use crate::launch::{BenchError, api_err, client_of, fresh_namespace, install};

/// What to run.
pub struct Options {
    /// The cluster (its admin kubeconfig, beside the harness's pid files).
    pub launch: crate::launch::Launch,
    /// LoadBalancers written to.
    pub objects: usize,
    /// Writes per method and target.
    pub writes: usize,
    /// Writes in flight.
    pub parallel: usize,
}

/// One method on one target, measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Cost {
    /// `merge patch` or `server-side apply`, on `metadata` or `status`.
    pub what: String,
    /// Writes made.
    pub writes: usize,
    /// Wall time of the window.
    pub seconds: f64,
    /// CPU seconds used in the window, per component.
    pub cpu: BTreeMap<String, f64>,
}

impl Cost {
    /// CPU milliseconds per write of `component`.
    pub fn per_write_ms(&self, component: &str) -> Option<f64> {
        let seconds = self.cpu.get(component)?;
        (self.writes > 0).then(|| seconds * 1000.0 / self.writes as f64)
    }
}

/// The body of write `i` on `target` (`metadata` or `status`) for `name`.
fn body(target: &str, i: usize, apply: bool) -> Value {
    let mut body = match target {
        "status" => json!({"status": {"readyTargets": format!("{i}/{i}")}}),
        _ => json!({"metadata": {"annotations": {"bench.capi-lb.dev/write": i.to_string()}}}),
    };
    if apply {
        body["apiVersion"] = json!("loadbalancer.cluster.x-k8s.io/v1alpha1");
        body["kind"] = json!("LoadBalancer");
    }
    body
}

/// Run every method on every target; the namespace is deleted after.
pub async fn run(options: &Options) -> Result<Vec<Cost>, BenchError> {
    let (client, _) = client_of(&options.launch.kubeconfig).await?;
    install(&client, &options.launch).await?;
    let state: PathBuf = options
        .launch
        .kubeconfig
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    let ns = fresh_namespace(&client, "capi-lb-bench-writes").await?;
    let lbs: Api<LoadBalancer> = Api::namespaced(client.clone(), &ns);
    let names: Vec<String> = (0..options.objects).map(|i| format!("lb-{i:05}")).collect();
    for name in &names {
        let lb: LoadBalancer = serde_json::from_value(json!({
            "apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
            "metadata": {"name": name},
            "spec": {"ports": [{"name": "https", "port": 6443}],
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                           "kind": "InMemoryLoadBalancer", "name": name}},
        }))
        .map_err(|e| BenchError::Setup(format!("a LoadBalancer: {e}")))?;
        lbs.create(&PostParams::default(), &lb)
            .await
            .map_err(api_err(format!("create LoadBalancer {name}")))?;
    }
    let ticks = cpu::clock_ticks();
    let mut costs = Vec::new();
    let mut round = 0;
    for target in ["metadata", "status"] {
        for apply in [false, true] {
            let before = cpu::sample(&state, ticks);
            let started = Instant::now();
            let writes = (0..options.writes).flat_map(|_| names.iter()).map(|name| {
                round += 1;
                let (lbs, name, i) = (lbs.clone(), name.clone(), round);
                async move {
                    let params = if apply {
                        PatchParams::apply("capi-lb-bench").force()
                    } else {
                        PatchParams::default()
                    };
                    let value = body(target, i, apply);
                    let patch = if apply {
                        Patch::Apply(&value)
                    } else {
                        Patch::Merge(&value)
                    };
                    let result = if target == "status" {
                        lbs.patch_status(&name, &params, &patch).await
                    } else {
                        lbs.patch(&name, &params, &patch).await
                    };
                    result.map(|_| ()).map_err(api_err(format!("patch {name}")))
                }
            });
            let results: Vec<Result<(), BenchError>> = futures::stream::iter(writes)
                .buffer_unordered(options.parallel.max(1))
                .collect()
                .await;
            let seconds = started.elapsed().as_secs_f64();
            // Let the apiserver's and etcd's work for the last writes finish inside the window.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let after = cpu::sample(&state, ticks);
            let failed = results.iter().filter(|r| r.is_err()).count();
            if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
                return Err(BenchError::Setup(format!(
                    "{failed} writes failed, e.g. {e}"
                )));
            }
            costs.push(Cost {
                what: format!(
                    "{} on {target}",
                    if apply {
                        "server-side apply"
                    } else {
                        "merge patch"
                    }
                ),
                writes: options.writes * names.len(),
                seconds,
                cpu: cpu::since(&after, &before),
            });
        }
    }
    let namespaces: Api<Namespace> = Api::all(client);
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    Ok(costs)
}

/// The figures as a table.
pub fn render(costs: &[Cost]) -> String {
    let mut out = String::from(
        "| write | writes | seconds | kube-apiserver CPU ms / write | etcd CPU ms / write |\n|---|---:|---:|---:|---:|\n",
    );
    for c in costs {
        let ms = |component| {
            c.per_write_ms(component)
                .map_or("-".to_string(), |v| format!("{v:.2}"))
        };
        out.push_str(&format!(
            "| {} | {} | {:.1} | {} | {} |\n",
            c.what,
            c.writes,
            c.seconds,
            ms("kube-apiserver"),
            ms("etcd")
        ));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn the_cost_per_write_is_the_cpu_over_the_writes() {
        let cost = Cost {
            what: "merge patch on status".into(),
            writes: 400,
            seconds: 2.0,
            cpu: [("kube-apiserver".to_string(), 1.2)].into(),
        };
        assert_eq!(cost.per_write_ms("kube-apiserver"), Some(3.0));
        assert_eq!(cost.per_write_ms("etcd"), None);
        assert!(render(&[cost]).contains("| merge patch on status | 400 | 2.0 | 3.00 | - |"));
    }

    #[test]
    fn an_apply_body_names_its_kind_and_a_merge_patch_does_not() {
        let apply = body("status", 3, true);
        assert_eq!(apply["kind"], "LoadBalancer");
        assert_eq!(apply["status"]["readyTargets"], "3/3");
        let merge = body("metadata", 4, false);
        assert!(merge.get("kind").is_none());
        assert_eq!(
            merge["metadata"]["annotations"]["bench.capi-lb.dev/write"],
            "4"
        );
    }
}
