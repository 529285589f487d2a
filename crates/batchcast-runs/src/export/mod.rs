//! Exports of the store, for tools that do not read it: metrics as CSV
//! (long format, ready for pandas or a spreadsheet), and whole runs as an
//! MLflow file store (`mlflow ui`, `mlflow.search_runs`).

mod csv;
mod mlflow;

pub use self::csv::{metrics_csv, metrics_csv_file};
pub use self::mlflow::{mlflow_key, to_mlflow, MlflowExport};
