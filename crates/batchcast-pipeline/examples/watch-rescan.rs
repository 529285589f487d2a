//! What watching a growing dataset costs: `Watcher::new` and `rescan` on an
//! ImageFolder of N files (default 10,000, in 100 class folders), when
//! nothing changed and after 100 files were added.
//!
//! `cargo run --release -p batchcast-pipeline --example watch-rescan -- [N]`

use std::time::Instant;

use batchcast_pipeline::{Dataset, Watcher, DEFAULT_WATCH_MAX_FILES};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = match std::env::args().nth(1) {
        Some(a) => a.parse()?,
        None => 10_000,
    };
    let classes = 100;
    let dir = tempfile::tempdir()?;
    for i in 0..n {
        let class = dir.path().join(format!("c{:03}", i % classes));
        std::fs::create_dir_all(&class)?;
        std::fs::write(class.join(format!("{i:07}.jpg")), b"x")?;
    }
    let t = Instant::now();
    let mut ds = Dataset::open(dir.path())?;
    let open = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut watch = Watcher::new(&ds, DEFAULT_WATCH_MAX_FILES)?;
    let start = t.elapsed().as_secs_f64();
    let quiet: Vec<f64> = (0..21)
        .map(|_| watch.rescan(&mut ds).map(|g| g.seconds))
        .collect::<Result<_, _>>()?;
    for i in 0..100 {
        let class = dir.path().join(format!("c{:03}", i % classes));
        std::fs::write(class.join(format!("new{i:04}.jpg")), b"x")?;
    }
    let grown = watch.rescan(&mut ds)?;
    println!(
        "{n} files in {classes} folders: open {:.1} ms, Watcher::new {:.1} ms, rescan with \
         nothing changed {:.3} ms (median of 21, {} folders checked), after 100 files added \
         {:.2} ms ({} added, {} folders listed)",
        open * 1e3,
        start * 1e3,
        median(quiet) * 1e3,
        grown.folders_checked,
        grown.seconds * 1e3,
        grown.added,
        grown.folders_listed,
    );
    Ok(())
}
