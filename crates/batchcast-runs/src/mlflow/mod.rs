//! MLflow compatibility: a local REST endpoint that records what a script
//! logs with the real `mlflow` client into the run store.
//!
//! The runner starts one [`Endpoint`] for a workload and gives each job
//! `MLFLOW_TRACKING_URI` = [`Endpoint::url`] and `MLFLOW_RUN_ID` =
//! [`mlflow_run_id`] of its run, so that `mlflow.log_metric` and friends
//! record into that run without any change to the script.

mod api;

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::error::{Result, StoreError};
use crate::store::{Recorder, RunId, Store};

/// The MLflow run id that stands for a batchcast run.
pub fn mlflow_run_id(run: RunId) -> String {
    format!("{run:032x}")
}

/// The batchcast run an MLflow run id stands for.
pub fn run_from_mlflow_id(id: &str) -> Option<RunId> {
    if id.len() != 32 {
        return None;
    }
    i64::from_str_radix(id, 16).ok().filter(|r| *r > 0)
}

/// Largest request body accepted (a log-batch of 1000 metrics is ~100 KiB).
const MAX_BODY: u64 = 4 << 20;

/// A running MLflow-compatible endpoint on 127.0.0.1.
pub struct Endpoint {
    url: String,
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").field("url", &self.url).finish()
    }
}

impl Endpoint {
    /// Serves on an ephemeral port of 127.0.0.1, recording into the store
    /// at `store`, until dropped.
    pub fn start(store: &Path) -> Result<Endpoint> {
        let rec = Recorder::start(store)?;
        let ctx = api::Ctx {
            store: Store::open(store)?,
            rec: rec.handle(),
        };
        let server =
            tiny_http::Server::http("127.0.0.1:0").map_err(|e| StoreError::Serve(e.to_string()))?;
        let port = server.server_addr().to_ip().map(|a| a.port()).unwrap_or(0);
        let server = Arc::new(server);
        let thread = {
            let server = server.clone();
            std::thread::Builder::new()
                .name("batchcast-mlflow".into())
                .spawn(move || serve(&server, ctx, rec))
                .map_err(StoreError::Thread)?
        };
        Ok(Endpoint {
            url: format!("http://127.0.0.1:{port}"),
            server,
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`, for `MLFLOW_TRACKING_URI`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for Endpoint {
    /// Stops serving and commits what was logged.
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(server: &tiny_http::Server, mut ctx: api::Ctx, rec: Recorder) {
    for mut request in server.incoming_requests() {
        let (status, body) = answer(&mut ctx, &mut request);
        let response = tiny_http::Response::from_string(body.to_string())
            .with_status_code(status)
            .with_header(
                tiny_http::Header::from_bytes("Content-Type", "application/json")
                    .expect("static header"),
            );
        let _ = request.respond(response);
    }
    drop(ctx);
    let _ = rec.finish();
}

fn answer(ctx: &mut api::Ctx, request: &mut tiny_http::Request) -> api::Reply {
    let url = request.url().to_string();
    let (path, query) = url.split_once('?').unwrap_or((&url, ""));
    let method = request.method().as_str().to_ascii_uppercase();
    let args = if method == "GET" {
        let map: serde_json::Map<String, serde_json::Value> =
            form_urlencoded::parse(query.as_bytes())
                .take(64)
                .map(|(k, v)| (k.into_owned(), serde_json::Value::String(v.into_owned())))
                .collect();
        serde_json::Value::Object(map)
    } else {
        if request.body_length().is_some_and(|n| n as u64 > MAX_BODY) {
            return (
                413,
                serde_json::json!({"error_code": "INVALID_PARAMETER_VALUE", "message": "request body over 4 MiB"}),
            );
        }
        let mut body = Vec::new();
        if request
            .as_reader()
            .take(MAX_BODY + 1)
            .read_to_end(&mut body)
            .is_err()
            || body.len() as u64 > MAX_BODY
        {
            return (
                413,
                serde_json::json!({"error_code": "INVALID_PARAMETER_VALUE", "message": "request body over 4 MiB or unreadable"}),
            );
        }
        if body.iter().all(u8::is_ascii_whitespace) {
            serde_json::json!({})
        } else {
            match serde_json::from_slice(&body) {
                Ok(v @ serde_json::Value::Object(_)) => v,
                _ => {
                    return (
                        400,
                        serde_json::json!({"error_code": "MALFORMED_REQUEST", "message": "the body is not a JSON object"}),
                    )
                }
            }
        }
    };
    api::call(ctx, &method, path, &args)
}
