//! Cluster files in two dialects:
//! - the published delay-scheduling simulator's (github
//!   aakash-sharma/cluster-sim, `configuration/cluster/*.json`, read as its
//!   `ConfigUtils.getClusterConfig` does): `racks_in_cluster`,
//!   `machines_per_rack`, `slots_per_machine`, `gpus_per_slot`,
//!   `lease_time`, `cluster_policy`, `iteration_granularity`, `consolidate`,
//!   `epsilon`, `fairness_threshold`, `should_use_config` and the ASTRA-sim
//!   paths, every value a string (numbers are accepted too). It has no CPU
//!   model: cores per machine come from the caller.
//! - batchcast's own: [`ClusterSpec`]'s fields (`racks`,
//!   `machines_per_rack`, `gpus_per_machine`, `gpus_per_slot`, `cpu_cores`,
//!   `memory_gib`).
//!
//! The published fields that batchcast does not simulate (`epsilon`,
//! `fairness_threshold`, `iteration_granularity`, `consolidate`) are read,
//! checked and returned so that a caller can report them.

use serde_json::{Map, Value};

use crate::cluster::ClusterSpec;
use crate::error::SimError;
use crate::job::JobSpec;

/// Largest cluster file read, bytes (a cluster file is a small object).
pub const MAX_CLUSTER_BYTES: u64 = 64 * 1024;

/// The fields a published cluster file may carry.
const PUBLISHED_FIELDS: &[&str] = &[
    "racks_in_cluster",
    "machines_per_rack",
    "slots_per_machine",
    "gpus_per_slot",
    "lease_time",
    "cluster_policy",
    "iteration_granularity",
    "consolidate",
    "epsilon",
    "fairness_threshold",
    "should_use_config",
    "astra_sim_path",
    "astra_sim_bin_path",
];

/// A cluster file's contents.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterFile {
    /// The cluster's shape (validated).
    pub spec: ClusterSpec,
    /// True for the published simulator's dialect.
    pub published: bool,
    /// `lease_time`, seconds, when given.
    pub lease: Option<f64>,
    /// `cluster_policy` as written (e.g. `Tiresias`, `Dally`), when given.
    pub policy: Option<String>,
    /// `iteration_granularity`: iterations scheduled at once. The published
    /// simulator runs whole chunks of it, so a job runs its iterations
    /// rounded up to a multiple (see [`ClusterFile::whole_chunks`]); that a
    /// chunk, once started, holds its GPUs past the lease is not simulated.
    pub iteration_granularity: Option<u64>,
    /// `should_use_config` is "true" (Java's `Boolean.parseBoolean`).
    /// Without it the published simulator ignores the shape and builds a
    /// fixed heterogeneous cluster, which batchcast does not.
    pub shape_used: bool,
    /// `consolidate`, when given.
    pub consolidate: Option<bool>,
}

impl From<ClusterSpec> for ClusterFile {
    /// A cluster in batchcast's own terms: the shape alone, none of the
    /// published simulator's options.
    fn from(spec: ClusterSpec) -> ClusterFile {
        ClusterFile {
            spec,
            published: false,
            lease: None,
            policy: None,
            iteration_granularity: None,
            consolidate: None,
            shape_used: true,
        }
    }
}

impl ClusterFile {
    /// Rounds each job's iterations up to whole chunks of
    /// `iteration_granularity`, as the published simulator runs them (it
    /// takes the granularity off the remaining count after every chunk and
    /// stops at zero); returns how many jobs grew. No-op without one.
    pub fn whole_chunks(&self, jobs: &mut [JobSpec]) -> usize {
        let Some(g) = self.iteration_granularity.map(|g| g as f64) else {
            return 0;
        };
        let mut grew = 0;
        for j in jobs {
            let whole = (j.iterations / g).ceil() * g;
            if whole > j.iterations {
                j.iterations = whole;
                grew += 1;
            }
        }
        grew
    }
}

fn err(file: &str, problem: String) -> SimError {
    SimError::File {
        file: file.into(),
        problem,
    }
}

/// Field `k` as a string or number's text, when present.
fn raw(file: &str, o: &Map<String, Value>, k: &str) -> Result<Option<String>, SimError> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim().to_string())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(Value::Bool(b)) => Ok(Some(b.to_string())),
        Some(v) => Err(err(
            file,
            format!("field `{k}`: expected a string or number, found {v}"),
        )),
    }
}

/// Field `k` as a `T` that `ok` accepts, when present; a value it refuses
/// is "not `what`".
fn parsed<T: std::str::FromStr>(
    file: &str,
    o: &Map<String, Value>,
    k: &str,
    ok: impl Fn(&T) -> bool,
    what: &str,
) -> Result<Option<T>, SimError> {
    let Some(s) = raw(file, o, k)? else {
        return Ok(None);
    };
    match s.parse::<T>() {
        Ok(v) if ok(&v) => Ok(Some(v)),
        _ => Err(err(file, format!("field `{k}`: {s:?} is not {what}"))),
    }
}

fn whole(file: &str, o: &Map<String, Value>, k: &str) -> Result<Option<u32>, SimError> {
    let what = "a whole number >= 1; write e.g. \"2\"";
    parsed(file, o, k, |&n: &u32| n >= 1, what)
}

fn need(file: &str, o: &Map<String, Value>, k: &str) -> Result<u32, SimError> {
    whole(file, o, k)?.ok_or_else(|| {
        err(
            file,
            format!("field `{k}` is missing; the published cluster files give it as e.g. \"2\""),
        )
    })
}

fn real(file: &str, o: &Map<String, Value>, k: &str) -> Result<Option<f64>, SimError> {
    let what = "a number >= 0; write e.g. \"20.0\"";
    parsed(file, o, k, |v: &f64| v.is_finite() && *v >= 0.0, what)
}

/// Parses cluster-file `text` (`file` names it in errors); `cpu_cores` is
/// used for published files, which have no CPU model.
pub fn parse_cluster(file: &str, text: &str, cpu_cores: f64) -> Result<ClusterFile, SimError> {
    if text.len() as u64 > MAX_CLUSTER_BYTES {
        return Err(err(
            file,
            format!("larger than {MAX_CLUSTER_BYTES} bytes; a cluster file is a small JSON object"),
        ));
    }
    let v: Value = serde_json::from_str(text).map_err(|e| {
        err(
            file,
            format!(
                "not valid JSON at line {} column {}: {e}",
                e.line(),
                e.column()
            ),
        )
    })?;
    let Value::Object(o) = &v else {
        return Err(err(file, "expected a JSON object".into()));
    };
    if !o.contains_key("racks_in_cluster") {
        let spec: ClusterSpec = serde_json::from_value(v.clone()).map_err(|e| {
            err(
                file,
                format!(
                    "{e}; expected batchcast's {{\"racks\", \"machines_per_rack\", \
                     \"gpus_per_machine\", \"cpu_cores\"}} or the published simulator's \
                     {{\"racks_in_cluster\", \"machines_per_rack\", \"slots_per_machine\", \
                     \"gpus_per_slot\", ...}}"
                ),
            )
        })?;
        spec.validate().map_err(|e| err(file, e.to_string()))?;
        return Ok(spec.into());
    }
    if let Some(k) = o.keys().find(|k| !PUBLISHED_FIELDS.contains(&k.as_str())) {
        return Err(err(
            file,
            format!(
                "unknown field `{k}` in a published-simulator cluster file; known: {}",
                PUBLISHED_FIELDS.join(", ")
            ),
        ));
    }
    let racks = need(file, o, "racks_in_cluster")?;
    let machines = need(file, o, "machines_per_rack")?;
    let slots = need(file, o, "slots_per_machine")?;
    let per_slot = need(file, o, "gpus_per_slot")?;
    let per_machine = slots.checked_mul(per_slot).ok_or_else(|| {
        err(
            file,
            "slots_per_machine x gpus_per_slot overflows; give a real machine".into(),
        )
    })?;
    let spec = ClusterSpec {
        gpus_per_slot: per_slot,
        ..ClusterSpec::new(racks, machines, per_machine, cpu_cores)
    };
    spec.validate().map_err(|e| err(file, e.to_string()))?;
    for k in ["epsilon", "fairness_threshold"] {
        real(file, o, k)?;
    }
    let lease = real(file, o, "lease_time")?;
    if lease == Some(0.0) {
        return Err(err(
            file,
            "field `lease_time`: must be > 0 seconds; the Dally configurations use \"20.0\"".into(),
        ));
    }
    // Java's Boolean.parseBoolean: "true" in any case, anything else false.
    let consolidate = raw(file, o, "consolidate")?.map(|s| s.eq_ignore_ascii_case("true"));
    Ok(ClusterFile {
        spec,
        published: true,
        lease,
        policy: raw(file, o, "cluster_policy")?,
        iteration_granularity: whole(file, o, "iteration_granularity")?.map(u64::from),
        consolidate,
        shape_used: raw(file, o, "should_use_config")?
            .is_some_and(|s| s.eq_ignore_ascii_case("true")),
    })
}
