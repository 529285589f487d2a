//! Who may call the endpoint, and which runs each caller may touch: the
//! secrets it gave out, each with its runs, checked by the rules of
//! [`crate::access`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use axum::http::header::{AUTHORIZATION, HOST, ORIGIN};
use axum::http::HeaderMap;
use serde_json::{json, Value};

use super::api::Reply;
use super::{mlflow_run_id, run_from_mlflow_id};
use crate::{access, Result, RunId, StoreError};

/// The secrets the endpoint has given out, each with the runs it may
/// touch: the run it was made for, and those made with it (`runs/create`).
pub(super) type Keys = Arc<Mutex<HashMap<String, HashSet<RunId>>>>;

/// Lets `token` touch `run`.
pub(super) fn grant(keys: &Keys, token: String, run: RunId) -> Result<()> {
    keys.lock()
        .map_err(|_| StoreError::Serve("the MLflow endpoint's key table is poisoned".into()))?
        .entry(token)
        .or_default()
        .insert(run);
    Ok(())
}

/// Checks who asks, before anything of the body is read: a `Host` (and any
/// `Origin`) of this machine, and a secret this endpoint gave out. The
/// secret, or the reply that refuses the request.
pub(super) fn admit(headers: &HeaderMap, keys: &Keys) -> std::result::Result<String, Reply> {
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let denied = |message: String| {
        (
            403,
            json!({"error_code": "PERMISSION_DENIED", "message": message}),
        )
    };
    let host = header(HOST).unwrap_or("");
    if !access::is_loopback_host(host) {
        return Err(denied(format!(
            "Host {:?} is not this machine; batchcast's MLflow endpoint answers only requests to 127.0.0.1",
            host.chars().take(100).collect::<String>()
        )));
    }
    if let Some(origin) = headers.get(ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !access::is_loopback_origin(origin) {
            return Err(denied(format!(
                "a page of {:?} may not log into the run store",
                origin.chars().take(100).collect::<String>()
            )));
        }
    }
    let token = header(AUTHORIZATION)
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
            json!({"error_code": "UNAUTHENTICATED",
            "message": "no valid secret: send the job's MLFLOW_TRACKING_TOKEN (the mlflow client \
                        does when it is in the environment, as `batchcast run` sets it)"}),
        )
    })
}

/// Whether `token` may touch the run a call's `args` name (none named:
/// yes, the call answers for itself).
pub(super) fn allowed(args: &Value, token: &str, keys: &Keys) -> std::result::Result<(), Reply> {
    let named = args
        .get("run_id")
        .or_else(|| args.get("run_uuid"))
        .and_then(Value::as_str);
    let Some(run) = named.and_then(run_from_mlflow_id) else {
        return Ok(());
    };
    let mine = keys
        .lock()
        .map(|k| k.get(token).is_some_and(|runs| runs.contains(&run)))
        .unwrap_or(false);
    if mine {
        Ok(())
    } else {
        Err((
            403,
            json!({"error_code": "PERMISSION_DENIED",
            "message": format!("run {} is another job's: a job's MLFLOW_TRACKING_TOKEN \
                                reaches only its own run and the runs it creates", mlflow_run_id(run))}),
        ))
    }
}
