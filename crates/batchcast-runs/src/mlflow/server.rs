//! The endpoint's two threads: one serves HTTP (the toolkit's one stack,
//! `batchcast_store::http`, on a single-threaded runtime), one owns the
//! store and answers the calls it is handed, one at a time.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::thread::JoinHandle;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use batchcast_store::http::BodyError;
use serde_json::{json, Value};

use super::api::{self, Reply};
use super::gate::{self, Keys};
use super::{run_from_mlflow_id, BODY_TIMEOUT, HEAD_TIMEOUT, MAX_BODY, MAX_HEAD, MAX_IN_FLIGHT};
use crate::Recorder;

/// A request read whole: what the store's thread needs to answer it.
struct Call {
    method: String,
    path: String,
    args: Value,
}

/// A call and where its reply goes.
type Job = (Call, tokio::sync::oneshot::Sender<Reply>);

/// What every request's handler shares.
#[derive(Clone)]
struct Shared {
    jobs: mpsc::Sender<Job>,
    keys: Keys,
}

/// Listens on an ephemeral port of 127.0.0.1 and serves until `stop`
/// completes; then the store's thread commits what was logged and the
/// returned thread ends.
pub(super) fn start(
    mut ctx: api::Ctx,
    rec: Recorder,
    keys: Keys,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let listener = {
        let _in_rt = rt.enter();
        tokio::net::TcpListener::from_std(listener)?
    };
    let (jobs, store_side) = mpsc::channel::<Job>();
    let store = std::thread::Builder::new()
        .name("batchcast-mlflow-store".into())
        .spawn(move || {
            for (call, reply) in store_side {
                let _ = reply.send(api::call(&mut ctx, &call.method, &call.path, &call.args));
            }
            drop(ctx);
            let _ = rec.finish();
        })?;
    let app = axum::Router::new()
        .fallback(answer)
        .with_state(Shared { jobs, keys });
    let limits = batchcast_store::http::Limits {
        header_timeout: HEAD_TIMEOUT,
        max_head: MAX_HEAD,
        max_connections: MAX_IN_FLIGHT,
        keep_alive: false,
    };
    let busy = batchcast_store::http::Busy {
        content_type: "application/json",
        body: json!({"error_code": "TEMPORARILY_UNAVAILABLE",
                     "message": format!("more than {MAX_IN_FLIGHT} requests at once")})
        .to_string(),
    };
    let http = std::thread::Builder::new()
        .name("batchcast-mlflow".into())
        .spawn(move || {
            rt.block_on(batchcast_store::http::serve(
                listener, app, limits, busy, stop,
            ));
            // Drops the requests still being read, and with them the last
            // senders of calls: the store's thread then ends.
            drop(rt);
            let _ = store.join();
        })?;
    Ok((addr, http))
}

/// Answers one request: as JSON, with its status.
async fn answer(State(shared): State<Shared>, request: Request) -> Response {
    let (status, body) = reply(&shared, request).await;
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Checks and reads a request, has the store's thread answer it, and lets
/// the caller's secret touch the run it creates.
async fn reply(shared: &Shared, request: Request) -> Reply {
    let token = match gate::admit(request.headers(), &shared.keys) {
        Ok(token) => token,
        Err(reply) => return reply,
    };
    let call = match read_call(request).await {
        Ok(call) => call,
        Err(reply) => return reply,
    };
    if let Err(reply) = gate::allowed(&call.args, &token, &shared.keys) {
        return reply;
    }
    let creates = call.path.ends_with("/runs/create");
    let (tx, rx) = tokio::sync::oneshot::channel();
    let stopping = || {
        (
            503,
            json!({"error_code": "TEMPORARILY_UNAVAILABLE", "message": "the endpoint is stopping"}),
        )
    };
    let reply = match shared.jobs.send((call, tx)) {
        Ok(()) => rx.await.unwrap_or_else(|_| stopping()),
        Err(_) => stopping(),
    };
    if creates && reply.0 == 200 {
        let made = reply.1["run"]["info"]["run_id"].as_str();
        if let Some(run) = made.and_then(run_from_mlflow_id) {
            let _ = gate::grant(&shared.keys, token, run);
        }
    }
    reply
}

/// The method, path and arguments of a request (the query of a GET, the
/// JSON body of the others), or the reply that refuses it.
async fn read_call(request: Request<Body>) -> Result<Call, Reply> {
    let method = request.method().as_str().to_ascii_uppercase();
    let path = request.uri().path().to_owned();
    let args = if method == "GET" {
        let query = request.uri().query().unwrap_or("");
        let map: serde_json::Map<String, Value> = form_urlencoded::parse(query.as_bytes())
            .take(64)
            .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
            .collect();
        Value::Object(map)
    } else {
        let body = batchcast_store::http::read_body(request, MAX_BODY, BODY_TIMEOUT)
            .await
            .map_err(|e| {
                let message = match e {
                    BodyError::Unmeasured => "send the body with a Content-Length",
                    BodyError::TooLarge => "request body over 4 MiB",
                    BodyError::Late => "the body did not come in time",
                };
                (
                    e.status(),
                    json!({"error_code": "INVALID_PARAMETER_VALUE", "message": message}),
                )
            })?;
        if body.iter().all(u8::is_ascii_whitespace) {
            json!({})
        } else {
            match serde_json::from_slice(&body) {
                Ok(v @ Value::Object(_)) => v,
                _ => {
                    return Err((
                        400,
                        json!({"error_code": "MALFORMED_REQUEST", "message": "the body is not a JSON object"}),
                    ))
                }
            }
        }
    };
    Ok(Call { method, path, args })
}
