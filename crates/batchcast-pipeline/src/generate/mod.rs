//! A synthetic ImageFolder of JPEGs for demos, tests and benchmarks.
//!
//! Images are ImageNet-like in size (by default the long side 400-600 px,
//! aspect 1.0-1.6, one in five portrait: about 500x375 on average) and not
//! trivially compressible (gradients, shapes, a texture and pixel noise,
//! 4:2:0 chroma), so decoding them costs what decoding real photos costs.
//! Content depends only on the seed, class and index: the same config gives
//! the same images with any number of threads (bit-identical files on one
//! platform; `sin` may differ in the last bit elsewhere).
//!
//! The dataset is written to a temporary sibling directory and renamed into
//! place when complete, with a marker file recording the config: a later call
//! with the same config reuses it, one with another config replaces it. A
//! directory without the marker is never touched.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use rayon::prelude::*;

use crate::PipelineError;

mod drift;
mod synth;
pub use drift::{class_split, generate_drifting_trace, DriftConfig, TRACE_FILE};
use synth::synth_jpeg;

/// Name of the marker file at the root of a generated dataset.
pub const MARKER_FILE: &str = ".batchcast-dataset";

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateConfig {
    /// Number of class folders (`class_000`, `class_001`, ...).
    pub classes: usize,
    /// Images in each class folder.
    pub images_per_class: usize,
    /// Range of the longer side in pixels (inclusive).
    pub long_side: (u32, u32),
    /// Range of the aspect ratio, longer side over shorter side (>= 1).
    pub aspect: (f32, f32),
    /// Fraction of images in portrait orientation.
    pub portrait_fraction: f32,
    /// Seed of all content.
    pub seed: u64,
    /// JPEG quality, 1-100.
    pub quality: u8,
}

impl Default for GenerateConfig {
    /// 10 classes x 200 images, ImageNet-like sizes, quality 90, seed 0.
    fn default() -> Self {
        GenerateConfig {
            classes: 10,
            images_per_class: 200,
            long_side: (400, 600),
            aspect: (1.0, 1.6),
            portrait_fraction: 0.2,
            seed: 0,
            quality: 90,
        }
    }
}

impl GenerateConfig {
    /// Total number of images.
    pub fn total(&self) -> usize {
        self.classes * self.images_per_class
    }

    fn validate(&self) -> Result<(), PipelineError> {
        let ok = self.classes > 0
            && self.images_per_class > 0
            && self.long_side.0 >= 1
            && self.long_side.0 <= self.long_side.1
            && self.long_side.1 <= 8192
            && self.aspect.0 >= 1.0
            && self.aspect.0 <= self.aspect.1
            && self.aspect.1 <= 16.0
            && (0.0..=1.0).contains(&self.portrait_fraction)
            && (1..=100).contains(&self.quality);
        if ok {
            Ok(())
        } else {
            Err(PipelineError::InvalidConfig(format!(
                "dataset generation config {self:?}: need classes and images_per_class >= 1, \
                 1 <= long_side.0 <= long_side.1 <= 8192, 1 <= aspect.0 <= aspect.1 <= 16, \
                 portrait_fraction in [0, 1], quality in 1..=100"
            )))
        }
    }

    fn marker(&self) -> String {
        format!(
            "batchcast-pipeline synthetic JPEG dataset v2\nclasses={}\nimages_per_class={}\n\
             long_side={}-{}\naspect={}-{}\nportrait_fraction={}\nseed={}\nquality={}\n",
            self.classes,
            self.images_per_class,
            self.long_side.0,
            self.long_side.1,
            self.aspect.0,
            self.aspect.1,
            self.portrait_fraction,
            self.seed,
            self.quality
        )
    }
}

/// The result of [`generate_jpeg_dataset`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedDataset {
    /// The dataset directory (an ImageFolder root).
    pub path: PathBuf,
    /// Number of images in it.
    pub images: usize,
    /// True when an existing dataset with the same config was reused.
    pub reused: bool,
}

/// Generates (or reuses) a synthetic ImageFolder of JPEGs at `dir`.
/// `progress(done, total)` is called as images are written, from worker
/// threads (rayon's global pool).
///
/// # Errors
/// An invalid config, `dir` existing without this crate's marker, or an I/O
/// error (the partial output is removed).
pub fn generate_jpeg_dataset(
    dir: &Path,
    config: &GenerateConfig,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<GeneratedDataset, PipelineError> {
    config.validate()?;
    let done = GeneratedDataset {
        path: dir.to_path_buf(),
        images: config.total(),
        reused: true,
    };
    let replace = match existing(dir, config)? {
        Existing::Same => return Ok(done),
        Existing::Other => true,
        Existing::None => false,
    };
    let name = dir
        .file_name()
        .ok_or_else(|| PipelineError::InvalidConfig(format!("{} has no name", dir.display())))?
        .to_string_lossy()
        .into_owned();
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).map_err(|e| PipelineError::write(&parent, e))?;
    let tag = unique_tag();
    let tmp = parent.join(format!(".{name}.tmp-{tag}"));
    let result = write_all(&tmp, config, progress).and_then(|()| {
        if replace {
            let old = parent.join(format!(".{name}.old-{tag}"));
            fs::rename(dir, &old).map_err(|e| PipelineError::write(dir, e))?;
            fs::rename(&tmp, dir).map_err(|e| PipelineError::write(dir, e))?;
            let _ = fs::remove_dir_all(&old);
            Ok(false)
        } else {
            match fs::rename(&tmp, dir) {
                Ok(()) => Ok(false),
                // Another process finished the same dataset first.
                Err(_) if matches!(existing(dir, config), Ok(Existing::Same)) => Ok(true),
                Err(e) => Err(PipelineError::write(dir, e)),
            }
        }
    });
    let _ = fs::remove_dir_all(&tmp);
    let reused = result?;
    Ok(GeneratedDataset { reused, ..done })
}

enum Existing {
    None,
    Same,
    Other,
}

/// What is at `dir` now: nothing (or an empty directory), our dataset with
/// this config, or our dataset with another config. Anything else is refused.
fn existing(dir: &Path, config: &GenerateConfig) -> Result<Existing, PipelineError> {
    if !dir.exists() {
        return Ok(Existing::None);
    }
    match fs::read_to_string(dir.join(MARKER_FILE)) {
        Ok(text) if text == config.marker() => Ok(Existing::Same),
        Ok(_) => Ok(Existing::Other),
        Err(_) => {
            let empty = fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none());
            if empty {
                fs::remove_dir(dir).map_err(|e| PipelineError::write(dir, e))?;
                Ok(Existing::None)
            } else {
                Err(PipelineError::RefuseOverwrite { path: dir.into() })
            }
        }
    }
}

fn unique_tag() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{}-{nanos}", std::process::id())
}

fn write_all(
    root: &Path,
    config: &GenerateConfig,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<(), PipelineError> {
    fs::create_dir(root).map_err(|e| PipelineError::write(root, e))?;
    for class in 0..config.classes {
        let d = root.join(class_dir(class));
        fs::create_dir(&d).map_err(|e| PipelineError::write(&d, e))?;
    }
    let total = config.total();
    let counter = AtomicUsize::new(0);
    (0..total).into_par_iter().try_for_each(|n| {
        let (class, i) = (n / config.images_per_class, n % config.images_per_class);
        let jpeg = synth_jpeg(config, class, i)?;
        let path = root.join(class_dir(class)).join(format!("img_{i:06}.jpg"));
        fs::write(&path, jpeg).map_err(|e| PipelineError::write(&path, e))?;
        progress(counter.fetch_add(1, Ordering::Relaxed) + 1, total);
        Ok::<(), PipelineError>(())
    })?;
    let marker = root.join(MARKER_FILE);
    fs::write(&marker, config.marker()).map_err(|e| PipelineError::write(&marker, e))
}

fn class_dir(class: usize) -> String {
    format!("class_{class:03}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> GenerateConfig {
        GenerateConfig {
            classes: 2,
            images_per_class: 3,
            long_side: (24, 40),
            quality: 80,
            ..GenerateConfig::default()
        }
    }

    #[test]
    fn reuses_same_config_replaces_other_refuses_foreign() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ds");
        let calls = AtomicUsize::new(0);
        let progress = |_: usize, _: usize| {
            calls.fetch_add(1, Ordering::Relaxed);
        };
        let g = generate_jpeg_dataset(&dir, &tiny(), &progress).unwrap();
        assert!(!g.reused);
        assert_eq!(calls.load(Ordering::Relaxed), 6);
        assert!(dir.join("class_001/img_000002.jpg").is_file());
        assert!(
            generate_jpeg_dataset(&dir, &tiny(), &progress)
                .unwrap()
                .reused
        );
        let other = GenerateConfig {
            images_per_class: 1,
            ..tiny()
        };
        assert!(
            !generate_jpeg_dataset(&dir, &other, &progress)
                .unwrap()
                .reused
        );
        assert!(!dir.join("class_001/img_000002.jpg").exists());
        // Nothing left behind next to it.
        assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 1);

        let foreign = tmp.path().join("mine");
        fs::create_dir(&foreign).unwrap();
        fs::write(foreign.join("precious.txt"), b"keep").unwrap();
        let err = generate_jpeg_dataset(&foreign, &tiny(), &progress).unwrap_err();
        assert!(
            matches!(err, PipelineError::RefuseOverwrite { .. }),
            "{err}"
        );
        assert!(foreign.join("precious.txt").exists());
    }
}
