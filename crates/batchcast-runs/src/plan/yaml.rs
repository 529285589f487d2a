//! YAML plans: the CSV's fields, in lower case, plus sweeps.
//!
//! ```yaml
//! experiment: lr-sweep            # default for every run
//! runs:
//!   - workload: shared
//!     name: trial
//!     file: train.py
//!     params: --epochs 2          # a string or a list
//!     data: batchcast serve --synthetic --batch-size 64
//!     parameters: { lr: [0.1, 0.01], batch-size: [32, 64] }
//!     method: grid                # or random, with count and seed
//! ```
//! A run with `parameters` becomes one run per combination, named
//! `NAME-key=value-...`, with `--key value` appended to its arguments.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_norway::Value;

use super::sweep::{self, Method};
use super::{list, params_of, Collocation, PlanError, PlanRow, MAX_ROWS};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    experiment: Option<String>,
    runs: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    experiment: Option<String>,
    workload: String,
    name: String,
    file: String,
    #[serde(default)]
    params: Option<Value>,
    #[serde(default)]
    devices: Option<Value>,
    #[serde(default)]
    collocation: Option<String>,
    #[serde(default)]
    listeners: Option<Value>,
    #[serde(default)]
    data: Option<String>,
    #[serde(default)]
    parameters: Option<BTreeMap<String, Vec<Value>>>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    count: Option<usize>,
    #[serde(default)]
    seed: Option<u64>,
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Why an entry's field is not a list of strings; `what` names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum ListError {
    #[error("{0} holds a value that is not a scalar")]
    NotScalar(&'static str),
    #[error("{0} is neither a string nor a list")]
    NotStringOrList(&'static str),
    #[error("{what} {text:?} has an unclosed quote")]
    UnclosedQuote { what: &'static str, text: String },
}

/// A string or a list of scalars, as a list.
fn strings(
    v: &Option<Value>,
    what: &'static str,
    split: impl Fn(&str) -> Option<Vec<String>>,
) -> Result<Vec<String>, ListError> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Sequence(items)) => items
            .iter()
            .map(|i| scalar(i).ok_or(ListError::NotScalar(what)))
            .collect(),
        Some(other) => {
            let s = scalar(other).ok_or(ListError::NotStringOrList(what))?;
            split(&s).ok_or(ListError::UnclosedQuote { what, text: s })
        }
    }
}

/// The most bytes of runs the sweeps of a plan may expand to: a sweep
/// copies its entry once per combination, so a plan within
/// [`super::MAX_PLAN_BYTES`] could otherwise ask for terabytes.
const MAX_EXPANDED_BYTES: usize = 256 << 20;

/// The bytes of a row's strings, what a copy of it costs (roughly).
fn row_bytes(r: &PlanRow) -> usize {
    let strings = [&r.experiment, &r.workload, &r.name, &r.file]
        .into_iter()
        .chain(&r.devices)
        .chain(&r.listeners)
        .chain(&r.data)
        .chain(&r.args)
        .map(|s| s.len() + std::mem::size_of::<String>());
    let params = r.params.iter().map(|(k, v)| k.len() + v.len());
    strings.chain(params).sum::<usize>() + std::mem::size_of::<PlanRow>()
}

pub(crate) fn parse(path: &Path, text: &str) -> Result<Vec<PlanRow>, PlanError> {
    let err = |row: Option<usize>, problem: String| PlanError {
        file: path.to_path_buf(),
        row,
        problem,
    };
    let file: File =
        serde_norway::from_str(text).map_err(|e| err(None, format!("not a valid plan: {e}")))?;
    let mut rows = Vec::new();
    let mut expanded = 0usize; // bytes of the rows of sweeps so far
    for (n, mut e) in file.runs.into_iter().enumerate() {
        let row = n + 1;
        let at = |p: String| err(Some(row), p);
        let base = base_row(&e, row, file.experiment.as_deref(), &at)?;
        let Some(parameters) = e.parameters.take() else {
            if e.method.is_some() || e.count.is_some() || e.seed.is_some() {
                return Err(at(
                    "method, count and seed need `parameters` to sweep over".into()
                ));
            }
            rows.push(base);
            continue;
        };
        let (parameters, method) = sweep_of(parameters, &e, &at)?;
        let room = MAX_ROWS - rows.len().min(MAX_ROWS);
        rows.extend(sweep_rows(
            &base,
            &parameters,
            method,
            room,
            &mut expanded,
            &at,
        )?);
    }
    Ok(rows)
}

/// The run entry `e` (the plan's `row`-th) describes, before any sweep.
fn base_row(
    e: &Entry,
    row: usize,
    experiment: Option<&str>,
    at: &impl Fn(String) -> PlanError,
) -> Result<PlanRow, PlanError> {
    let experiment = e
        .experiment
        .clone()
        .or_else(|| experiment.map(String::from))
        .unwrap_or_default();
    let args = strings(&e.params, "params", shlex::split).map_err(|e| at(e.to_string()))?;
    let devices =
        strings(&e.devices, "devices", |s| Some(list(s))).map_err(|e| at(e.to_string()))?;
    let listeners =
        strings(&e.listeners, "listeners", |s| Some(list(s))).map_err(|e| at(e.to_string()))?;
    let collocation = Collocation::parse(e.collocation.as_deref().unwrap_or("-"))
        .map_err(|e| at(e.to_string()))?;
    Ok(PlanRow {
        row,
        experiment,
        workload: e.workload.clone(),
        name: e.name.clone(),
        status: None,
        devices,
        collocation,
        listeners,
        data: e.data.clone().filter(|d| !d.trim().is_empty()),
        file: e.file.clone(),
        params: params_of(&args),
        args,
    })
}

/// A sweep's parameters, each with its values as strings.
type Parameters = Vec<(String, Vec<String>)>;

/// An entry's sweep: its parameters' values as strings, and the method
/// (`method`, with `count` and `seed`).
fn sweep_of(
    parameters: BTreeMap<String, Vec<Value>>,
    e: &Entry,
    at: &impl Fn(String) -> PlanError,
) -> Result<(Parameters, Method), PlanError> {
    let parameters: Parameters = parameters
        .into_iter()
        .map(|(k, vs)| {
            let vs = vs.iter().map(scalar).collect::<Option<Vec<_>>>();
            vs.map(|v| (k.clone(), v)).ok_or_else(|| {
                at(format!(
                    "sweep parameter {k:?} holds a value that is not a scalar"
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    let method = match e.method.as_deref().unwrap_or("grid") {
        "grid" => Method::Grid,
        "random" => Method::Random {
            count: e
                .count
                .ok_or_else(|| at("a random sweep needs `count`".into()))?,
            seed: e.seed.unwrap_or(0),
        },
        other => return Err(at(format!("method {other:?} is neither grid nor random"))),
    };
    Ok((parameters, method))
}

/// The rows of a sweep of `base`: one per combination (at most `room`),
/// named after it, its parameters appended to the arguments. `expanded`
/// counts the bytes of all sweeps' rows, bounded by [`MAX_EXPANDED_BYTES`].
fn sweep_rows(
    base: &PlanRow,
    parameters: &Parameters,
    method: Method,
    room: usize,
    expanded: &mut usize,
    at: &impl Fn(String) -> PlanError,
) -> Result<Vec<PlanRow>, PlanError> {
    let combos = sweep::expand(parameters, method, room)
        .map_err(|e| at(format!("{e} (a plan expands to at most {MAX_ROWS} runs)")))?;
    // Each combination copies the entry: bounded before copying.
    let copies = row_bytes(base).saturating_mul(combos.len());
    *expanded = expanded.saturating_add(copies);
    if *expanded > MAX_EXPANDED_BYTES {
        return Err(at(format!(
            "the sweep copies this entry {} times, {} MiB in all; a plan expands to at most \
             {} MiB: shorten its strings or sweep fewer values",
            combos.len(),
            copies >> 20,
            MAX_EXPANDED_BYTES >> 20
        )));
    }
    let mut rows = Vec::with_capacity(combos.len());
    for (i, combo) in combos.into_iter().enumerate() {
        let mut r = base.clone();
        let suffix: Vec<String> = combo.iter().map(|(k, v)| format!("{k}={v}")).collect();
        r.name = format!("{}-{}", base.name, suffix.join("-"));
        if matches!(method, Method::Random { .. }) {
            r.name = format!("{}-{i}", r.name);
        }
        for (k, v) in combo {
            r.args.push(format!("--{k}"));
            r.args.push(v.clone());
            r.params.retain(|(pk, _)| *pk != k);
            r.params.push((k, v));
        }
        rows.push(r);
    }
    Ok(rows)
}
