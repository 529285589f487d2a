//! What every handler shares: where the store is, and the access rules.

use std::path::PathBuf;
use std::sync::Arc;

use batchcast_store::Store;

use crate::error::UiError;

/// Shared by every request; cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct AppState(pub(crate) Arc<Shared>);

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: PathBuf,
    /// Required on every request when set (the default; `--no-token`
    /// clears it on loopback).
    pub(crate) token: Option<String>,
    /// The cookie that carries the token: named after the port, so that
    /// two dashboards on one machine do not overwrite each other's.
    pub(crate) cookie: String,
    /// Only loopback `Host` names are accepted when set (local address).
    pub(crate) loopback_only: bool,
}

impl AppState {
    /// Runs `f` on a fresh read-only connection, off the async threads
    /// (SQLite blocks). A store that is missing or foreign is an error here,
    /// at every request, so replacing the file is noticed.
    pub(crate) async fn read<T, F>(&self, f: F) -> Result<T, UiError>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T, UiError> + Send + 'static,
    {
        let path = self.0.store.clone();
        tokio::task::spawn_blocking(move || {
            let store = Store::open_read_only(&path)?;
            f(&store)
        })
        .await
        .map_err(|e| UiError::Internal(format!("reader thread: {e}")))?
    }
}
