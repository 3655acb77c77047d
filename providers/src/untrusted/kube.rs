//! A Kubernetes client of a cluster a tenant (or Cluster API, for a tenant's workload cluster)
//! names through a kubeconfig Secret: the kubeconfig held to what [`crate::kubeconfig::check`]
//! allows, kube-client's retry layer left out, and every answer read through [`Bounded`]: whole
//! within [`Limits::answer`] of the request's start, at most [`Limits::bytes`], within the value
//! budget ([`super::budget`]) before anyone parses it.
//!
//! These clients only get, list and write objects: no watch goes through them (a watch's answer
//! never ends, and would fail its deadline).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tower::{BoxError, Layer, Service};

use super::{Limits, Refused, budget};

/// A client of the cluster `text` (a kubeconfig's YAML, from `at`, e.g. `Secret ns/name key
/// value`) describes, within `limits`; the error says what is wrong without quoting the Secret.
pub async fn client(text: &str, at: &str, limits: Limits) -> Result<kube::Client, String> {
    let kubeconfig = Kubeconfig::from_yaml(text)
        .map_err(|_| format!("{at}: not a kubeconfig (YAML with clusters, users, contexts)"))?;
    crate::kubeconfig::check(&kubeconfig).map_err(|why| format!("{at}: {why}"))?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| format!("{at}: unusable kubeconfig: {e}"))?;
    config.connect_timeout = Some(limits.connect);
    config.read_timeout = Some(limits.answer);
    // The read timeout counts from the request's sending, not from when its pooled connection went
    // idle: else a connection handed out near the end of its idle time fails the request early. No
    // watch or exec goes through these clients, so no ping keeps the timeout from firing.
    config.reset_reader_on_write = true;
    config.write_timeout = Some(limits.answer);
    // Sent once: a Retry-After is the tenant server's to choose.
    config.default_retry = false;
    let client = kube::client::ClientBuilder::try_from(config)
        .map_err(|e| format!("{at}: no client: {e}"))?
        .with_layer(&BoundedLayer(limits))
        .build();
    Ok(client)
}

/// The layer of [`Bounded`].
#[derive(Clone, Copy, Debug)]
pub struct BoundedLayer(pub Limits);

impl<S> Layer<S> for BoundedLayer {
    type Service = Bounded<S>;

    fn layer(&self, inner: S) -> Bounded<S> {
        Bounded {
            inner,
            limits: self.0,
        }
    }
}

/// A service whose answers are read whole within the limits, or fail.
#[derive(Clone, Debug)]
pub struct Bounded<S> {
    inner: S,
    limits: Limits,
}

type Answer = Pin<Box<dyn Future<Output = Result<Response<Full<Bytes>>, BoxError>> + Send>>;

impl<S, ReqBody, B> Service<Request<ReqBody>> for Bounded<S>
where
    S: Service<Request<ReqBody>, Response = Response<B>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Full<Bytes>>;
    type Error = BoxError;
    type Future = Answer;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Answer {
        let limits = self.limits;
        let answer = self.inner.call(request);
        Box::pin(async move {
            let whole = async {
                let response = answer.await.map_err(Into::into)?;
                let (parts, body) = response.into_parts();
                let bytes = Limited::new(body, limits.bytes)
                    .collect()
                    .await
                    .map_err(|e| -> BoxError {
                        if e.is::<http_body_util::LengthLimitError>() {
                            Box::new(Refused::TooLarge(limits.bytes))
                        } else {
                            e
                        }
                    })?
                    .to_bytes();
                budget::check(&bytes, &limits).map_err(|r| -> BoxError { Box::new(r) })?;
                Ok(Response::from_parts(parts, Full::new(bytes)))
            };
            match tokio::time::timeout(limits.answer, whole).await {
                Ok(result) => result,
                Err(_) => Err(Box::new(Refused::TimedOut(format!(
                    "no whole answer within {} s",
                    limits.answer.as_secs()
                ))) as BoxError),
            }
        })
    }
}

impl std::error::Error for Refused {}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use std::time::Duration;

    use super::*;

    const LIMITS: Limits = Limits {
        connect: Duration::from_secs(1),
        answer: Duration::from_millis(300),
        bytes: 1024,
        values: 50,
    };

    /// Ask a server answering with `body` in chunks of `chunk` bytes, `pause` apart, through
    /// [`Bounded`].
    async fn ask(body: &[u8], chunk: usize, pause: Duration) -> Result<Bytes, String> {
        use futures::StreamExt;
        use tower::ServiceExt;
        let chunks: Vec<Bytes> = body.chunks(chunk).map(Bytes::copy_from_slice).collect();
        let server = tower::service_fn(move |_: Request<()>| {
            let chunks = chunks.clone();
            async move {
                let stream = futures::stream::iter(chunks).then(move |c| async move {
                    tokio::time::sleep(pause).await;
                    Ok::<_, std::io::Error>(http_body::Frame::data(c))
                });
                Ok::<_, BoxError>(Response::new(http_body_util::StreamBody::new(
                    stream.boxed(),
                )))
            }
        });
        let service = BoundedLayer(LIMITS).layer(server);
        match service.oneshot(Request::new(())).await {
            Ok(response) => Ok(response.into_body().collect().await.unwrap().to_bytes()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[tokio::test]
    async fn a_small_answer_passes_whole() {
        let body = br#"{"kind":"Service","metadata":{"name":"a"}}"#;
        assert_eq!(ask(body, 8, Duration::ZERO).await.unwrap(), &body[..]);
    }

    #[tokio::test]
    async fn a_trickle_fails_its_deadline_though_every_byte_comes_in_time() {
        let body = vec![b' '; 100];
        let why = ask(&body, 1, Duration::from_millis(20)).await.unwrap_err();
        assert!(why.contains("no whole answer within"), "{why}");
    }

    #[tokio::test]
    async fn a_large_or_complex_answer_is_refused() {
        let big = vec![b' '; 4096];
        let why = ask(&big, 512, Duration::ZERO).await.unwrap_err();
        assert!(why.contains("larger than 1 KiB"), "{why}");
        let many = format!("[{}0]", "0,".repeat(100));
        let why = ask(many.as_bytes(), 64, Duration::ZERO).await.unwrap_err();
        assert!(why.contains("more than 50 JSON values"), "{why}");
    }
}
