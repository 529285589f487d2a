//! The run store holds command lines, environments and output: another
//! local user may read none of it. What `Store::open` creates is 0700 (its
//! directories) and 0600 (the file and SQLite's WAL files beside it),
//! whatever the umask lets through.

mod common;

use std::os::unix::fs::PermissionsExt;

use batchcast_store::Store;
use common::Fixture;

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_new_store_and_its_directories_are_the_owners_only() {
    let mut f = Fixture::at("data/batchcast/runs.sqlite");
    f.run("r");
    let Fixture {
        dir, path, store, ..
    } = f;
    assert_eq!(mode(&dir.path().join("data")), 0o700);
    assert_eq!(mode(&dir.path().join("data/batchcast")), 0o700);
    assert_eq!(mode(&path), 0o600);
    let wal = path.with_extension("sqlite-wal");
    assert!(wal.exists(), "the store is in WAL mode");
    assert_eq!(mode(&wal), 0o600);
    drop(store);
    // Reopened, it is the same store.
    let store = Store::open(&path).unwrap();
    assert_eq!(store.experiments().unwrap().len(), 1);
}

#[test]
fn an_existing_file_keeps_its_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    drop(Store::open(&path).unwrap());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    drop(Store::open(&path).unwrap());
    assert_eq!(mode(&path), 0o640);
}
