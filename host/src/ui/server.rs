//! The HTTP listener of `coordhost run --ui HOST:PORT`: three read-only GET
//! routes (`/`, `/api/job`, `/metrics`) over one [`LiveJob`], served by
//! axum (already in the build through tonic) on a thread of its own with a
//! one-thread tokio runtime, so the job's own threads never wait on a
//! client. Nothing else is served: no file, no path taken from a request;
//! another path is 404, another method 405.
//!
//! Connections are capped and closed when idle (`guard`): a client that
//! opens many idle connections or stalls mid-request cannot hold it.
//!
//! It binds loopback only unless the caller allows more (`--ui-public`):
//! the page shows the job's names and errors to whoever reaches it, and it
//! has no authentication.

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::Arc;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::live::LiveJob;

/// Why the listener was not started.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    /// The address is not `HOST:PORT` or names no address.
    #[error("--ui `{addr}`: not HOST:PORT ({reason})")]
    Address {
        /// The address as given.
        addr: String,
        /// Why it does not resolve.
        reason: String,
    },
    /// The address is not a loopback one and `public` was not asked for.
    #[error(
        "--ui `{addr}`: {ip} is not a loopback address; the page has no authentication, so serving it beyond this machine takes --ui-public"
    )]
    NotLoopback {
        /// The address as given.
        addr: String,
        /// The address it resolved to.
        ip: std::net::IpAddr,
    },
    /// Binding failed (in use, not permitted, no such interface).
    #[error("--ui `{addr}`: cannot listen: {source}")]
    Bind {
        /// The address as given.
        addr: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The server's thread or runtime could not start.
    #[error("--ui: cannot start the server: {0}")]
    Start(std::io::Error),
}

/// A started listener: where it listens. It serves until the process ends.
#[derive(Debug)]
pub struct UiServer {
    addr: SocketAddr,
}

impl UiServer {
    /// The bound address (with the port the system chose for port 0).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Resolves `addr` (`HOST:PORT`; every address it resolves to must be
/// loopback unless `public`), binds it, and serves `live` on a thread of
/// its own until the process exits.
///
/// # Errors
/// [`UiError`]: a bad or non-loopback address, a failed bind, a thread or
/// runtime that did not start.
pub fn serve(addr: &str, public: bool, live: Arc<LiveJob>) -> Result<UiServer, UiError> {
    let resolved: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| UiError::Address {
            addr: addr.to_owned(),
            reason: e.to_string(),
        })?
        .collect();
    let Some(first) = resolved.first().copied() else {
        return Err(UiError::Address {
            addr: addr.to_owned(),
            reason: "it resolves to no address".to_owned(),
        });
    };
    if !public && let Some(outside) = resolved.iter().find(|a| !a.ip().is_loopback()) {
        return Err(UiError::NotLoopback {
            addr: addr.to_owned(),
            ip: outside.ip(),
        });
    }
    let listener = TcpListener::bind(first).map_err(|source| UiError::Bind {
        addr: addr.to_owned(),
        source,
    })?;
    let bound = listener.local_addr().map_err(|source| UiError::Bind {
        addr: addr.to_owned(),
        source,
    })?;
    listener.set_nonblocking(true).map_err(UiError::Start)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(UiError::Start)?;
    std::thread::Builder::new()
        .name("coordhost-ui".to_owned())
        .spawn(move || {
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => super::guard::GuardedListener::new(l),
                    Err(e) => {
                        tracing::warn!("--ui: the listener stopped: {e}");
                        return;
                    }
                };
                if let Err(e) = axum::serve(listener, router(live)).await {
                    tracing::warn!("--ui: the listener stopped: {e}");
                }
            });
        })
        .map_err(UiError::Start)?;
    Ok(UiServer { addr: bound })
}

/// The routes: `/`, `/api/job`, `/metrics`; 404 for any other path.
fn router(live: Arc<LiveJob>) -> Router {
    let page = {
        let live = live.clone();
        move || {
            let live = live.clone();
            async move {
                let html = super::page::render(&live.snapshot());
                (
                    [
                        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                        (header::CACHE_CONTROL, "no-store"),
                    ],
                    html,
                )
                    .into_response()
            }
        }
    };
    let api = {
        let live = live.clone();
        move || {
            let live = live.clone();
            async move { json(&live.snapshot()) }
        }
    };
    let metrics = move || {
        let live = live.clone();
        async move {
            match super::metrics::render(&live) {
                Ok(text) => {
                    ([(header::CONTENT_TYPE, super::metrics::CONTENT_TYPE)], text).into_response()
                }
                Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            }
        }
    };
    Router::new()
        .route("/", get(page))
        .route("/api/job", get(api))
        .route("/metrics", get(metrics))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                "not found: GET /, /api/job or /metrics\n",
            )
        })
}

fn json(view: &super::view::JobView) -> Response {
    match serde_json::to_string_pretty(view) {
        Ok(body) => (
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            body,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}
