//! The pages' own script and style sheet, embedded at build time.

use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::IntoResponse;

use crate::error::UiError;

const FILES: &[(&str, &str, &str)] = &[
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/app.js"),
    ),
    (
        "chart.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/chart.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../assets/style.css"),
    ),
];

pub(crate) async fn get(Path(name): Path<String>) -> Result<impl IntoResponse, UiError> {
    let (_, ty, body) = FILES.iter().find(|(n, _, _)| *n == name).ok_or_else(|| {
        UiError::NoPage(format!(
            "/static/{}",
            name.chars().take(40).collect::<String>()
        ))
    })?;
    Ok(([(CONTENT_TYPE, *ty), (CACHE_CONTROL, "no-cache")], *body))
}
