//! Who may ask: loopback `Host` names when local, the token otherwise.

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, COOKIE, HOST, SET_COOKIE};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::UiError;
use crate::state::AppState;

const COOKIE_NAME: &str = "batchcast_token";

/// Checks every request before its handler runs.
pub(crate) async fn check(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if state.0.loopback_only {
        let host = req
            .headers()
            .get(HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if !is_loopback_host(host) {
            return UiError::ForeignHost(host.chars().take(100).collect()).into_response();
        }
    }
    let Some(token) = state.0.token.as_deref() else {
        return next.run(req).await;
    };
    let from_query = req
        .uri()
        .query()
        .map(|q| {
            form_pairs(q)
                .into_iter()
                .any(|(k, v)| k == "token" && same(&v, token))
        })
        .unwrap_or(false);
    let from_header = req
        .headers()
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .any(|(k, v)| k == COOKIE_NAME && same(v, token))
        || req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|v| same(v, token));
    if !from_query && !from_header {
        return UiError::Forbidden.into_response();
    }
    let mut resp = next.run(req).await;
    if from_query {
        // Later pages and the script's requests carry it as a cookie.
        let cookie = format!("{COOKIE_NAME}={token}; Path=/; HttpOnly; SameSite=Strict");
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            resp.headers_mut().append(SET_COOKIE, v);
        }
    }
    resp
}

/// `localhost`, `127.x.y.z` or `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Compares in time that does not depend on where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The decoded `key=value` pairs of a query string (at most 64).
pub(crate) fn form_pairs(q: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(q.as_bytes())
        .take(64)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names() {
        for ok in [
            "127.0.0.1:8080",
            "localhost:1",
            "LOCALHOST",
            "[::1]:9",
            "127.1.2.3",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.example:80",
            "10.0.0.1:80",
            "",
            "[::2]:1",
            "localhost.evil.com",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn same_compares_whole_strings() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "ab"));
    }
}
