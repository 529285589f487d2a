//! Who may ask: a `Host` (and `Origin`) of this machine when local, and the
//! token unless it was turned off. The rules are `batchcast_store::access`.

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, COOKIE, HOST, ORIGIN, SET_COOKIE};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use batchcast_store::access::{is_loopback_host, is_loopback_origin, same_secret};

use crate::error::UiError;
use crate::state::AppState;

/// Checks every request before its handler runs.
pub(crate) async fn check(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let shown = |v: &str| v.chars().take(100).collect::<String>();
    if state.0.loopback_only {
        let host = req
            .headers()
            .get(HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if !is_loopback_host(host) {
            return UiError::ForeignHost(shown(host)).into_response();
        }
        if let Some(origin) = req.headers().get(ORIGIN) {
            let origin = origin.to_str().unwrap_or("");
            if !is_loopback_origin(origin) {
                return UiError::ForeignOrigin(shown(origin)).into_response();
            }
        }
    }
    let Some(token) = state.0.token.as_deref() else {
        return next.run(req).await;
    };
    let cookie_name = state.0.cookie.as_str();
    let from_query = req
        .uri()
        .query()
        .map(|q| {
            form_pairs(q)
                .into_iter()
                .any(|(k, v)| k == "token" && same_secret(&v, token))
        })
        .unwrap_or(false);
    let from_header = req
        .headers()
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .any(|(k, v)| k == cookie_name && same_secret(v, token))
        || req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|v| same_secret(v, token));
    if !from_query && !from_header {
        return UiError::Forbidden.into_response();
    }
    let mut resp = next.run(req).await;
    if from_query {
        // Later pages and the script's requests carry it as a cookie that
        // no script can read and no other site's page sends.
        let cookie = format!("{cookie_name}={token}; Path=/; HttpOnly; SameSite=Strict");
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            resp.headers_mut().append(SET_COOKIE, v);
        }
    }
    resp
}

/// The decoded `key=value` pairs of a query string (at most 64).
pub(crate) fn form_pairs(q: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(q.as_bytes())
        .take(64)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}
