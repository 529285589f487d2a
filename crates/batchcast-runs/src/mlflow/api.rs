//! The MLflow REST calls the `mlflow` client makes to log a run, answered
//! from and into the run store.
//!
//! Covered: experiments get-by-name / get / create; runs create / get /
//! update / log-metric / log-parameter / log-batch / set-tag. Tags are
//! accepted and dropped (`mlflow.*` system tags say nothing the store does
//! not keep already). A run the runner started keeps the status the runner
//! gives it: `runs/update` from the script does not end it early.

use serde_json::{json, Value};

use super::{mlflow_run_id, run_from_mlflow_id};
use crate::{now_ms, MetricPoint, NewRun, ParamSource, RecorderHandle, RunId, RunStatus, Store};

/// An answer: HTTP status and JSON body.
pub(crate) type Reply = (u16, Value);

/// What a call may use.
pub(crate) struct Ctx {
    pub store: Store,
    pub rec: RecorderHandle,
}

fn error(status: u16, code: &str, message: impl Into<String>) -> Reply {
    (
        status,
        json!({ "error_code": code, "message": message.into() }),
    )
}

fn bad(message: impl Into<String>) -> Reply {
    error(400, "INVALID_PARAMETER_VALUE", message)
}

fn internal(e: impl std::fmt::Display) -> Reply {
    error(500, "INTERNAL_ERROR", format!("batchcast run store: {e}"))
}

/// Answers one call. `args` is the JSON body (POST) or the query (GET).
pub(crate) fn call(ctx: &mut Ctx, method: &str, path: &str, args: &Value) -> Reply {
    let Some(endpoint) = path
        .strip_prefix("/api/2.0/mlflow/")
        .or_else(|| path.strip_prefix("/ajax-api/2.0/mlflow/"))
    else {
        return error(
            404,
            "ENDPOINT_NOT_FOUND",
            format!("{path} is not an MLflow API path"),
        );
    };
    let result = match (method, endpoint) {
        ("GET", "experiments/get-by-name") => experiment_by_name(ctx, args),
        ("GET", "experiments/get") => experiment_get(ctx, args),
        ("POST", "experiments/create") => experiment_create(ctx, args),
        ("POST", "runs/create") => run_create(ctx, args),
        ("GET", "runs/get") => run_get(ctx, args),
        ("POST", "runs/update") => run_update(ctx, args),
        ("POST", "runs/log-metric") => log_metrics(ctx, args, std::slice::from_ref(args)),
        ("POST", "runs/log-parameter") => log_params(ctx, args, std::slice::from_ref(args)),
        ("POST", "runs/log-batch") => log_batch(ctx, args),
        ("POST", "runs/set-tag") => known_run(ctx, args).map(|_| json!({})),
        _ => Err(error(
            404,
            "ENDPOINT_NOT_FOUND",
            format!(
                "batchcast's MLflow endpoint does not implement {method} {endpoint}; it records experiments, runs, \
                 params and metrics only (use a real MLflow server for the rest)"
            ),
        )),
    };
    result.map(|v| (200, v)).unwrap_or_else(|e| e)
}

fn text<'a>(args: &'a Value, key: &str) -> Result<&'a str, Reply> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| bad(format!("missing string field {key:?}")))
}

/// An integer field that the client may send as a number or a string.
fn int(args: &Value, key: &str) -> Option<i64> {
    match args.get(key)? {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// A double the client may send as a number or as "NaN"/"Infinity".
fn double(args: &Value, key: &str) -> Option<f64> {
    match args.get(key)? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn run_of(args: &Value) -> Result<RunId, Reply> {
    let id = args
        .get("run_id")
        .or_else(|| args.get("run_uuid"))
        .and_then(Value::as_str)
        .unwrap_or("");
    run_from_mlflow_id(id).ok_or_else(|| {
        error(
            404,
            "RESOURCE_DOES_NOT_EXIST",
            format!("run {id:?} is not a run of this batchcast store"),
        )
    })
}

fn experiment_json(id: i64, name: &str, created: i64) -> Value {
    json!({
        "experiment_id": id.to_string(), "name": name, "artifact_location": "",
        "lifecycle_stage": "active", "creation_time": created, "last_update_time": created, "tags": []
    })
}

fn experiment_by_name(ctx: &mut Ctx, args: &Value) -> Result<Value, Reply> {
    let name = text(args, "experiment_name")?;
    let missing = format!("no experiment named {name:?}");
    experiment_reply(ctx, |e| e.name == name, missing)
}

fn experiment_get(ctx: &mut Ctx, args: &Value) -> Result<Value, Reply> {
    let id = int(args, "experiment_id").ok_or_else(|| bad("missing experiment_id"))?;
    experiment_reply(ctx, |e| e.id == id, format!("no experiment {id}"))
}

/// The first experiment `pick` accepts, as MLflow replies with it; a 404
/// saying `missing` when there is none.
fn experiment_reply(
    ctx: &mut Ctx,
    pick: impl Fn(&crate::Experiment) -> bool,
    missing: String,
) -> Result<Value, Reply> {
    let experiments = ctx.store.experiments().map_err(internal)?;
    match experiments.into_iter().find(|e| pick(e)) {
        Some(e) => Ok(json!({ "experiment": experiment_json(e.id, &e.name, e.created_ms) })),
        None => Err(error(404, "RESOURCE_DOES_NOT_EXIST", missing)),
    }
}

fn experiment_create(ctx: &mut Ctx, args: &Value) -> Result<Value, Reply> {
    let name = text(args, "name")?;
    if name.is_empty() || name.len() > 256 {
        return Err(bad("an experiment name has 1 to 256 characters"));
    }
    let id = ctx.store.experiment(name).map_err(internal)?;
    Ok(json!({ "experiment_id": id.to_string() }))
}

/// A run the script starts itself (not under `batchcast run`, or without
/// `MLFLOW_RUN_ID`): a new run in workload "mlflow" of its experiment.
fn run_create(ctx: &mut Ctx, args: &Value) -> Result<Value, Reply> {
    let exp = int(args, "experiment_id").unwrap_or(0);
    let exp_name = match ctx
        .store
        .experiments()
        .map_err(internal)?
        .into_iter()
        .find(|e| e.id == exp)
    {
        Some(e) => e.name,
        None => "Default".to_string(),
    };
    let exp = ctx.store.experiment(&exp_name).map_err(internal)?;
    let w = ctx
        .store
        .workload(exp, "mlflow", None, 0)
        .map_err(internal)?;
    let name = match args
        .get("run_name")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        Some(n) => n.chars().take(256).collect(),
        None => format!("mlflow-{}", now_ms()),
    };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_string();
    let new = NewRun {
        name,
        collocation: "-".into(),
        host,
        ..NewRun::default()
    };
    let (id, _) = ctx.store.add_run(w, &new).map_err(internal)?;
    ctx.store
        .claim_run(
            id,
            i64::from(std::process::id()),
            0,
            &json!({ "started_by": "mlflow" }),
        )
        .map_err(internal)?;
    run_get(ctx, &json!({ "run_id": mlflow_run_id(id) }))
}

fn run_get(ctx: &mut Ctx, args: &Value) -> Result<Value, Reply> {
    let id = run_of(args)?;
    let row = ctx.store.run(id).map_err(|_| {
        error(
            404,
            "RESOURCE_DOES_NOT_EXIST",
            format!("run {} is not in this batchcast store", mlflow_run_id(id)),
        )
    })?;
    let params: Vec<Value> = ctx
        .store
        .params(id)
        .map_err(internal)?
        .into_iter()
        .map(|p| json!({ "key": p.key, "value": p.value }))
        .collect();
    let status = match row.run.status {
        RunStatus::Pending | RunStatus::Running => "RUNNING",
        RunStatus::Finished => "FINISHED",
        RunStatus::Failed => "FAILED",
        RunStatus::Killed => "KILLED",
    };
    let mut info = json!({
        "run_id": mlflow_run_id(id), "run_uuid": mlflow_run_id(id), "run_name": row.run.name,
        "experiment_id": store_experiment_id(ctx, &row.experiment), "user_id": "", "status": status,
        "start_time": row.run.start_ms.unwrap_or(0), "artifact_uri": "", "lifecycle_stage": "active"
    });
    if let Some(end) = row.run.end_ms {
        info["end_time"] = json!(end);
    }
    Ok(
        json!({ "run": { "info": info, "data": { "metrics": [], "params": params, "tags": [] }, "inputs": {} } }),
    )
}

fn store_experiment_id(ctx: &Ctx, name: &str) -> String {
    ctx.store
        .experiments()
        .ok()
        .and_then(|v| v.into_iter().find(|e| e.name == name))
        .map_or_else(|| "0".into(), |e| e.id.to_string())
}

fn run_update(ctx: &mut Ctx, args: &Value) -> Result<Value, Reply> {
    let id = run_of(args)?;
    let row = ctx.store.run(id).map_err(internal)?;
    // Only runs the endpoint created end by the client's word; the runner
    // records how its own jobs ended.
    let own = row.run.env.get("started_by").and_then(Value::as_str) == Some("mlflow");
    let status = args.get("status").and_then(Value::as_str).unwrap_or("");
    if own {
        let end = match status {
            "FINISHED" => Some(RunStatus::Finished),
            "FAILED" => Some(RunStatus::Failed),
            "KILLED" => Some(RunStatus::Killed),
            _ => None,
        };
        if let Some(s) = end {
            ctx.store.finish_run(id, s, None, None).map_err(internal)?;
        }
    }
    let run = run_get(ctx, &json!({ "run_id": mlflow_run_id(id) }))?;
    Ok(json!({ "run_info": run["run"]["info"] }))
}

/// The run a logging call names, which must be one the store holds: a
/// point for any other run would be refused only later, by the store.
fn known_run(ctx: &Ctx, args: &Value) -> Result<RunId, Reply> {
    let id = run_of(args)?;
    if ctx.store.run_exists(id).map_err(internal)? {
        Ok(id)
    } else {
        Err(error(
            404,
            "RESOURCE_DOES_NOT_EXIST",
            format!(
                "run {} is not in this batchcast store; log to the run in MLFLOW_RUN_ID, or create one with runs/create",
                mlflow_run_id(id)
            ),
        ))
    }
}

/// The points of `metrics`, every one checked before any is queued.
fn metric_points(id: RunId, metrics: &[Value]) -> Result<Vec<MetricPoint>, Reply> {
    metrics
        .iter()
        .map(|m| {
            let key = text(m, "key")?;
            if key.is_empty() || key.len() > 250 {
                return Err(bad("a metric key has 1 to 250 characters"));
            }
            let value = double(m, "value")
                .ok_or_else(|| bad(format!("metric {key:?} has no numeric value")))?;
            Ok(MetricPoint {
                run_id: id,
                key: key.to_string(),
                step: int(m, "step").unwrap_or(0),
                ts_ms: int(m, "timestamp").unwrap_or_else(now_ms),
                value,
            })
        })
        .collect()
}

/// The `(key, value)` pairs of `params`, every one checked.
fn param_pairs(params: &[Value]) -> Result<Vec<(String, String)>, Reply> {
    params
        .iter()
        .map(|p| {
            let key = text(p, "key")?;
            let value = match p.get("value") {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => String::new(),
            };
            if key.is_empty() || key.len() > 250 || value.len() > 6000 {
                return Err(bad(
                    "a param key has 1 to 250 characters and a value at most 6000",
                ));
            }
            Ok((key.to_string(), value))
        })
        .collect()
}

fn queue(ctx: &Ctx, points: Vec<MetricPoint>) -> Result<Value, Reply> {
    for point in points {
        if !ctx.rec.metric(point) {
            return Err(internal("the recorder has stopped"));
        }
    }
    Ok(json!({}))
}

fn write_params(ctx: &Ctx, id: RunId, params: &[(String, String)]) -> Result<(), Reply> {
    for (key, value) in params {
        ctx.store
            .log_param(id, key, value, ParamSource::Logged)
            .map_err(internal)?;
    }
    Ok(())
}

fn log_metrics(ctx: &mut Ctx, args: &Value, metrics: &[Value]) -> Result<Value, Reply> {
    let id = known_run(ctx, args)?;
    let points = metric_points(id, metrics)?;
    queue(ctx, points)
}

fn log_params(ctx: &mut Ctx, args: &Value, params: &[Value]) -> Result<Value, Reply> {
    let id = known_run(ctx, args)?;
    let pairs = param_pairs(params)?;
    write_params(ctx, id, &pairs)?;
    Ok(json!({}))
}

fn log_batch(ctx: &mut Ctx, args: &Value) -> Result<Value, Reply> {
    let list = |k: &str| {
        args.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (metrics, params) = (list("metrics"), list("params"));
    if metrics.len() > 1000 || params.len() > 100 {
        return Err(bad(
            "a batch holds at most 1000 metrics and 100 params (MLflow's limits)",
        ));
    }
    let id = known_run(ctx, args)?;
    let points = metric_points(id, &metrics)?;
    let pairs = param_pairs(&params)?;
    write_params(ctx, id, &pairs)?;
    queue(ctx, points)
}
