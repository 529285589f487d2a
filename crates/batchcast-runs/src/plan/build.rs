//! Plans built in code, for commands that run their own experiments
//! (`batchcast demo`): the same rows and the same checks as a plan file,
//! without a file.

use std::path::{Path, PathBuf};

use super::{Plan, PlanError, PlanRow};

/// Builds a [`Plan`] row by row; [`PlanBuilder::build`] checks it as
/// [`Plan::load`] checks a file.
#[derive(Clone, Debug)]
pub struct PlanBuilder {
    label: PathBuf,
    dir: PathBuf,
    rows: Vec<PlanRow>,
    data: Vec<(String, String, Vec<String>)>,
}

impl Plan {
    /// A plan built in code. `label` stands for the plan's file in
    /// messages and in the store (such as `<batchcast demo>`); relative
    /// commands are resolved against `dir`, where the jobs also start.
    pub fn builder(label: &str, dir: &Path) -> PlanBuilder {
        PlanBuilder {
            label: label.into(),
            dir: dir.to_path_buf(),
            rows: Vec::new(),
            data: Vec::new(),
        }
    }
}

impl PlanBuilder {
    /// Adds the run `name` of `workload` in `experiment`, which runs
    /// `command` (program and arguments; `--key value` arguments are also
    /// its parameters). Returns the row, for its devices, collocation and
    /// listeners (default: none, all listeners, `-`).
    pub fn run(
        &mut self,
        experiment: &str,
        workload: &str,
        name: &str,
        command: &[String],
    ) -> &mut PlanRow {
        let (file, args) = command
            .split_first()
            .map_or(("", &[][..]), |(f, a)| (f.as_str(), a));
        self.rows.push(PlanRow::of_command(
            self.rows.len() + 1,
            [experiment, workload, name],
            file,
            args,
        ));
        let last = self.rows.len() - 1;
        &mut self.rows[last]
    }

    /// Gives `workload` of `experiment` a shared producer: `command`
    /// (program and arguments; `batchcast` runs the runner's own binary).
    pub fn data(&mut self, experiment: &str, workload: &str, command: &[String]) -> &mut Self {
        self.data
            .push((experiment.into(), workload.into(), command.to_vec()));
        self
    }

    /// The checked plan: refused as a plan file would be (an empty command,
    /// a command that is not there, a duplicate run, a Data given to a
    /// workload without runs).
    pub fn build(self) -> Result<Plan, PlanError> {
        let PlanBuilder {
            label,
            dir,
            mut rows,
            data,
        } = self;
        for (experiment, workload, command) in data {
            let line =
                shlex::try_join(command.iter().map(String::as_str)).map_err(|e| PlanError {
                    file: label.clone(),
                    row: None,
                    problem: format!("the Data of workload {experiment}/{workload}: {e}"),
                })?;
            let mut found = false;
            for r in rows
                .iter_mut()
                .filter(|r| r.experiment == experiment && r.workload == workload)
            {
                r.data = Some(line.clone());
                found = true;
            }
            if !found {
                return Err(PlanError {
                    file: label,
                    row: None,
                    problem: format!(
                        "Data is given to workload {experiment}/{workload}, which has no runs"
                    ),
                });
            }
        }
        let plan = Plan {
            file: label,
            dir,
            rows,
        };
        plan.check()?;
        Ok(plan)
    }
}
