//! Counting the controller's Kubernetes API requests: a tower layer on the client that records each
//! request by verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
//! `deletecollection`), resource (plural, with `/subresource`; `discovery` for discovery paths) and
//! HTTP status class, into `capi_lb_kube_requests_total`; and whether the API answers at all
//! ([`Reach`], for `/readyz`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::Labels;

/// The verb and resource of a Kubernetes API request (`GET /api/v1/namespaces/a/services/b` is
/// `get` `services`).
pub fn classify(method: &http::Method, uri: &http::Uri) -> (&'static str, String) {
    let path = uri.path().trim_matches('/');
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    // `/api/v1/...` or `/apis/<group>/<version>/...`.
    let rest: &[&str] = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[],
    };
    let (resource, tail): (&str, &[&str]) = match rest {
        [] => ("discovery", &[]),
        ["namespaces", _ns, resource, tail @ ..] => (resource, tail),
        ["namespaces", tail @ ..] => ("namespaces", tail),
        [resource, tail @ ..] => (resource, tail),
    };
    let resource = match tail {
        [_name, sub, ..] => format!("{resource}/{sub}"),
        _ => resource.to_string(),
    };
    let named = !tail.is_empty();
    let watch = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let verb = match *method {
        http::Method::GET if watch => "watch",
        http::Method::GET if named || resource == "discovery" => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if named => "delete",
        http::Method::DELETE => "deletecollection",
        _ => "other",
    };
    (verb, resource)
}

/// True for the verbs that change something.
pub fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

/// Whether the Kubernetes API answers: since when every request has gone unanswered (no
/// connection, a timeout, or 503/504 from an apiserver that cannot reach etcd), if they have.
/// Any other answer, an error status included, is an answer.
#[derive(Debug, Default)]
pub struct Reach {
    failing_since: Mutex<Option<Instant>>,
}

impl Reach {
    fn record(&self, answered: bool, now: Instant) {
        let mut since = self
            .failing_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if answered {
            *since = None;
        } else if since.is_none() {
            *since = Some(now);
        }
    }

    /// How long the API has gone unanswered, if it has.
    pub fn unanswered_for(&self, now: Instant) -> Option<Duration> {
        self.failing_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map(|since| now.saturating_duration_since(since))
    }
}

/// The layer that counts requests into a metric family and records whether they were answered.
#[derive(Clone, Debug)]
pub struct CountRequests {
    pub(super) requests: Family<Labels, Counter>,
    pub(super) reach: Arc<Reach>,
}

impl<S> tower::Layer<S> for CountRequests {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Counted {
            inner,
            requests: self.requests.clone(),
            reach: self.reach.clone(),
        }
    }
}

/// A client service whose requests are counted.
#[derive(Clone, Debug)]
pub struct Counted<S> {
    inner: S,
    requests: Family<Labels, Counter>,
    reach: Arc<Reach>,
}

impl<S, B> tower::Service<http::Request<kube::client::Body>> for Counted<S>
where
    S: tower::Service<http::Request<kube::client::Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let (verb, resource) = classify(request.method(), request.uri());
        let requests = self.requests.clone();
        let reach = self.reach.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await;
            let code = match &response {
                Ok(r) => format!("{}xx", r.status().as_u16() / 100),
                Err(_) => "none".to_string(),
            };
            let answered = response.as_ref().is_ok_and(|r| {
                !matches!(
                    r.status(),
                    http::StatusCode::SERVICE_UNAVAILABLE | http::StatusCode::GATEWAY_TIMEOUT
                )
            });
            reach.record(answered, Instant::now());
            requests
                .get_or_create(&vec![
                    ("verb", verb.to_string()),
                    ("resource", resource),
                    ("code", code),
                ])
                .inc();
            response
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_api_is_unanswered_from_the_first_failure_until_an_answer() {
        let reach = Reach::default();
        let t0 = Instant::now();
        assert_eq!(reach.unanswered_for(t0), None);
        reach.record(false, t0);
        reach.record(false, t0 + Duration::from_secs(5));
        assert_eq!(
            reach.unanswered_for(t0 + Duration::from_secs(12)),
            Some(Duration::from_secs(12)),
            "counted from the first failure"
        );
        reach.record(true, t0 + Duration::from_secs(13));
        assert_eq!(reach.unanswered_for(t0 + Duration::from_secs(14)), None);
    }

    fn of(method: &str, uri: &str) -> (&'static str, String) {
        classify(&method.parse().unwrap(), &uri.parse().unwrap())
    }

    #[test]
    fn requests_are_classified_by_verb_and_resource() {
        assert_eq!(
            of("GET", "/api/v1/namespaces/a/services/b"),
            ("get", "services".into())
        );
        assert_eq!(
            of("GET", "/api/v1/namespaces/a/services?labelSelector=x"),
            ("list", "services".into())
        );
        assert_eq!(
            of(
                "GET",
                "/apis/loadbalancer.cluster.x-k8s.io/v1alpha1/loadbalancers?watch=true&resourceVersion=5"
            ),
            ("watch", "loadbalancers".into())
        );
        assert_eq!(
            of(
                "PATCH",
                "/apis/loadbalancer.cluster.x-k8s.io/v1alpha1/namespaces/a/loadbalancers/x/status?fieldManager=capi-lb"
            ),
            ("patch", "loadbalancers/status".into())
        );
        assert_eq!(
            of("POST", "/apis/events.k8s.io/v1/namespaces/a/events"),
            ("create", "events".into())
        );
        assert_eq!(
            of("GET", "/api/v1/namespaces/a"),
            ("get", "namespaces".into())
        );
        assert_eq!(
            of("GET", "/api/v1/namespaces"),
            ("list", "namespaces".into())
        );
        assert_eq!(
            of("GET", "/apis/cluster.x-k8s.io/v1beta2"),
            ("get", "discovery".into())
        );
        assert_eq!(of("GET", "/apis"), ("get", "discovery".into()));
        assert_eq!(
            of("DELETE", "/api/v1/namespaces/a/services/b"),
            ("delete", "services".into())
        );
        assert!(is_write("patch") && !is_write("watch") && !is_write("list"));
    }
}
