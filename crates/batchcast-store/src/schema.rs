//! The store's tables, and how a file becomes (or is checked to be) one.
//!
//! A store is recognised by SQLite's `application_id` header field; its
//! layout version is `user_version`. A newer layout is refused rather than
//! misread; an older one is migrated forward in one transaction.

use rusqlite::Connection;

/// "bcst": marks a SQLite file as a batchcast run store.
pub(crate) const APPLICATION_ID: i64 = 0x6263_7374;
/// The layout this code writes and reads.
pub(crate) const SCHEMA_VERSION: i64 = 2;
/// The oldest layout readers still read as it stands (a writer migrates it).
pub(crate) const OLDEST_READABLE: i64 = 1;

/// Layout version 1.
///
/// Times are milliseconds since the Unix epoch (UTC). JSON columns hold
/// values written by `serde_json` from the types in `model.rs`.
pub(crate) const SCHEMA_V1: &str = r#"
CREATE TABLE experiments (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_ms  INTEGER NOT NULL
);
CREATE TABLE workloads (
    id             INTEGER PRIMARY KEY,
    experiment_id  INTEGER NOT NULL REFERENCES experiments(id),
    name           TEXT NOT NULL,
    data           TEXT,              -- the shared pipeline's command, NULL: own loaders
    position       INTEGER NOT NULL,  -- order in the plan
    UNIQUE (experiment_id, name)
);
CREATE TABLE runs (
    id           INTEGER PRIMARY KEY,
    workload_id  INTEGER NOT NULL REFERENCES workloads(id),
    name         TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('PENDING','RUNNING','FINISHED','FAILED','KILLED')),
    command      TEXT NOT NULL,       -- JSON array: argv
    devices      TEXT NOT NULL,       -- JSON array of GPU indices or UUIDs; [] = CPU
    collocation  TEXT NOT NULL,       -- '-', 'MPS' or a MIG profile
    listeners    TEXT NOT NULL,       -- JSON array of listener names
    host         TEXT NOT NULL,
    plan_file    TEXT,
    plan_row     INTEGER,
    pid          INTEGER,             -- the job's process (group leader)
    runner_pid   INTEGER,             -- the runner that owns the run while RUNNING
    runner_start INTEGER,             -- its start time (clock ticks since boot), against pid reuse
    start_ms     INTEGER,
    end_ms       INTEGER,
    exit_code    INTEGER,
    message      TEXT,                -- why it failed or was killed
    env          TEXT NOT NULL DEFAULT '{}',  -- JSON object: host facts, GPUs, versions
    UNIQUE (workload_id, name)
);
CREATE INDEX runs_status ON runs(status);
CREATE TABLE params (
    run_id  INTEGER NOT NULL REFERENCES runs(id),
    key     TEXT NOT NULL,
    value   TEXT NOT NULL,
    source  TEXT NOT NULL CHECK (source IN ('plan','logged')),
    PRIMARY KEY (run_id, key)
);
CREATE TABLE metrics (
    run_id  INTEGER NOT NULL REFERENCES runs(id),
    key     TEXT NOT NULL,
    step    INTEGER NOT NULL,
    ts_ms   INTEGER NOT NULL,
    value   REAL NOT NULL
);
CREATE INDEX metrics_run_key_ts ON metrics(run_id, key, ts_ms);
CREATE TABLE logs (
    run_id  INTEGER NOT NULL REFERENCES runs(id),
    stream  TEXT NOT NULL CHECK (stream IN ('stdout','stderr')),
    seq     INTEGER NOT NULL,
    ts_ms   INTEGER NOT NULL,
    data    BLOB NOT NULL,
    PRIMARY KEY (run_id, stream, seq)
);
CREATE TABLE events (
    run_id  INTEGER NOT NULL REFERENCES runs(id),
    ts_ms   INTEGER NOT NULL,
    source  TEXT NOT NULL,            -- 'runner', a listener's name, ...
    message TEXT NOT NULL
);
CREATE INDEX events_run ON events(run_id, ts_ms);
"#;

/// Layout version 2: the job's start time beside its pid, so that a later
/// runner finds a job its dead runner left running, and not a process that
/// reused the pid.
pub(crate) const SCHEMA_V2: &str = r#"
ALTER TABLE runs ADD COLUMN pid_start INTEGER;  -- the job's start (clock ticks since boot)
"#;

/// Makes an empty database a store of the current layout, or migrates an
/// older store forward, in one transaction. Runners that
/// start together race here: the write lock of `BEGIN IMMEDIATE` lets one
/// create the tables, and the others find them made.
pub(crate) fn create(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let made = (|| {
        match inspect(conn)? {
            Found::Empty => {
                conn.execute_batch(SCHEMA_V1)?;
                conn.execute_batch(SCHEMA_V2)?;
                conn.execute_batch(&format!(
                    "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION};"
                ))?;
            }
            Found::Store(1) => {
                conn.execute_batch(SCHEMA_V2)?;
                conn.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION};"))?;
            }
            _ => {}
        }
        Ok(())
    })();
    match made {
        Ok(()) => conn.execute_batch("COMMIT"),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// What the header of an existing file says.
pub(crate) enum Found {
    /// A file SQLite sees as empty: no tables yet.
    Empty,
    /// A batchcast store of this layout version.
    Store(i64),
    /// Some other SQLite database.
    Foreign(i64),
}

pub(crate) fn inspect(conn: &Connection) -> rusqlite::Result<Found> {
    let app: i64 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
    Ok(match app {
        APPLICATION_ID => Found::Store(version),
        0 if tables == 0 => Found::Empty,
        other => Found::Foreign(other),
    })
}
