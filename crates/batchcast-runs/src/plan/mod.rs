//! Experiment plans: which jobs run, together or one workload after
//! another, from a CSV or YAML file or built in code ([`PlanBuilder`]).
//!
//! A plan is checked whole before anything starts: an unknown column, a
//! missing file, a bad collocation or listener, a sweep with no values or a
//! duplicate run is refused with the file, the row and the problem named.

mod build;
mod csv;
mod sweep;
mod yaml;

use std::path::{Path, PathBuf};

pub use build::PlanBuilder;

use crate::listen::check_listener_name;
use crate::RunStatus;

/// Largest plan file read.
pub const MAX_PLAN_BYTES: u64 = 16 << 20;
/// Most rows a plan may expand to (sweeps included).
pub const MAX_ROWS: usize = 100_000;

/// Why a plan was refused.
#[derive(Debug, thiserror::Error)]
#[error("{file}{}: {problem}", row.map(|r| format!(", row {r}")).unwrap_or_default())]
pub struct PlanError {
    /// The plan file.
    pub file: PathBuf,
    /// 1-based data row (CSV: the line after the header is row 1; YAML: the
    /// entry of `runs`).
    pub row: Option<usize>,
    /// What is wrong, and what to do about it.
    pub problem: String,
}

/// A Collocation cell that names no way of sharing a GPU (the text given).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("Collocation {0:?} is none of `-`, `MPS` or a MIG profile such as `3g.20gb`")]
pub struct BadCollocation(pub String);

/// Why a row's File or Data command cannot be started; `what` names which.
#[derive(Debug, thiserror::Error)]
enum CommandError {
    #[error("{what} {} does not exist", path.display())]
    Missing { what: &'static str, path: PathBuf },
    #[error(
        "{what} {} is not executable; make it so (chmod +x) or name its interpreter",
        path.display()
    )]
    NotExecutable { what: &'static str, path: PathBuf },
    #[error(
        "{what} {command:?} is neither a file in {} nor a command on PATH; \
         give its path, or install it",
        dir.display()
    )]
    NotFound {
        what: &'static str,
        command: String,
        dir: PathBuf,
    },
}

/// How the jobs of a row share their GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Collocation {
    /// `-`: processes share the GPU the usual way (time slicing).
    Plain,
    /// NVIDIA MPS.
    Mps,
    /// A MIG instance of this profile, such as `3g.20gb`.
    Mig(String),
}

impl Collocation {
    /// Reads a plan's Collocation cell: `-` (or empty), `MPS` (any case),
    /// or a MIG profile such as `3g.20gb`.
    ///
    /// # Errors
    /// [`BadCollocation`] for anything else.
    pub fn parse(s: &str) -> Result<Collocation, BadCollocation> {
        let t = s.trim();
        if t.is_empty() || t == "-" {
            return Ok(Collocation::Plain);
        }
        if t.eq_ignore_ascii_case("mps") {
            return Ok(Collocation::Mps);
        }
        let mig = t.split_once("g.").is_some_and(|(g, mem)| {
            !g.is_empty()
                && g.chars().all(|c| c.is_ascii_digit())
                && mem
                    .strip_suffix("gb")
                    .is_some_and(|m| !m.is_empty() && m.chars().all(|c| c.is_ascii_digit()))
        });
        if mig {
            Ok(Collocation::Mig(t.to_string()))
        } else {
            Err(BadCollocation(t.to_string()))
        }
    }

    /// The name a plan writes: `-`, `MPS` or the MIG profile.
    pub fn as_str(&self) -> &str {
        match self {
            Collocation::Plain => "-",
            Collocation::Mps => "MPS",
            Collocation::Mig(p) => p,
        }
    }
}

/// One run of a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanRow {
    /// 1-based row in the file (YAML: entry), for messages.
    pub row: usize,
    /// The experiment the run belongs to.
    pub experiment: String,
    /// The workload (runs that run together) it belongs to.
    pub workload: String,
    /// Its name, unique in its workload.
    pub name: String,
    /// The Status column as the plan gives it (CSV); FINISHED rows are skipped.
    pub status: Option<RunStatus>,
    /// Devices given to the job (GPU indices, MIG UUIDs).
    pub devices: Vec<String>,
    /// How the jobs of its workload share their GPUs.
    pub collocation: Collocation,
    /// Listeners that sample the run (`cpu`, `gpu`, ...).
    pub listeners: Vec<String>,
    /// The workload's shared pipeline: a `batchcast serve ...` command line
    /// or a Python producer script.
    pub data: Option<String>,
    /// The script or command, as written.
    pub file: String,
    /// Arguments passed to `file`.
    pub args: Vec<String>,
    /// `(key, value)` of `--key value` / `--key=value` arguments and sweep
    /// values, for the store.
    pub params: Vec<(String, String)>,
}

impl PlanRow {
    /// Row `row`: run `name` of `workload` of `experiment` (`names`),
    /// running `file` with `args`, on no device, with every listener.
    fn of_command(row: usize, names: [&str; 3], file: &str, args: &[String]) -> PlanRow {
        let [experiment, workload, name] = names;
        PlanRow {
            row,
            experiment: experiment.into(),
            workload: workload.into(),
            name: name.into(),
            status: None,
            devices: Vec::new(),
            collocation: Collocation::Plain,
            listeners: Vec::new(),
            data: None,
            file: file.into(),
            args: args.to_vec(),
            params: params_of(args),
        }
    }
}

/// A checked plan.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The plan file.
    pub file: PathBuf,
    /// The directory relative paths in the plan are resolved against.
    pub dir: PathBuf,
    /// Its runs, sweeps expanded, in plan order.
    pub rows: Vec<PlanRow>,
    /// True when it was read from `file` ([`Plan::load`]): only then are
    /// the runs' statuses written back into it. A plan built in code or
    /// from a command line names no file of its own.
    pub from_file: bool,
}

impl Plan {
    /// Reads and checks a plan (`.csv`, `.yaml` or `.yml`).
    pub fn load(path: &Path) -> Result<Plan, PlanError> {
        let err = |problem: String| PlanError {
            file: path.to_path_buf(),
            row: None,
            problem,
        };
        let text =
            batchcast_store::bounded::read_text(path, MAX_PLAN_BYTES).map_err(|e| {
                match e.kind() {
                    std::io::ErrorKind::FileTooLarge => err(format!(
                        "the plan is {e}; plans are at most {MAX_PLAN_BYTES} bytes"
                    )),
                    std::io::ErrorKind::InvalidData => {
                        err(format!("cannot read the plan as UTF-8 text: {e}"))
                    }
                    _ => err(format!("cannot read the plan: {e}")),
                }
            })?;
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        let rows = match ext.as_str() {
            "csv" => csv::parse(path, &text)?,
            "yaml" | "yml" => yaml::parse(path, &text)?,
            _ => return Err(err("a plan is a .csv or a .yaml/.yml file".into())),
        };
        // Absolute, so that a job started in the plan's directory finds
        // the files the plan names relative to it.
        let parent = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let dir = parent
            .canonicalize()
            .map_err(|e| err(format!("cannot resolve the plan's directory: {e}")))?;
        let plan = Plan {
            file: path.to_path_buf(),
            dir,
            rows,
            from_file: true,
        };
        plan.check()?;
        Ok(plan)
    }

    /// A plan of one command (`batchcast run -- CMD ARGS`).
    pub fn single(
        experiment: &str,
        workload: &str,
        name: &str,
        command: &[String],
    ) -> Result<Plan, PlanError> {
        let (file, args) = command.split_first().ok_or_else(|| PlanError {
            file: "<command line>".into(),
            row: None,
            problem: "no command given after `--`".into(),
        })?;
        Ok(Plan {
            file: "<command line>".into(),
            dir: ".".into(),
            rows: vec![PlanRow::of_command(
                1,
                [experiment, workload, name],
                file,
                args,
            )],
            from_file: false,
        })
    }

    /// Writes the runs' statuses (by row) back into a CSV plan file's
    /// Status column; YAML plans, single commands and plans built in code
    /// keep theirs in the store only.
    pub fn record_status(
        &self,
        status: &std::collections::HashMap<usize, RunStatus>,
    ) -> std::io::Result<()> {
        let is_csv = self.from_file
            && self
                .file
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
        if is_csv && !status.is_empty() {
            csv::write_status(&self.file, status)?;
        }
        Ok(())
    }

    /// The workloads in plan order: `(experiment, workload, rows)`.
    pub fn workloads(&self) -> Vec<(String, String, Vec<&PlanRow>)> {
        let mut out: Vec<(String, String, Vec<&PlanRow>)> = Vec::new();
        for r in &self.rows {
            match out
                .iter_mut()
                .find(|(e, w, _)| *e == r.experiment && *w == r.workload)
            {
                Some((_, _, rows)) => rows.push(r),
                None => out.push((r.experiment.clone(), r.workload.clone(), vec![r])),
            }
        }
        out
    }

    /// Where `file` of a row is, when it names a file in the plan's
    /// directory (else it is a command on PATH).
    pub fn resolve(&self, file: &str) -> PathBuf {
        let p = Path::new(file);
        if p.is_absolute() || self.dir == Path::new(".") {
            return p.to_path_buf();
        }
        let local = self.dir.join(p);
        if local.exists() || file.contains('/') || file.ends_with(".py") {
            local
        } else {
            p.to_path_buf()
        }
    }

    /// Checks that `command` (a row's File, or the first word of its Data)
    /// can be started: a `.py` script that exists (run by the interpreter),
    /// an executable file (a path, or a name in the plan's directory), or
    /// a command on PATH. `what` names it in the message.
    fn find_command(&self, command: &str, what: &'static str) -> Result<(), CommandError> {
        use std::os::unix::fs::PermissionsExt;
        let file = self.resolve(command);
        let executable = |p: &Path| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        };
        if command.ends_with(".py") {
            return if file.is_file() {
                Ok(())
            } else {
                Err(CommandError::Missing { what, path: file })
            };
        }
        if command.contains('/') || file != Path::new(command) {
            return if executable(&file) {
                Ok(())
            } else if file.is_file() {
                Err(CommandError::NotExecutable { what, path: file })
            } else {
                Err(CommandError::Missing { what, path: file })
            };
        }
        let on_path = std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|d| executable(&d.join(command))));
        if on_path {
            Ok(())
        } else {
            Err(CommandError::NotFound {
                what,
                command: command.to_string(),
                dir: self.dir.clone(),
            })
        }
    }

    fn check(&self) -> Result<(), PlanError> {
        if self.rows.is_empty() {
            return Err(PlanError {
                file: self.file.clone(),
                row: None,
                problem: "the plan has no runs".into(),
            });
        }
        if self.rows.len() > MAX_ROWS {
            return Err(PlanError {
                file: self.file.clone(),
                row: None,
                problem: format!(
                    "the plan expands to {} runs; at most {MAX_ROWS}",
                    self.rows.len()
                ),
            });
        }
        let mut seen = std::collections::HashSet::new();
        for r in &self.rows {
            self.check_row(r, &mut seen)?;
        }
        // One shared pipeline per workload.
        for (e, w, rows) in self.workloads() {
            if rows.iter().any(|r| r.data != rows[0].data) {
                return Err(self.at(
                    rows[0].row,
                    format!(
                        "the runs of workload {e}/{w} name different Data; a workload shares one"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The error `problem` at `row` of the plan.
    fn at(&self, row: usize, problem: String) -> PlanError {
        PlanError {
            file: self.file.clone(),
            row: Some(row),
            problem,
        }
    }

    /// Checks one row: its required fields, its name (not the shared
    /// producer's, not one `seen` before in its workload), its listeners,
    /// and that its File and Data commands can be found.
    fn check_row<'p>(
        &self,
        r: &'p PlanRow,
        seen: &mut std::collections::HashSet<(&'p String, &'p String, &'p String)>,
    ) -> Result<(), PlanError> {
        for (what, v) in [
            ("Experiment", &r.experiment),
            ("Workload", &r.workload),
            ("Name", &r.name),
            ("File", &r.file),
        ] {
            if v.trim().is_empty() {
                return Err(self.at(r.row, format!("{what} is empty")));
            }
        }
        if r.name == crate::keys::DATA_RUN {
            return Err(self.at(
                r.row,
                format!(
                    "the run name {:?} is kept for the workload's shared producer",
                    r.name
                ),
            ));
        }
        if !seen.insert((&r.experiment, &r.workload, &r.name)) {
            return Err(self.at(
                r.row,
                format!(
                    "run {}/{}/{} appears twice",
                    r.experiment, r.workload, r.name
                ),
            ));
        }
        for l in &r.listeners {
            check_listener_name(l).map_err(|e| self.at(r.row, e.to_string()))?;
        }
        self.find_command(&r.file, "File")
            .map_err(|e| self.at(r.row, e.to_string()))?;
        if let Some(d) = &r.data {
            let first = shlex::split(d).and_then(|v| v.into_iter().next());
            match first {
                None => return Err(self.at(r.row, format!("Data {d:?} is not a command line"))),
                // The runner runs its own binary for `batchcast`.
                Some(f) if f == "batchcast" => {}
                Some(f) => self
                    .find_command(&f, "the Data command")
                    .map_err(|e| self.at(r.row, e.to_string()))?,
            }
        }
        Ok(())
    }
}

/// `--key value` and `--key=value` pairs of an argument list.
pub(crate) fn params_of(args: &[String]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        if let Some(flag) = args[i].strip_prefix("--").filter(|f| !f.is_empty()) {
            if let Some((k, v)) = flag.split_once('=') {
                out.push((k.to_string(), v.to_string()));
            } else if let Some(v) = args.get(i + 1).filter(|v| !v.starts_with("--")) {
                out.push((flag.to_string(), v.clone()));
                i += 1;
            } else {
                out.push((flag.to_string(), "true".into()));
            }
        }
        i += 1;
    }
    out
}

/// Splits a list cell: `0,1`, `0 1` or `0;1`.
pub(crate) fn list(cell: &str) -> Vec<String> {
    cell.split([',', ';', ' '])
        .map(str::trim)
        .filter(|s| !s.is_empty() && *s != "-")
        .map(String::from)
        .collect()
}

#[cfg(test)]
mod tests;
