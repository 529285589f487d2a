//! A dataset that grows: [`Watcher`] finds the files added to a dataset's
//! folder since the last look and appends them to the [`Dataset`], with
//! each sample's arrival time: its file's (or shard's) mtime, or the time
//! the folder's sidecar [`ARRIVALS_FILE`](super::ARRIVALS_FILE) gives it.
//!
//! - Indices are stable: new samples are appended, existing ones never
//!   move. A new ImageFolder class folder gets the next label (never the
//!   position its name would sort to); new files in a class folder (or
//!   below it) get its label. A new WebDataset shard in the folder of
//!   shards is indexed and appended.
//! - A rescan is cheap when nothing changed: it stats the folders it knows
//!   and lists only those whose mtime moved (adding or renaming a file
//!   changes its folder's mtime).
//! - Bounded: the files (samples) and folders a watch keeps track of are
//!   at most `max_files` each, else [`PipelineError::TooManyFiles`].
//!
//! A file written in place may be seen half-written: write it elsewhere on
//! the same file system and rename it into the folder (a truncated JPEG
//! is skipped at decode time like any corrupt file; a truncated shard
//! fails the rescan).

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::arrivals::Arrivals;
use super::{imagefolder, webdataset, Dataset, DatasetKind, Entry, Location};
use crate::PipelineError;

/// Files a watch keeps track of by default.
pub const DEFAULT_WATCH_MAX_FILES: usize = 10_000_000;

/// A folder the watch knows, as it last saw it.
#[derive(Debug)]
struct Folder {
    path: PathBuf,
    mtime: Option<SystemTime>,
    /// The class of the files below it (None: the dataset's root).
    label: Option<i64>,
}

/// What one rescan found and what it cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Growth {
    /// Samples appended.
    pub added: usize,
    /// ImageFolder classes appended.
    pub new_classes: usize,
    /// Earliest and latest arrival time of the samples appended, seconds
    /// since the Unix epoch.
    pub arrivals: Option<(f64, f64)>,
    /// Folders whose mtime was checked.
    pub folders_checked: usize,
    /// Folders listed (their mtime had moved, or they are new).
    pub folders_listed: usize,
    /// Wall seconds the rescan took.
    pub seconds: f64,
}

/// What a rescan found in the folders it listed, before it is indexed.
#[derive(Debug, Default)]
struct Found {
    /// New image files, with their class.
    files: Vec<(i64, PathBuf)>,
    /// New ImageFolder class folders: their names in the root.
    classes: Vec<OsString>,
    /// New WebDataset shards.
    shards: Vec<PathBuf>,
}

/// Watches a dataset's folder for new files; see the module's documentation.
#[derive(Debug)]
pub struct Watcher {
    root: PathBuf,
    kind: DatasetKind,
    folders: Vec<Folder>,
    known: HashSet<PathBuf>,
    /// Each sample's arrival time, by index.
    arrivals: Vec<f64>,
    /// The arrival times the folder's sidecar gives.
    sidecar: Arrivals,
    max_files: usize,
}

/// Seconds since the Unix epoch of `path`'s mtime (0 when unknown).
fn mtime_secs(path: &Path) -> f64 {
    fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0.0, |d| d.as_secs_f64())
}

fn mtime(path: &Path) -> Option<SystemTime> {
    fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn entry_path(e: &Entry) -> Option<&Path> {
    match &e.location {
        Location::File(p) => Some(p),
        Location::Member { .. } => None,
    }
}

impl Watcher {
    /// Starts watching `dataset` (an ImageFolder tree or a folder of
    /// WebDataset shards): records its folders and each sample's arrival
    /// time (one stat per file, or per shard).
    ///
    /// # Errors
    /// A dataset opened from one `.tar` file (there is no folder to
    /// watch), more than `max_files` samples or folders, an unreadable
    /// folder, a sidecar with a bad line.
    pub fn new(dataset: &Dataset, max_files: usize) -> Result<Watcher, PipelineError> {
        let root = dataset.root().to_path_buf();
        if !root.is_dir() {
            return Err(PipelineError::InvalidConfig(format!(
                "{} is one shard: a watch needs the folder of shards, where new ones appear; \
                 pass the folder",
                root.display()
            )));
        }
        let mut w = Watcher {
            sidecar: Arrivals::open(&root, max_files)?,
            root,
            kind: dataset.kind(),
            folders: Vec::new(),
            known: HashSet::new(),
            arrivals: Vec::with_capacity(dataset.len()),
            max_files,
        };
        w.check_files(dataset.len())?;
        w.add_folder(w.root.clone(), None)?;
        match w.kind {
            DatasetKind::ImageFolder => {
                for (label, class) in dataset.class_names().iter().enumerate() {
                    let label = i64::try_from(label).unwrap_or(i64::MAX);
                    w.add_tree(&w.root.join(class), label)?;
                }
                for e in &dataset.entries {
                    let path = entry_path(e).unwrap_or(&w.root);
                    w.arrivals.push(w.arrival_of(path));
                    w.known.insert(path.to_path_buf());
                }
            }
            DatasetKind::WebDataset => {
                let shard_times: Vec<f64> =
                    dataset.shards.iter().map(|s| w.arrival_of(s)).collect();
                w.known.extend(dataset.shards.iter().cloned());
                for e in &dataset.entries {
                    let t = match &e.location {
                        Location::Member { shard, .. } => shard_times.get(*shard as usize),
                        Location::File(_) => None,
                    };
                    w.arrivals.push(t.copied().unwrap_or(0.0));
                }
            }
        }
        Ok(w)
    }

    /// When the file (or shard) `path` arrived: the sidecar's time for it,
    /// else its mtime.
    fn arrival_of(&self, path: &Path) -> f64 {
        self.sidecar.time(path).unwrap_or_else(|| mtime_secs(path))
    }

    /// The arrival time of sample `index` (seconds since the Unix epoch),
    /// `None` past the end.
    pub fn arrival(&self, index: usize) -> Option<f64> {
        self.arrivals.get(index).copied()
    }

    /// Earliest and latest arrival among samples `from..` (None when empty).
    pub fn arrivals_since(&self, from: usize) -> Option<(f64, f64)> {
        let tail = self.arrivals.get(from..)?;
        let first = tail.iter().copied().reduce(f64::min)?;
        let last = tail.iter().copied().reduce(f64::max)?;
        Some((first, last))
    }

    fn check_files(&self, n: usize) -> Result<(), PipelineError> {
        if n > self.max_files {
            return Err(self.too_many("files"));
        }
        Ok(())
    }

    fn too_many(&self, what: &'static str) -> PipelineError {
        PipelineError::TooManyFiles {
            path: self.root.clone(),
            what,
            limit: self.max_files,
        }
    }

    /// Records a folder, its mtime read before it is listed (a file added
    /// after the listing moves the mtime again).
    fn add_folder(&mut self, path: PathBuf, label: Option<i64>) -> Result<(), PipelineError> {
        if self.folders.len() >= self.max_files {
            return Err(self.too_many("folders"));
        }
        let mtime = mtime(&path);
        self.folders.push(Folder { path, mtime, label });
        Ok(())
    }

    /// Records `dir` and every folder below it (symlinks followed, each
    /// folder once), as the class `label`.
    fn add_tree(&mut self, dir: &Path, label: i64) -> Result<(), PipelineError> {
        let mut seen = HashSet::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            if let Ok(c) = fs::canonicalize(&d) {
                if !seen.insert(c) {
                    continue;
                }
            }
            self.add_folder(d.clone(), Some(label))?;
            for item in fs::read_dir(&d).map_err(|e| PipelineError::io(&d, e))? {
                let item = item.map_err(|e| PipelineError::io(&d, e))?;
                if fs::metadata(item.path()).is_ok_and(|m| m.is_dir()) {
                    stack.push(item.path());
                }
            }
        }
        Ok(())
    }

    /// Appends to `dataset` what was added to its folder since the last
    /// look: samples at the end, new classes after the known ones.
    ///
    /// # Errors
    /// An unreadable folder, a new shard that cannot be indexed, more
    /// than the watch's `max_files` samples or folders, a sidecar with a
    /// bad line. On error the dataset is unchanged.
    pub fn rescan(&mut self, dataset: &mut Dataset) -> Result<Growth, PipelineError> {
        let t0 = Instant::now();
        self.sidecar.refresh()?;
        let mut growth = Growth {
            folders_checked: self.folders.len(),
            ..Growth::default()
        };
        let before = dataset.len();
        let mut found = self.list_changed(&mut growth)?;
        self.take_classes(dataset, &mut found, &mut growth)?;
        found.files.sort();
        found.shards.sort();
        let (entries, times) = self.index(dataset, &found)?;
        self.check_files(before + entries.len())?;
        // Nothing fails from here: the dataset and the watch change together.
        growth.added = entries.len();
        self.append(dataset, found, entries, times);
        growth.arrivals = self.arrivals_since(before);
        growth.seconds = t0.elapsed().as_secs_f64();
        Ok(growth)
    }

    /// Lists the known folders whose mtime moved, and sorts what is new in
    /// them into `Found` (the trees of new folders of a class are taken in
    /// at once).
    fn list_changed(&mut self, growth: &mut Growth) -> Result<Found, PipelineError> {
        let changed: Vec<usize> = (0..self.folders.len())
            .filter(|&i| mtime(&self.folders[i].path) != self.folders[i].mtime)
            .collect();
        let mut found = Found::default();
        for i in changed {
            let (path, label) = (self.folders[i].path.clone(), self.folders[i].label);
            self.folders[i].mtime = mtime(&path);
            growth.folders_listed += 1;
            for item in fs::read_dir(&path).map_err(|e| PipelineError::io(&path, e))? {
                let item = item.map_err(|e| PipelineError::io(&path, e))?;
                self.sort_item(&item, label, &mut found)?;
            }
        }
        Ok(found)
    }

    /// Puts `item`, an entry of a folder of class `label` (None: the
    /// root), where it belongs in `found`, unless the watch knows it.
    fn sort_item(
        &mut self,
        item: &fs::DirEntry,
        label: Option<i64>,
        found: &mut Found,
    ) -> Result<(), PipelineError> {
        let p = item.path();
        if self.known.contains(&p) {
            return Ok(());
        }
        // The entry's type needs no stat; symlinks are followed.
        let is_dir = match item.file_type() {
            Ok(t) if !t.is_symlink() => t.is_dir(),
            _ => fs::metadata(&p).is_ok_and(|m| m.is_dir()),
        };
        if is_dir && self.folders.iter().any(|f| f.path == p) {
            return Ok(());
        }
        match (self.kind, label, is_dir) {
            (DatasetKind::WebDataset, _, false) if super::has_extension(&p, "tar") => {
                found.shards.push(p)
            }
            (DatasetKind::ImageFolder, None, true) => found.classes.push(item.file_name()),
            (DatasetKind::ImageFolder, Some(l), true) => {
                self.add_tree(&p, l)?;
                found
                    .files
                    .extend(self.files_below(&p)?.into_iter().map(|f| (l, f)));
            }
            (DatasetKind::ImageFolder, Some(l), false)
                if imagefolder::is_image_name(&item.file_name()) =>
            {
                found.files.push((l, p))
            }
            _ => {}
        }
        Ok(())
    }

    /// Gives each new class folder, in name order, the next label, and
    /// takes in its tree and files.
    fn take_classes(
        &mut self,
        dataset: &Dataset,
        found: &mut Found,
        growth: &mut Growth,
    ) -> Result<(), PipelineError> {
        found.classes.sort();
        for name in &found.classes {
            let label =
                i64::try_from(dataset.class_names.len() + growth.new_classes).unwrap_or(i64::MAX);
            let dir = self.root.join(name);
            self.add_tree(&dir, label)?;
            found
                .files
                .extend(self.files_below(&dir)?.into_iter().map(|f| (label, f)));
            growth.new_classes += 1;
        }
        Ok(())
    }

    /// The entries of the new files and of the new shards' members (the
    /// shards numbered after `dataset`'s), and each one's arrival time.
    fn index(
        &self,
        dataset: &Dataset,
        found: &Found,
    ) -> Result<(Vec<Entry>, Vec<f64>), PipelineError> {
        let mut entries: Vec<Entry> = found
            .files
            .iter()
            .map(|(label, p)| Entry {
                location: Location::File(p.clone()),
                label: *label,
            })
            .collect();
        let mut times: Vec<f64> = found
            .files
            .iter()
            .map(|(_, p)| self.arrival_of(p))
            .collect();
        if !found.shards.is_empty() {
            let first = u32::try_from(dataset.shards.len()).unwrap_or(u32::MAX);
            for mut e in webdataset::index(&self.root, &found.shards)? {
                if let Location::Member { shard, .. } = &mut e.location {
                    times.push(
                        found
                            .shards
                            .get(*shard as usize)
                            .map_or(0.0, |s| self.arrival_of(s)),
                    );
                    *shard = shard.saturating_add(first);
                }
                entries.push(e);
            }
        }
        Ok((entries, times))
    }

    /// Appends what `found` indexed to `dataset` (and a WebDataset's labels
    /// beyond its classes as classes named by number), and to what the
    /// watch knows.
    fn append(
        &mut self,
        dataset: &mut Dataset,
        found: Found,
        entries: Vec<Entry>,
        times: Vec<f64>,
    ) {
        self.known.extend(found.files.into_iter().map(|(_, p)| p));
        self.known.extend(found.shards.iter().cloned());
        dataset.shards.extend(found.shards);
        dataset.class_names.extend(
            found
                .classes
                .iter()
                .map(|c| c.to_string_lossy().into_owned()),
        );
        if dataset.kind == DatasetKind::WebDataset {
            let max_label = entries.iter().map(|e| e.label).max().unwrap_or(-1);
            while (dataset.class_names.len() as i64) <= max_label {
                dataset
                    .class_names
                    .push(dataset.class_names.len().to_string());
            }
        }
        dataset.entries.extend(entries);
        self.arrivals.extend(times);
    }

    /// Image files below `dir`, in ImageFolder's order.
    fn files_below(&self, dir: &Path) -> Result<Vec<PathBuf>, PipelineError> {
        let mut files = Vec::new();
        imagefolder::walk(dir, &mut HashSet::new(), &mut files)?;
        Ok(files
            .into_iter()
            .map(|(d, name)| d.join(name))
            .filter(|p| !self.known.contains(p))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, b"x").unwrap();
    }

    fn names(ds: &Dataset, from: usize) -> Vec<(String, i64)> {
        (from..ds.len())
            .map(|i| {
                let n = ds.sample_name(i).unwrap();
                let rel = Path::new(&n).strip_prefix(ds.root()).unwrap();
                (rel.display().to_string(), ds.label(i).unwrap())
            })
            .collect()
    }

    #[test]
    fn new_files_and_classes_are_appended_with_stable_labels() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for f in ["cat/a.jpg", "cat/b.jpg", "dog/a.jpg"] {
            write(root, f);
        }
        let mut ds = Dataset::open(root).unwrap();
        let mut w = Watcher::new(&ds, 100).unwrap();
        assert!(w.arrival(2).unwrap() > 1.0e9);
        let quiet = w.rescan(&mut ds).unwrap();
        assert_eq!((quiet.added, quiet.folders_listed), (0, 0));
        assert_eq!(quiet.folders_checked, 3);
        // "ant" sorts first but gets the next label; a nested folder in a
        // known class takes its label.
        for f in [
            "ant/x.jpg",
            "ant/y.png",
            "dog/b.jpg",
            "cat/sub/c.jpg",
            "dog/n.txt",
        ] {
            write(root, f);
        }
        let g = w.rescan(&mut ds).unwrap();
        assert_eq!((g.added, g.new_classes), (4, 1));
        assert!(g.arrivals.is_some());
        assert_eq!(ds.class_names(), ["cat", "dog", "ant"]);
        assert_eq!(
            names(&ds, 0),
            [
                ("cat/a.jpg".into(), 0),
                ("cat/b.jpg".into(), 0),
                ("dog/a.jpg".into(), 1),
                ("cat/sub/c.jpg".into(), 0),
                ("dog/b.jpg".into(), 1),
                ("ant/x.jpg".into(), 2),
                ("ant/y.png".into(), 2),
            ]
        );
        assert_eq!(w.rescan(&mut ds).unwrap().added, 0);
        write(root, "cat/sub/d.jpg");
        assert_eq!(names(&ds, 7), []);
        assert_eq!(w.rescan(&mut ds).unwrap().added, 1);
        assert_eq!(names(&ds, 7), [("cat/sub/d.jpg".into(), 0)]);
    }

    #[test]
    fn the_sidecar_gives_arrival_times_where_it_names_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "cat/a.jpg");
        write(root, "cat/b.jpg");
        let sidecar = root.join(super::super::ARRIVALS_FILE);
        fs::write(&sidecar, "path,timestamp\ncat/a.jpg,1000\n").unwrap();
        let mut ds = Dataset::open(root).unwrap();
        let mut w = Watcher::new(&ds, 100).unwrap();
        assert_eq!(w.arrival(0), Some(1000.0));
        assert!(w.arrival(1).unwrap() > 1.0e9, "no row: its mtime");
        // Rows for the new files, written before the files are.
        fs::write(
            &sidecar,
            "path,timestamp\ncat/a.jpg,1000\ncat/c.jpg,2000\ndog/d.jpg,3000.5\n",
        )
        .unwrap();
        write(root, "cat/c.jpg");
        write(root, "dog/d.jpg");
        let g = w.rescan(&mut ds).unwrap();
        assert_eq!((g.added, g.arrivals), (2, Some((2000.0, 3000.5))));
        // A bad line fails the rescan, naming it, and changes nothing.
        fs::write(&sidecar, "path,timestamp\ncat/e.jpg,later\n").unwrap();
        write(root, "cat/e.jpg");
        let err = w.rescan(&mut ds).unwrap_err().to_string();
        assert!(err.contains("batchcast-arrivals.csv:2: "), "{err}");
        assert_eq!(ds.len(), 4);
        fs::write(&sidecar, "path,timestamp\ncat/e.jpg,4000\n").unwrap();
        assert_eq!(w.rescan(&mut ds).unwrap().arrivals, Some((4000.0, 4000.0)));
    }

    #[test]
    fn growth_past_the_bound_is_refused_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["cat/a.jpg", "cat/b.jpg"] {
            write(dir.path(), f);
        }
        let mut ds = Dataset::open(dir.path()).unwrap();
        let err = Watcher::new(&ds, 1).unwrap_err().to_string();
        assert!(err.contains("more than 1 files"), "{err}");
        let mut w = Watcher::new(&ds, 3).unwrap();
        for f in ["cat/c.jpg", "cat/d.jpg"] {
            write(dir.path(), f);
        }
        let err = w.rescan(&mut ds).unwrap_err().to_string();
        assert!(err.contains("--watch-max-files"), "{err}");
        assert_eq!(ds.len(), 2);
    }

    #[test]
    fn new_shards_are_indexed_and_appended() {
        let dir = tempfile::tempdir().unwrap();
        let shard = |name: &str, label: i64| {
            let mut w = crate::WebDatasetWriter::create(&dir.path().join(name)).unwrap();
            w.add_sample("k0", "jpg", b"img", label).unwrap();
            w.finish().unwrap();
        };
        shard("a.tar", 0);
        let mut ds = Dataset::open(dir.path()).unwrap();
        let mut w = Watcher::new(&ds, 10).unwrap();
        shard("b.tar", 3);
        let g = w.rescan(&mut ds).unwrap();
        assert_eq!(g.added, 1);
        assert_eq!(ds.label(1), Some(3));
        assert_eq!(ds.num_classes(), 4);
        assert!(
            ds.sample_name(1).unwrap().ends_with("b.tar:k0.jpg"),
            "{:?}",
            ds.sample_name(1)
        );
        let mut buf = Vec::new();
        ds.read_sample(1, &mut buf).unwrap();
        assert_eq!(buf, b"img");
    }
}
