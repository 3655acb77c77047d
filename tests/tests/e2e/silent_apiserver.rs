//! The controller's own API server stops answering mid-reconcile, the way a frozen kube-apiserver,
//! a load balancer in front of it that dropped the flow or a vanished NAT entry stop it: the
//! connections stay open and nothing comes back, no error either. A TCP proxy of the test's own
//! stands between capi-lb (its client built as `capi-lb run` builds it) and the harness's
//! kube-apiserver; frozen, it forwards nothing on any connection, and the connections it held
//! while frozen stay silent forever after (their other end is gone). Only new connections work
//! once it thaws.
//!
//! The controller runs with one work slot: a reconcile that waited forever on a silent
//! connection, or watches that never noticed theirs had died, would leave the LoadBalancer created
//! during the freeze unreconciled for good.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use capi_lb_api::LoadBalancer;
use capi_lb_tests::k8s::{TestNs, in_memory, load_balancer, wait_ready};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP proxy that can be frozen: see the module's documentation.
struct Proxy {
    address: String,
    frozen: Arc<AtomicBool>,
    /// Connections numbered below this are silent for good.
    cut: Arc<AtomicU64>,
    next: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("https://{}", listener.local_addr().unwrap());
        let frozen = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(AtomicU64::new(0));
        let next = Arc::new(AtomicU64::new(0));
        let (f, c, n) = (frozen.clone(), cut.clone(), next.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let id = n.fetch_add(1, Ordering::SeqCst);
                let (f, c, upstream) = (f.clone(), c.clone(), upstream.clone());
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let silent = move || f.load(Ordering::SeqCst) || id < c.load(Ordering::SeqCst);
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let up = tokio::spawn(pipe(cr, sw, silent.clone()));
                    let down = tokio::spawn(pipe(sr, cw, silent));
                    let _ = tokio::join!(up, down);
                });
            }
        });
        Self {
            address,
            frozen,
            cut,
            next,
            task,
        }
    }

    /// Nothing is forwarded any more, on the connections open now or made until [`Self::thaw`].
    fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// New connections are forwarded again; every connection made before stays silent.
    fn thaw(&self) {
        self.cut
            .store(self.next.load(Ordering::SeqCst), Ordering::SeqCst);
        self.frozen.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copy `from` to `to` until either ends; once `silent` says so, hold both open and forward
/// nothing, for ever (a connection whose other end is gone).
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    silent: impl Fn() -> bool,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        if silent() {
            std::future::pending::<()>().await;
        }
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            // Look at `silent` again now and then while nothing comes.
            _ = tokio::time::sleep(Duration::from_millis(200)) => continue,
        };
        let Ok(n) = read else { return };
        if n == 0 || silent() {
            if n == 0 {
                return;
            }
            std::future::pending::<()>().await;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

#[tokio::test]
async fn an_api_server_that_stops_answering_mid_reconcile_holds_no_slot_and_is_caught_up_with() {
    let mut t = TestNs::new("e2e-silent").await;
    let upstream = t
        .server()
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string();
    let proxy = Proxy::start(upstream).await;
    let mut options = t.options(&["inmemory"]);
    options.concurrency = 1;
    options.provider_timeout = Duration::from_secs(5);
    options.reconcile_timeout = Duration::from_secs(15);
    t.start_via(options, &proxy.address);

    t.create(in_memory("before", json!({}))).await;
    t.create(load_balancer("before", "before", json!({}))).await;
    wait_ready(&t, "before").await;

    // A LoadBalancer whose provider keeps it waiting: its reconciles come back every few seconds,
    // so one is in flight, or starting, when the API server goes silent.
    t.create(in_memory("slow", json!({"provisioningDelaySeconds": 6})))
        .await;
    t.create(load_balancer("slow", "slow", json!({}))).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.freeze();
    let frozen_at = Instant::now();
    // Made while capi-lb hears nothing: only its watches, once they notice their connections died,
    // can bring it.
    t.create(in_memory("during", json!({}))).await;
    t.create(load_balancer("during", "during", json!({}))).await;
    // Longer than the reconcile deadline: the reconcile in flight is abandoned in the meantime.
    tokio::time::sleep(Duration::from_secs(25)).await;
    proxy.thaw();

    // The watches' connections are silent for good: capi-lb notices within its read timeout
    // (no byte for that long on a connection whose watch the API server would have ended),
    // starts them again and reconciles both.
    let bound = capi_lb::run::client::READ_TIMEOUT + Duration::from_secs(60);
    let api = t.api::<LoadBalancer>();
    loop {
        let ready = |name: &'static str| {
            let api = api.clone();
            async move {
                api.get_opt(name)
                    .await
                    .unwrap()
                    .and_then(|lb| lb.status)
                    .is_some_and(|s| s.ready)
            }
        };
        if ready("during").await && ready("slow").await {
            break;
        }
        assert!(
            frozen_at.elapsed() < bound + Duration::from_secs(25),
            "the LoadBalancers made and provisioned while the API server was silent were not \
             reconciled within {bound:?} of its answering again"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "both Ready {:.1} s after the freeze (25 s frozen)",
        frozen_at.elapsed().as_secs_f64()
    );
    t.finish().await;
}
