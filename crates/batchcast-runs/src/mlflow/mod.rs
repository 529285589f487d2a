//! MLflow compatibility: a local REST endpoint that records what a script
//! logs with the real `mlflow` client into the run store.
//!
//! The runner starts one [`Endpoint`] for a workload and gives each job
//! `MLFLOW_TRACKING_URI` = [`Endpoint::url`], `MLFLOW_RUN_ID` =
//! [`mlflow_run_id`] of its run and `MLFLOW_TRACKING_TOKEN` =
//! [`Endpoint::token_for`] its run, so that `mlflow.log_metric` and friends
//! record into that run without any change to the script.
//!
//! Nobody else gets in: every request must carry a job's secret
//! (`Authorization: Bearer`, which the `mlflow` client sends from
//! `MLFLOW_TRACKING_TOKEN`), may touch only that job's run and the runs
//! made with the same secret, and must name this machine in its `Host` (and
//! `Origin`, when a browser sends one); see [`crate::access`]. So neither
//! another local user nor a web page the user visits can write the store.
//!
//! One thread owns the store and answers calls one at a time; each request
//! is read, and answered, on a thread of its own. So a client that stops in
//! the middle of a request (a trainer paused with SIGSTOP, a debugger) holds
//! up only its own request, never the others' logging; at most
//! [`MAX_IN_FLIGHT`] requests are read at once. Its HTTP is read within
//! bounds (a head of 16 KiB sent within 10 s, a body of 4 MiB within 30 s;
//! one request per connection): a client can hold a thread for that long,
//! and no more memory than that.

mod api;

mod http;

use std::collections::{HashMap, HashSet};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;

use serde_json::Value;

use crate::access;
use crate::{Recorder, RunId, Store};
use crate::{Result, StoreError};

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

/// Connections served at once (one request each, on a thread of its own);
/// more are answered 503 at once.
pub const MAX_IN_FLIGHT: usize = 64;

/// The secrets this endpoint has given out, each with the runs it may
/// touch: the run it was made for, and those made with it (`runs/create`).
type Keys = Arc<Mutex<HashMap<String, HashSet<RunId>>>>;

/// A running MLflow-compatible endpoint on 127.0.0.1.
pub struct Endpoint {
    url: String,
    keys: Keys,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
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
        let serve_err = |e: std::io::Error| {
            StoreError::Serve(format!(
                "cannot listen on 127.0.0.1 for the MLflow endpoint: {e}"
            ))
        };
        let listener = TcpListener::bind("127.0.0.1:0").map_err(serve_err)?;
        let addr = listener.local_addr().map_err(serve_err)?;
        let keys = Keys::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (keys, stop) = (keys.clone(), stop.clone());
            std::thread::Builder::new()
                .name("batchcast-mlflow".into())
                .spawn(move || serve(&listener, ctx, rec, keys, &stop))
                .map_err(StoreError::Thread)?
        };
        Ok(Endpoint {
            url: format!("http://127.0.0.1:{}", addr.port()),
            keys,
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`, for `MLFLOW_TRACKING_URI`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A new secret (128 random bits) for the job of `run`, for
    /// `MLFLOW_TRACKING_TOKEN`: requests with it may read and write `run`,
    /// the experiments, and the runs they create, nothing else.
    pub fn token_for(&self, run: RunId) -> Result<String> {
        let token = access::random_token().map_err(|e| {
            StoreError::Serve(format!(
                "cannot read /dev/urandom for the MLflow endpoint's secret: {e}"
            ))
        })?;
        self.keys
            .lock()
            .map_err(|_| StoreError::Serve("the MLflow endpoint's key table is poisoned".into()))?
            .insert(token.clone(), HashSet::from([run]));
        Ok(token)
    }
}

impl Drop for Endpoint {
    /// Stops serving and commits what was logged.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread, which then sees `stop`.
        let _ = TcpStream::connect_timeout(&self.addr, std::time::Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A request read whole: what the store's thread needs to answer it.
struct Call {
    method: String,
    path: String,
    args: Value,
}

/// A call and where its reply goes.
type Job = (Call, mpsc::Sender<api::Reply>);

fn serve(listener: &TcpListener, mut ctx: api::Ctx, rec: Recorder, keys: Keys, stop: &AtomicBool) {
    let (jobs, store_side) = mpsc::channel::<Job>();
    let store = std::thread::Builder::new()
        .name("batchcast-mlflow-store".into())
        .spawn(move || {
            for (call, reply) in store_side {
                let _ = reply.send(api::call(&mut ctx, &call.method, &call.path, &call.args));
            }
            drop(ctx);
            let _ = rec.finish();
        });
    let Ok(store) = store else {
        return; // no thread for the store: requests go unanswered, as when stopped
    };
    // Taken away at shutdown, so that a request thread stuck on a stalled
    // client cannot keep the store's thread (and Endpoint::drop) waiting.
    let jobs = Arc::new(Mutex::new(Some(jobs)));
    let in_flight = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let request = match conn {
            Ok(stream) => stream,
            // Out of descriptors, say: wait for some to close.
            Err(_) => {
                std::thread::sleep(std::time::Duration::from_millis(50));
                continue;
            }
        };
        if in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_IN_FLIGHT {
            in_flight.fetch_sub(1, Ordering::SeqCst);
            let message = format!("more than {MAX_IN_FLIGHT} requests at once");
            http::respond(request, 503, &http::error_body(503, &message));
            continue;
        }
        let (thread_jobs, thread_in_flight) = (Arc::clone(&jobs), Arc::clone(&in_flight));
        let thread_keys = Arc::clone(&keys);
        let spawned = std::thread::Builder::new()
            .name("batchcast-mlflow-request".into())
            .spawn(move || {
                handle(request, &thread_jobs, &thread_keys);
                thread_in_flight.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            in_flight.fetch_sub(1, Ordering::SeqCst); // the request is dropped: its client sees the close
        }
    }
    if let Ok(mut jobs) = jobs.lock() {
        jobs.take();
    }
    let _ = store.join();
}

/// Reads one request, has the store's thread answer it, and responds.
fn handle(
    stream: TcpStream,
    jobs: &Mutex<Option<mpsc::Sender<Job>>>,
    keys: &Mutex<HashMap<String, HashSet<RunId>>>,
) {
    let mut request = match http::read_head(stream) {
        Ok(request) => request,
        Err(unread) => return http::answer(unread),
    };
    let token = match admit(&request, keys) {
        Ok(token) => token,
        Err(reply) => return respond(request, reply),
    };
    let reply = match read_call(&mut request).and_then(|call| allowed(call, &token, keys)) {
        Err(reply) => reply,
        Ok(call) => {
            let creates = call.path.ends_with("/runs/create");
            let (tx, rx) = mpsc::channel();
            let sent = jobs
                .lock()
                .ok()
                .and_then(|j| j.as_ref().map(|j| j.send((call, tx)).is_ok()))
                .unwrap_or(false);
            let stopping = || {
                (
                    503,
                    serde_json::json!({"error_code": "TEMPORARILY_UNAVAILABLE",
                    "message": "the endpoint is stopping"}),
                )
            };
            let reply = if sent {
                rx.recv().unwrap_or_else(|_| stopping())
            } else {
                stopping()
            };
            if creates && reply.0 == 200 {
                let made = reply.1["run"]["info"]["run_id"].as_str();
                if let (Some(run), Ok(mut keys)) = (made.and_then(run_from_mlflow_id), keys.lock())
                {
                    keys.entry(token).or_default().insert(run);
                }
            }
            reply
        }
    };
    respond(request, reply);
}

/// The value of header `name`, if sent.
fn header<'a>(request: &'a http::Request, name: &'static str) -> Option<&'a str> {
    request.header(name)
}

/// Checks who asks, before anything of the body is read: a `Host` (and any
/// `Origin`) of this machine, and a secret this endpoint gave out. The
/// secret, or the reply that refuses the request.
fn admit(
    request: &http::Request,
    keys: &Mutex<HashMap<String, HashSet<RunId>>>,
) -> std::result::Result<String, api::Reply> {
    let denied = |message: String| {
        (
            403,
            serde_json::json!({"error_code": "PERMISSION_DENIED", "message": message}),
        )
    };
    let host = header(request, "Host").unwrap_or("");
    if !access::is_loopback_host(host) {
        return Err(denied(format!(
            "Host {:?} is not this machine; batchcast's MLflow endpoint answers only requests to 127.0.0.1",
            host.chars().take(100).collect::<String>()
        )));
    }
    if let Some(origin) = header(request, "Origin") {
        if !access::is_loopback_origin(origin) {
            return Err(denied(format!(
                "a page of {:?} may not log into the run store",
                origin.chars().take(100).collect::<String>()
            )));
        }
    }
    let token = header(request, "Authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .unwrap_or("");
    let known = keys
        .lock()
        .map(|k| k.keys().find(|t| access::same_secret(t, token)).cloned())
        .unwrap_or(None);
    known.ok_or_else(|| {
        (
            401,
            serde_json::json!({"error_code": "UNAUTHENTICATED",
            "message": "no valid secret: send the job's MLFLOW_TRACKING_TOKEN (the mlflow client \
                        does when it is in the environment, as `batchcast run` sets it)"}),
        )
    })
}

/// The call, if `token` may touch the run it names (none named: any).
fn allowed(
    call: Call,
    token: &str,
    keys: &Mutex<HashMap<String, HashSet<RunId>>>,
) -> std::result::Result<Call, api::Reply> {
    let named = call
        .args
        .get("run_id")
        .or_else(|| call.args.get("run_uuid"))
        .and_then(Value::as_str);
    let Some(run) = named.and_then(run_from_mlflow_id) else {
        return Ok(call); // none, or not a run id: the call answers for itself
    };
    let mine = keys
        .lock()
        .map(|k| k.get(token).is_some_and(|runs| runs.contains(&run)))
        .unwrap_or(false);
    if mine {
        Ok(call)
    } else {
        Err((
            403,
            serde_json::json!({"error_code": "PERMISSION_DENIED",
            "message": format!("run {} is another job's: a job's MLFLOW_TRACKING_TOKEN \
                                reaches only its own run and the runs it creates", mlflow_run_id(run))}),
        ))
    }
}

fn respond(request: http::Request, (status, body): api::Reply) {
    request.respond(status, &body.to_string());
}

/// The method, path and arguments of a request (the query of a GET, the
/// JSON body of the others), or the reply that refuses it.
fn read_call(request: &mut http::Request) -> std::result::Result<Call, api::Reply> {
    let url = request.url().to_string();
    let (path, query) = url.split_once('?').unwrap_or((&url, ""));
    let method = request.method().to_ascii_uppercase();
    let args = if method == "GET" {
        let map: serde_json::Map<String, Value> = form_urlencoded::parse(query.as_bytes())
            .take(64)
            .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
            .collect();
        Value::Object(map)
    } else {
        let body = request.body(MAX_BODY).map_err(|(status, message)| {
            (
                status,
                serde_json::json!({"error_code": "INVALID_PARAMETER_VALUE", "message": message}),
            )
        })?;
        if body.iter().all(u8::is_ascii_whitespace) {
            serde_json::json!({})
        } else {
            match serde_json::from_slice(&body) {
                Ok(v @ Value::Object(_)) => v,
                _ => {
                    return Err((
                        400,
                        serde_json::json!({"error_code": "MALFORMED_REQUEST", "message": "the body is not a JSON object"}),
                    ))
                }
            }
        }
    };
    Ok(Call {
        method,
        path: path.to_owned(),
        args,
    })
}
