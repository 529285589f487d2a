//! The demo's JPEG dataset, generated once into a cache directory, which
//! also holds the demo's run store unless told otherwise.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use super::DemoArgs;

/// Generates (once) or reuses the demo's JPEG dataset.
pub(super) fn demo_dataset(args: &DemoArgs) -> Result<PathBuf> {
    use batchcast_pipeline::{generate_jpeg_dataset, GenerateConfig};
    let cache = match &args.cache_dir {
        Some(d) => d.clone(),
        None => default_cache_dir(),
    };
    let classes = 10;
    let config = GenerateConfig {
        classes,
        images_per_class: args.images.div_ceil(classes).max(1),
        ..GenerateConfig::default()
    };
    let dir = cache.join(format!("demo-jpeg-{}", config.total()));
    let bar = (!args.json && std::io::stderr().is_terminal()).then(|| {
        let bar = ProgressBar::new(config.total() as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "  generating the demo dataset [{bar:30}] {pos}/{len} JPEGs {per_sec}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar
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

/// `$XDG_CACHE_HOME/batchcast`, else `~/.cache/batchcast`, else a temp dir.
pub(super) fn default_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("batchcast");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(h).join(".cache").join("batchcast");
    }
    std::env::temp_dir().join("batchcast-cache")
}
