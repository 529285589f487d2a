//! CSV plans: one row per run.
//!
//! Columns (any order, names case-insensitive): `Experiment, Workload, Name,
//! Status, Devices, Collocation, Listeners, Data, File, Params`. The first
//! four of `Experiment, Workload, Name, File` are required.

use std::collections::HashMap;
use std::path::Path;

use super::{list, params_of, Collocation, PlanError, PlanRow};
use crate::RunStatus;

pub(crate) const COLUMNS: &[&str] = &[
    "Experiment",
    "Workload",
    "Name",
    "Status",
    "Devices",
    "Collocation",
    "Listeners",
    "Data",
    "File",
    "Params",
];
const REQUIRED: &[&str] = &["Experiment", "Workload", "Name", "File"];

pub(crate) fn parse(path: &Path, text: &str) -> Result<Vec<PlanRow>, PlanError> {
    let err = |row: Option<usize>, problem: String| PlanError {
        file: path.to_path_buf(),
        row,
        problem,
    };
    let mut reader = ::csv::ReaderBuilder::new()
        .trim(::csv::Trim::All)
        .flexible(false)
        .from_reader(text.as_bytes());
    let header = reader
        .headers()
        .map_err(|e| err(None, format!("cannot read the header: {e}")))?
        .clone();
    let index = columns(&header, &|p| err(None, p))?;
    let mut rows = Vec::new();
    for (n, record) in reader.records().enumerate() {
        let row = n + 1;
        let at = |p: String| err(Some(row), p);
        let record = record.map_err(|e| at(format!("{e}")))?;
        rows.push(plan_row(row, &record, &index, &at)?);
    }
    Ok(rows)
}

/// Each known column's position in `header` (names case-insensitive),
/// once none is unknown or twice and the required ones are there.
fn columns(
    header: &::csv::StringRecord,
    err: &impl Fn(String) -> PlanError,
) -> Result<HashMap<&'static str, usize>, PlanError> {
    let mut index: HashMap<&'static str, usize> = HashMap::new();
    for (i, name) in header.iter().enumerate() {
        let Some(col) = COLUMNS.iter().find(|c| c.eq_ignore_ascii_case(name)) else {
            return Err(err(format!(
                "unknown column {name:?}; the columns are {}",
                COLUMNS.join(", ")
            )));
        };
        if index.insert(col, i).is_some() {
            return Err(err(format!("column {col} appears twice")));
        }
    }
    if let Some(missing) = REQUIRED.iter().find(|c| !index.contains_key(*c)) {
        return Err(err(format!(
            "the column {missing} is missing; a plan needs {}",
            REQUIRED.join(", ")
        )));
    }
    Ok(index)
}

/// The run that `record`, the plan's `row`-th, describes.
fn plan_row(
    row: usize,
    record: &::csv::StringRecord,
    index: &HashMap<&'static str, usize>,
    at: &impl Fn(String) -> PlanError,
) -> Result<PlanRow, PlanError> {
    let cell = |c: &str| {
        index
            .get(c)
            .and_then(|&i| record.get(i))
            .unwrap_or("")
            .to_string()
    };
    let params_cell = cell("Params");
    let args = shlex::split(&params_cell)
        .ok_or_else(|| at(format!("Params {params_cell:?} has an unclosed quote")))?;
    let status = match cell("Status").trim() {
        "" | "-" => None,
        s => Some(s.parse::<RunStatus>().map_err(|_| {
            at(format!(
                "Status {s:?} is none of RUNNING, FINISHED, FAILED, KILLED (or empty)"
            ))
        })?),
    };
    let data = Some(cell("Data")).filter(|d| !d.trim().is_empty() && d.trim() != "-");
    Ok(PlanRow {
        row,
        experiment: cell("Experiment"),
        workload: cell("Workload"),
        name: cell("Name"),
        status,
        devices: list(&cell("Devices")),
        collocation: Collocation::parse(&cell("Collocation")).map_err(|e| at(e.to_string()))?,
        listeners: list(&cell("Listeners")),
        data,
        file: cell("File"),
        params: params_of(&args),
        args,
    })
}

/// Writes the runs' statuses back into the plan's Status column (adding
/// it when missing), replacing the file atomically.
pub(crate) fn write_status(path: &Path, status: &HashMap<usize, RunStatus>) -> std::io::Result<()> {
    let text = batchcast_store::bounded::read_text(path, super::MAX_PLAN_BYTES)?;
    let mut reader = ::csv::ReaderBuilder::new()
        .flexible(false)
        .from_reader(text.as_bytes());
    let mut header: Vec<String> = reader
        .headers()
        .map_err(std::io::Error::other)?
        .iter()
        .map(String::from)
        .collect();
    let col = match header
        .iter()
        .position(|h| h.trim().eq_ignore_ascii_case("Status"))
    {
        Some(c) => c,
        None => {
            header.push("Status".into());
            header.len() - 1
        }
    };
    let tmp = path.with_extension("csv.batchcast-tmp");
    {
        let mut w = ::csv::Writer::from_path(&tmp)?;
        w.write_record(&header)?;
        for (n, rec) in reader.records().enumerate() {
            let mut cells: Vec<String> = rec
                .map_err(std::io::Error::other)?
                .iter()
                .map(String::from)
                .collect();
            cells.resize(header.len(), String::new());
            if let Some(s) = status.get(&(n + 1)) {
                cells[col] = s.as_str().to_string();
            }
            w.write_record(&cells)?;
        }
        w.flush()?;
    }
    std::fs::rename(&tmp, path)
}
