//! What a request can fail with, as an HTML page or a JSON body.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use batchcast_store::StoreError;

/// Why the dashboard could not start or answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UiError {
    /// The store could not be read (missing, foreign, newer, broken).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The request itself is wrong (bad id, unknown metric, too long).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// No page at this address.
    #[error("no page at {0}; start from the experiment list at /")]
    NoPage(String),
    /// The dashboard needs its token, and the request had none (or another).
    #[error("this dashboard needs its token: open the address `batchcast ui` printed (it ends in ?token=…)")]
    Forbidden,
    /// The `Host` header is not a loopback name.
    #[error("refused: Host {0:?} is not this machine; open http://127.0.0.1:PORT/ instead")]
    ForeignHost(String),
    /// The request came from a page of another site (its `Origin`).
    #[error("refused: a page of {0:?} may not read the dashboard")]
    ForeignOrigin(String),
    /// No token was asked for on an address other machines can reach.
    #[error(
        "--no-token is refused on {addr}: every machine that reaches it could read the store; \
         serve on 127.0.0.1 (the default), or keep the token"
    )]
    TokenNeeded {
        /// The address asked for.
        addr: String,
    },
    /// The address could not be bound, or the server failed.
    #[error(
        "cannot serve the dashboard on {addr}: {source}; pass another --port (0 picks a free one)"
    )]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    /// A worker thread failed (a bug; the page says so instead of hanging).
    #[error("internal error: {0}")]
    Internal(String),
}

impl UiError {
    /// The HTTP status this error answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            UiError::Store(StoreError::NotFound { .. }) | UiError::NoPage(_) => {
                StatusCode::NOT_FOUND
            }
            UiError::Store(
                StoreError::Missing { .. }
                | StoreError::NotAStore { .. }
                | StoreError::NewerSchema { .. },
            ) => StatusCode::SERVICE_UNAVAILABLE,
            UiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            UiError::Forbidden => StatusCode::FORBIDDEN,
            UiError::ForeignHost(_) => StatusCode::MISDIRECTED_REQUEST,
            UiError::ForeignOrigin(_) => StatusCode::FORBIDDEN,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// A short title for the error page.
    fn title(&self) -> &'static str {
        match self {
            UiError::Store(StoreError::Missing { .. }) => "No run store",
            UiError::Store(StoreError::NotAStore { .. }) => "Not a batchcast run store",
            UiError::Store(StoreError::NotFound { .. }) | UiError::NoPage(_) => "Not found",
            UiError::BadRequest(_) => "Bad request",
            UiError::Forbidden | UiError::ForeignHost(_) | UiError::ForeignOrigin(_) => "Refused",
            _ => "Error",
        }
    }
}

/// Errors of pages render as an HTML page.
impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let body = crate::html::page(
            self.title(),
            &[],
            &format!(
                "<div class=\"error\"><h2>{}</h2><p>{}</p></div>",
                self.title(),
                crate::html::esc(&self.to_string())
            ),
        );
        (self.status(), axum::response::Html(body)).into_response()
    }
}

/// An error of a JSON or CSV endpoint: `{"error": "..."}`.
#[derive(Debug)]
pub struct ApiError(pub UiError);

impl<E: Into<UiError>> From<E> for ApiError {
    fn from(e: E) -> Self {
        ApiError(e.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.0.to_string() });
        (self.0.status(), axum::Json(body)).into_response()
    }
}
