//! The limits of the metrics and health listeners: every Pod of the cluster may connect to them,
//! so at most [`MAX_CONNECTIONS`] connections are served at a time (the next one waits to be
//! accepted), and each lives at most [`CONNECTION_LIFETIME`] (a client that opens connections and
//! sends nothing, or a byte a second, holds a place for that long, never for ever). The kubelet's
//! probes and Prometheus open a connection per probe or scrape, or reconnect.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::serve::Listener;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

/// Connections served at a time, per listener.
pub const MAX_CONNECTIONS: usize = 128;
/// How long one connection is served.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);

/// A listener of at most [`MAX_CONNECTIONS`] connections, each of at most
/// [`CONNECTION_LIFETIME`].
pub struct Limited<L> {
    inner: L,
    places: Arc<Semaphore>,
    lifetime: Duration,
}

impl<L> Limited<L> {
    /// `inner` within the limits.
    pub fn new(inner: L) -> Self {
        Self::with(inner, MAX_CONNECTIONS, CONNECTION_LIFETIME)
    }

    /// `inner` within `max` connections of `lifetime` each.
    pub fn with(inner: L, max: usize, lifetime: Duration) -> Self {
        Self {
            inner,
            places: Arc::new(Semaphore::new(max.max(1))),
            lifetime,
        }
    }
}

impl<L: Listener> Listener for Limited<L> {
    type Io = Held<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        // The semaphore is never closed: acquiring only waits.
        let place = loop {
            if let Ok(place) = self.places.clone().acquire_owned().await {
                break place;
            }
        };
        let (io, address) = self.inner.accept().await;
        let held = Held {
            io,
            _place: place,
            ends: Box::pin(tokio::time::sleep(self.lifetime)),
        };
        (held, address)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A connection holding its place until it closes or its lifetime ends.
pub struct Held<Io> {
    io: Io,
    _place: OwnedSemaphorePermit,
    ends: Pin<Box<Sleep>>,
}

impl<Io> Held<Io> {
    fn ended(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        self.ends.as_mut().poll(cx).is_ready().then(|| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                "the connection outlived its lifetime",
            )
        })
    }
}

impl<Io: AsyncRead + Unpin> AsyncRead for Held<Io> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(e) = self.ended(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for Held<Io> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(e) = self.ended(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    #[tokio::test]
    async fn silent_connections_hold_a_place_for_their_lifetime_only() {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = tcp.local_addr().unwrap();
        let mut limited = Limited::with(tcp, 2, Duration::from_millis(300));
        // Two clients that send nothing take both places.
        let _silent = (
            TcpStream::connect(address).await.unwrap(),
            TcpStream::connect(address).await.unwrap(),
        );
        let (mut a, _) = limited.accept().await;
        let (_b, _) = limited.accept().await;
        // A third waits for a place...
        let third = TcpStream::connect(address).await.unwrap();
        let waiting = tokio::time::timeout(Duration::from_millis(100), limited.accept()).await;
        assert!(waiting.is_err(), "a third connection was accepted");
        // ...and a held connection fails once its lifetime is over.
        let mut buffer = [0u8; 8];
        let ended = tokio::time::timeout(Duration::from_secs(2), a.read(&mut buffer))
            .await
            .unwrap();
        assert_eq!(ended.unwrap_err().kind(), io::ErrorKind::TimedOut);
        drop(a);
        let (mut c, _) = tokio::time::timeout(Duration::from_secs(1), limited.accept())
            .await
            .unwrap();
        let mut third = third;
        third.write_all(b"ping").await.unwrap();
        let n = c.read(&mut buffer).await.unwrap();
        assert_eq!(&buffer[..n], b"ping");
    }
}
