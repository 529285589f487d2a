//! Binding the address and serving the routes.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;

use crate::error::UiError;
use crate::state::{AppState, Shared};

/// How long a client may take to send a request's headers (hyper's
/// default is 30 s; a browser sends them at once): a connection that has
/// not sent them by then is closed, before any token is looked at.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; one past it is answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 512;
/// Bytes of a request's head, at most (hyper's smallest buffer is 8 KiB).
const MAX_HEAD: usize = 64 * 1024;

/// What `batchcast ui` was asked for.
#[derive(Clone, Debug)]
pub struct UiConfig {
    /// The run store to show.
    pub store: PathBuf,
    /// The address to listen on (127.0.0.1 unless the user says otherwise).
    pub host: IpAddr,
    /// The port (0 picks a free one).
    pub port: u16,
    /// Whether every request must carry a random token (the default). Off
    /// (`--no-token`) only on a loopback address: then any local user may
    /// read the store.
    pub token: bool,
    /// See [`HEADER_TIMEOUT`].
    pub header_timeout: Duration,
    /// See [`MAX_CONNECTIONS`].
    pub max_connections: usize,
}

impl UiConfig {
    /// Local only, on `port`, with a token.
    pub fn local(store: impl Into<PathBuf>, port: u16) -> UiConfig {
        UiConfig {
            store: store.into(),
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port,
            token: true,
            header_timeout: HEADER_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
        }
    }
}

/// A dashboard bound to its address, ready to serve.
pub struct Ui {
    listener: std::net::TcpListener,
    addr: SocketAddr,
    state: AppState,
    header_timeout: Duration,
    max_connections: usize,
}

impl Ui {
    /// Binds the address, with a random token that every request must
    /// carry unless `config.token` is off (refused off loopback). The store
    /// is not opened here: each request opens it, so a store written later,
    /// or replaced, is seen.
    pub fn bind(config: &UiConfig) -> Result<Ui, UiError> {
        let want = SocketAddr::new(config.host, config.port);
        let local = config.host.is_loopback();
        if !config.token && !local {
            return Err(UiError::TokenNeeded {
                addr: want.to_string(),
            });
        }
        let bind_err = |source| UiError::Bind {
            addr: want.to_string(),
            source,
        };
        let listener = std::net::TcpListener::bind(want).map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let addr = listener.local_addr().map_err(bind_err)?;
        let token = if config.token {
            Some(batchcast_store::access::random_token().map_err(bind_err)?)
        } else {
            None
        };
        let state = AppState(Arc::new(Shared {
            store: config.store.clone(),
            token,
            cookie: format!("batchcast_token_{}", addr.port()),
            loopback_only: local,
        }));
        Ok(Ui {
            listener,
            addr,
            state,
            header_timeout: config.header_timeout,
            max_connections: config.max_connections.max(1),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The token requests need (`None` with `--no-token`).
    pub fn token(&self) -> Option<&str> {
        self.state.0.token.as_deref()
    }

    /// The address to open in a browser (with the token when one is needed).
    pub fn url(&self) -> String {
        let host = match self.addr.ip() {
            IpAddr::V6(ip) => format!("[{ip}]"),
            IpAddr::V4(ip) => ip.to_string(),
        };
        match self.token() {
            Some(t) => format!("http://{host}:{}/?token={t}", self.addr.port()),
            None => format!("http://{host}:{}/", self.addr.port()),
        }
    }

    /// Serves until the process ends (or the server fails).
    pub fn run(self) -> Result<(), UiError> {
        let addr = self.addr.to_string();
        let io = |source| UiError::Bind {
            addr: addr.clone(),
            source,
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(8)
            .enable_all()
            .build()
            .map_err(io)?;
        rt.block_on(async {
            let listener = tokio::net::TcpListener::from_std(self.listener).map_err(io)?;
            let limits = batchcast_store::http::Limits {
                header_timeout: self.header_timeout,
                max_head: MAX_HEAD,
                max_connections: self.max_connections,
                keep_alive: true,
            };
            let busy = batchcast_store::http::Busy {
                content_type: "text/plain",
                body: "too many connections to the dashboard; try again\n".into(),
            };
            batchcast_store::http::serve(
                listener,
                router(self.state),
                limits,
                busy,
                std::future::pending(),
            )
            .await;
            Ok(())
        })
    }
}

fn router(state: AppState) -> Router {
    use crate::{api, assets, pages};
    Router::new()
        .route("/", get(pages::experiments::index))
        .route("/experiments/{id}", get(pages::experiment::show))
        .route(
            "/experiments/{id}/collocation",
            get(pages::by_id::<pages::collocation::CollocationPage>),
        )
        .route(
            "/workloads/{id}",
            get(pages::by_id::<pages::workload::WorkloadPage>),
        )
        .route("/runs/{id}", get(pages::by_id::<pages::run::RunPage>))
        .route("/compare", get(pages::compare::show))
        .route("/runs/{id}/log/{stream}", get(api::log))
        .route("/api/series", get(api::series))
        .route("/api/csv", get(api::csv))
        .route("/api/runs", get(api::runs))
        .route("/static/{name}", get(assets::get))
        .fallback(|uri: axum::http::Uri| async move {
            UiError::NoPage(uri.path().chars().take(100).collect())
        })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::guard::check,
        ))
        .with_state(state)
}
