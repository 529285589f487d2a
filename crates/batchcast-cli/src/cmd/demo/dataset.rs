//! The demo's JPEG dataset, generated once into a cache directory, which
//! also holds the demo's run store unless told otherwise.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::DemoArgs;

/// Generates (once) or reuses the demo's JPEG dataset.
pub(super) fn demo_dataset(args: &DemoArgs) -> Result<PathBuf> {
    use batchcast_pipeline::{generate_jpeg_dataset, GenerateConfig};
    let cache = match &args.cache_dir {
        Some(d) => d.clone(),
        None => default_cache_dir()?,
    };
    let classes = 10;
    let config = GenerateConfig {
        classes,
        images_per_class: args.images.div_ceil(classes).max(1),
        ..GenerateConfig::default()
    };
    let dir = cache.join(format!("demo-jpeg-{}", config.total()));
    let bar = (!args.json && std::io::stderr().is_terminal()).then(|| {
        crate::progress::bar(
            config.total() as u64,
            "  generating the demo dataset [{bar:30}] {pos}/{len} JPEGs {per_sec}",
        )
    });
    let progress = |done: usize, _total: usize| {
        if let Some(bar) = &bar {
            bar.set_position(done as u64);
        }
    };
    std::fs::create_dir_all(&cache)
        .with_context(|| format!("cannot create the cache directory {}", cache.display()))?;
    let made = generate_jpeg_dataset(&dir, &config, &progress)
        .with_context(|| format!("cannot generate the demo dataset in {}", dir.display()))?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if !made.reused && !args.json {
        eprintln!(
            "generated {} JPEGs in {} (reused from now on)",
            made.images,
            dir.display()
        );
    }
    Ok(made.path)
}

/// `$XDG_CACHE_HOME/batchcast`, else `~/.cache/batchcast`, else this
/// user's own directory in the temp dir (see [`private_temp_cache`]).
pub(super) fn default_cache_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d).join("batchcast"));
    }
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(h).join(".cache").join("batchcast"));
    }
    private_temp_cache(&std::env::temp_dir())
}

/// `TMP/batchcast-cache-UID`, created 0700; refused unless it is a
/// directory (not a symlink) owned by this user that no one else can
/// enter, since another user could otherwise plant the dataset or the
/// run store the demo reads.
fn private_temp_cache(tmp: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let uid = rustix::process::getuid().as_raw();
    let dir = tmp.join(format!("batchcast-cache-{uid}"));
    let fix = "set HOME or XDG_CACHE_HOME, or give --cache-dir and --store";
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => bail!(
            "cannot create the cache directory {}: {e}; {fix}",
            dir.display()
        ),
    }
    let meta = std::fs::symlink_metadata(&dir)
        .with_context(|| format!("cannot inspect the cache directory {}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        bail!(
            "refusing the cache directory {}: it is not a directory of uid {uid} that only its \
             owner can enter (mode 0700, not a symlink); {fix}",
            dir.display()
        );
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_temp_cache_is_private_and_a_planted_one_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = private_temp_cache(tmp.path()).unwrap();
        let mode = std::fs::symlink_metadata(&dir)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        // Reused when it is already there and private.
        assert_eq!(private_temp_cache(tmp.path()).unwrap(), dir);

        // Open to others: refused, with the fix.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = private_temp_cache(tmp.path()).unwrap_err().to_string();
        assert!(e.contains("refusing") && e.contains("set HOME"), "{e}");

        // A symlink to a private directory: refused.
        std::fs::remove_dir(&dir).unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
        let e = private_temp_cache(tmp.path()).unwrap_err().to_string();
        assert!(e.contains("not a symlink"), "{e}");
    }
}
