//! What keeps one client from holding the `--ui` listener (docs/ui.md,
//! "Security"): at most [`MAX_CONNECTIONS`] open connections, and none
//! idle for longer than [`IDLE_TIMEOUT`].
//!
//! - **Idle timeout.** A connection that neither sends nor takes a byte
//!   for [`IDLE_TIMEOUT`] (a keep-alive connection nobody uses, a request
//!   that stalls halfway, a response its client stops reading) fails its
//!   next read or write and is closed.
//! - **Cap.** When a connection arrives while [`MAX_CONNECTIONS`] are
//!   open, the one that has been quiet the longest is closed to make room,
//!   so a client that opens many idle connections pushes out its own
//!   oldest ones, and a new request is always accepted and answered at
//!   once (refusing or queueing the newcomer would let the flood win).
//!
//! It wraps the tokio listener as an axum [`Listener`]; every accepted
//! stream is a [`GuardedStream`] that counts its activity.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use axum::serve::Listener;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;

/// Open connections at most; the quietest goes when one more arrives.
pub const MAX_CONNECTIONS: usize = 32;

/// A connection without a byte either way for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// One open connection, as the listener sees it.
#[derive(Debug)]
struct Conn {
    /// Milliseconds since the listener's start at the last byte moved.
    last_active_ms: AtomicU64,
    /// Set to close it (room for a newer connection).
    evicted: AtomicBool,
    /// Woken when evicted, so a connection waiting for bytes notices.
    waker: Mutex<Option<Waker>>,
}

impl Conn {
    fn evict(&self) {
        self.evicted.store(true, Ordering::SeqCst);
        let waker = self
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The `--ui` listener with the cap and the idle timeout.
#[derive(Debug)]
pub struct GuardedListener {
    inner: TcpListener,
    started: Instant,
    open: Vec<Weak<Conn>>,
}

impl GuardedListener {
    /// Guards `inner`.
    #[must_use]
    pub fn new(inner: TcpListener) -> Self {
        Self {
            inner,
            started: Instant::now(),
            open: Vec::new(),
        }
    }

    /// Forgets closed connections and, at the cap, evicts the quietest.
    fn make_room(&mut self) {
        self.open.retain(|c| c.strong_count() > 0);
        while self.open.len() >= MAX_CONNECTIONS {
            let quietest = self
                .open
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.upgrade().map(|c| (i, c)))
                .min_by_key(|(_, c)| c.last_active_ms.load(Ordering::Relaxed));
            let Some((i, conn)) = quietest else {
                self.open.clear();
                break;
            };
            conn.evict();
            self.open.swap_remove(i);
        }
    }
}

impl Listener for GuardedListener {
    type Io = GuardedStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    self.make_room();
                    let conn = Arc::new(Conn {
                        last_active_ms: AtomicU64::new(ms_since(self.started)),
                        evicted: AtomicBool::new(false),
                        waker: Mutex::new(None),
                    });
                    self.open.push(Arc::downgrade(&conn));
                    let io = GuardedStream {
                        inner: stream,
                        conn,
                        started: self.started,
                        idle: Box::pin(tokio::time::sleep(IDLE_TIMEOUT)),
                    };
                    return (io, addr);
                }
                // Out of file descriptors, a connection reset before it
                // was taken: wait a little and go on (as axum does).
                Err(e) => {
                    tracing::debug!("--ui: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

fn ms_since(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// An accepted connection: the TCP stream, failing once it was idle for
/// [`IDLE_TIMEOUT`] or evicted by a newer one.
#[derive(Debug)]
pub struct GuardedStream {
    inner: TcpStream,
    conn: Arc<Conn>,
    started: Instant,
    idle: Pin<Box<Sleep>>,
}

impl GuardedStream {
    /// Bytes moved: the idle clock starts again.
    fn active(&mut self) {
        self.conn
            .last_active_ms
            .store(ms_since(self.started), Ordering::Relaxed);
        self.idle
            .as_mut()
            .reset(tokio::time::Instant::now() + IDLE_TIMEOUT);
    }

    /// Why the connection must end now, if it must: evicted, or idle past
    /// the timeout (which then wakes this task when it passes).
    fn must_end(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        *self
            .conn
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
        if self.conn.evicted.load(Ordering::SeqCst) {
            return Some(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed to make room for a newer connection",
            ));
        }
        if self.idle.as_mut().poll(cx).is_ready() {
            return Some(io::Error::new(
                io::ErrorKind::TimedOut,
                "idle past the timeout",
            ));
        }
        None
    }
}

impl AsyncRead for GuardedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.conn.evicted.load(Ordering::SeqCst) {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed to make room for a newer connection",
            )));
        }
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.active();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match self.must_end(cx) {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
        }
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, data) {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.active();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match self.must_end(cx) {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
