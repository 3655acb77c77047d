//! Secure metrics on a real apiserver (`--metrics-secure=true`, as the shipped Deployment runs):
//! `/metrics` over HTTPS answers only a bearer token that kube-apiserver authenticates
//! (TokenReview) and authorizes to get `/metrics` (SubjectAccessReview, through the generated
//! `capi-lb-metrics-reader` ClusterRole), with capi-lb running as its own ServiceAccount under the
//! generated RBAC. Without a token, with a made-up one, and with a real ServiceAccount's token that
//! is not bound to the reader role, it is refused (401, 401, 403); `/readyz` stays open for the
//! kubelet; plain HTTP gets no answer. A flood of made-up tokens is answered 429 beyond a burst,
//! costs the API at most the ration's TokenReviews, and does not lock the scraper out.

use capi_lb::install::manifests::METRICS_READER_ROLE;
use capi_lb_tests::k8s::{TestNs, eventually};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

/// `curl` of `url` (certificate not verified: the controller's is self-signed), with `token` as
/// bearer token: (HTTP status, body); status 0 when there was no HTTP answer. Asynchronous: the
/// controller serves on this test's runtime.
async fn get(url: &str, token: Option<&str>) -> (u16, String) {
    let mut command = tokio::process::Command::new("curl");
    command.args(["-sk", "--max-time", "10", "-w", "\n%{http_code}", url]);
    if let Some(token) = token {
        command.args(["-H", &format!("Authorization: Bearer {token}")]);
    }
    let out = command.output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// The TokenReviews the controller has sent so far (its requests, as recorded by the test).
fn token_reviews(t: &TestNs) -> usize {
    t.requests
        .list()
        .iter()
        .filter(|r| r.starts_with("POST /apis/authentication.k8s.io/v1/tokenreviews"))
        .count()
}

async fn token(t: &TestNs, account: &str) -> String {
    let accounts: Api<ServiceAccount> = t.api();
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": account}})).unwrap();
    accounts.create(&PostParams::default(), &sa).await.unwrap();
    capi_lb_tests::k8s::service_account_token(&t.client, &t.ns, account).await
}

#[tokio::test]
async fn secure_metrics_answer_only_a_token_allowed_to_read_them() {
    let mut t = TestNs::new("metrics").await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut options = t.options(&["inmemory"]);
    options.metrics_address = Some(([127, 0, 0, 1], port).into());
    options.metrics_secure = true;
    t.start(options);
    let base = format!("https://127.0.0.1:{port}");

    // A scraper bound to the generated reader role, and an account that is not.
    let reader = token(&t, "scraper").await;
    let nobody = token(&t, "nobody").await;
    let binding_name = format!("capi-lb-e2e-metrics-{}", t.ns);
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": binding_name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": METRICS_READER_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": t.ns}],
    }))
    .unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(t.client.clone());
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    // The probes' routes answer without a token (over HTTPS).
    eventually("/readyz over HTTPS", || async {
        (get(&format!("{base}/readyz"), None).await.0 == 200).then_some(())
    })
    .await;
    // The reader gets the metrics (once the apiserver's authorizer has the binding).
    let body = eventually("the scraper's token reads /metrics", || async {
        let (status, body) = get(&format!("{base}/metrics"), Some(&reader)).await;
        if status != 200 {
            eprintln!("the scraper got {status}: {body}");
        }
        (status == 200).then_some(body)
    })
    .await;
    assert!(body.contains("capi_lb_"), "not capi-lb's metrics: {body}");

    // Everyone else is refused.
    let (status, _) = get(&format!("{base}/metrics"), None).await;
    assert_eq!(status, 401, "no token");
    let (status, _) = get(&format!("{base}/metrics"), Some("not-a-token")).await;
    assert_eq!(status, 401, "a made-up token");
    let (status, body) = get(&format!("{base}/metrics"), Some(&nobody)).await;
    assert_eq!(status, 403, "a token without the reader role: {body}");
    assert!(
        body.contains(&format!("system:serviceaccount:{}:nobody", t.ns)),
        "{body}"
    );

    // A flood of made-up tokens: a burst is reviewed, the rest is refused with 429 without asking
    // the API, and the scraper, known, still reads.
    let before = token_reviews(&t);
    let started = std::time::Instant::now();
    let flood: Vec<_> = (0..100)
        .map(|i| {
            let url = format!("{base}/metrics");
            async move { get(&url, Some(&format!("made-up-{i}"))).await.0 }
        })
        .collect();
    let statuses = futures::future::join_all(flood).await;
    let elapsed = started.elapsed();
    let throttled = statuses.iter().filter(|s| **s == 429).count();
    let refused = statuses.iter().filter(|s| **s == 401).count();
    assert_eq!(throttled + refused, 100, "{statuses:?}");
    let (status, body) = get(&format!("{base}/metrics"), Some(&reader)).await;
    assert_eq!(status, 200, "the scraper during a flood: {body}");
    let reviews = token_reviews(&t) - before;
    // The ration: 20 at once, then 5 a second.
    let allowed = 20 + (elapsed.as_secs_f64() * 5.0).ceil() as usize;
    println!(
        "a flood of 100 made-up tokens in {elapsed:?}: {refused} reviewed and refused (401), {throttled} throttled (429), {reviews} TokenReviews"
    );
    assert!(
        reviews <= allowed,
        "{reviews} TokenReviews, at most {allowed}"
    );
    assert_eq!(reviews, refused, "one review per 401");
    assert!(throttled > 0, "nothing was throttled: {statuses:?}");

    // No plain HTTP.
    let (status, _) = get(&format!("http://127.0.0.1:{port}/metrics"), None).await;
    assert_ne!(status, 200, "plain HTTP answered");

    bindings
        .delete(&binding_name, &DeleteParams::default())
        .await
        .unwrap();
    t.finish().await;
}
