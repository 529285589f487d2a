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
//! One thread owns the store and answers calls one at a time; requests are
//! read, and answered, concurrently on another (`batchcast_store::http`, the
//! toolkit's one HTTP stack). So a client that stops in the middle of a
//! request (a trainer paused with SIGSTOP, a debugger) holds up only its
//! own request, never the others' logging; at most [`MAX_IN_FLIGHT`]
//! connections are served at once, one request each. Its HTTP is read
//! within bounds (a head of 16 KiB sent within 10 s, a body of 4 MiB within
//! 30 s): a client can hold a request for that long, and no more memory
//! than that.

mod api;
mod gate;
mod server;

use std::path::Path;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::{Recorder, Result, RunId, Store, StoreError};

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
/// Bytes of a request's line and headers, at most.
const MAX_HEAD: usize = 16 * 1024;
/// Time a client has to send its request line and headers.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a client has to send its body.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections served at once (one request each); more are answered 503
/// at once.
pub const MAX_IN_FLIGHT: usize = 64;

/// A running MLflow-compatible endpoint on 127.0.0.1.
pub struct Endpoint {
    url: String,
    keys: gate::Keys,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
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
        let keys = gate::Keys::default();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let (addr, thread) = server::start(ctx, rec, keys.clone(), async {
            let _ = stopped.await;
        })
        .map_err(|e| {
            StoreError::Serve(format!(
                "cannot listen on 127.0.0.1 for the MLflow endpoint: {e}"
            ))
        })?;
        Ok(Endpoint {
            url: format!("http://127.0.0.1:{}", addr.port()),
            keys,
            stop: Some(stop),
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
        let token = crate::access::random_token().map_err(|e| {
            StoreError::Serve(format!(
                "cannot read /dev/urandom for the MLflow endpoint's secret: {e}"
            ))
        })?;
        gate::grant(&self.keys, token.clone(), run)?;
        Ok(token)
    }
}

impl Drop for Endpoint {
    /// Stops serving (requests still being read are dropped) and commits
    /// what was logged.
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
