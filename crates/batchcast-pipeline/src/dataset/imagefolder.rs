//! ImageFolder indexing, following torchvision's `ImageFolder`:
//! - classes are the sub-directories of the root (symlinks followed), sorted
//!   by name; a class's label is its position in that order;
//! - a class's samples are the files below its folder (recursively, symlinks
//!   followed) whose name ends in `.jpg`, `.jpeg` or `.png` in any case,
//!   ordered as `sorted(os.walk(...))` then sorted file names within a folder;
//! - samples are listed class by class.
//!
//! One difference, on purpose: a class folder without images is accepted (it
//! still takes its label), where recent torchvision raises.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use super::{Entry, Location, IMAGE_EXTENSIONS};
use crate::PipelineError;

/// Lists the classes and samples of the ImageFolder tree at `root`.
pub(super) fn index(root: &Path) -> Result<(Vec<String>, Vec<Entry>), PipelineError> {
    let mut classes: Vec<OsString> = Vec::new();
    for item in fs::read_dir(root).map_err(|e| PipelineError::io(root, e))? {
        let item = item.map_err(|e| PipelineError::io(root, e))?;
        if fs::metadata(item.path()).is_ok_and(|m| m.is_dir()) {
            classes.push(item.file_name());
        }
    }
    if classes.is_empty() {
        return Err(PipelineError::NoClasses { path: root.into() });
    }
    // OsStr orders by bytes, which for UTF-8 is Python's code-point order.
    classes.sort();

    let mut entries = Vec::new();
    let mut files = Vec::new();
    for (label, class) in classes.iter().enumerate() {
        files.clear();
        let mut visited = HashSet::new();
        walk(&root.join(class), &mut visited, &mut files)?;
        // sorted(os.walk()) orders folders by their path string; then names.
        files.sort_by(|a, b| {
            let ka = (a.0.as_os_str().as_encoded_bytes(), a.1.as_encoded_bytes());
            let kb = (b.0.as_os_str().as_encoded_bytes(), b.1.as_encoded_bytes());
            ka.cmp(&kb)
        });
        let label = i64::try_from(label).unwrap_or(i64::MAX);
        entries.extend(files.iter().map(|(dir, name)| Entry {
            location: Location::File(dir.join(name)),
            label,
        }));
    }
    if entries.is_empty() {
        return Err(PipelineError::Empty { path: root.into() });
    }
    let names = classes
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    Ok((names, entries))
}

/// Appends `(folder, file name)` for every image file below `dir`. Folders
/// already visited (through a symlink loop) are not walked twice.
pub(super) fn walk(
    dir: &Path,
    visited: &mut HashSet<PathBuf>,
    out: &mut Vec<(PathBuf, OsString)>,
) -> Result<(), PipelineError> {
    if let Ok(canonical) = fs::canonicalize(dir) {
        if !visited.insert(canonical) {
            return Ok(());
        }
    }
    let listing = fs::read_dir(dir).map_err(|e| PipelineError::io(dir, e))?;
    let mut subdirs = Vec::new();
    for item in listing {
        let item = item.map_err(|e| PipelineError::io(dir, e))?;
        // The directory entry's type needs no stat() call; only symlinks are
        // followed. A broken one counts as a file (it fails at read time,
        // where OnError decides), as os.walk lists it among files.
        let is_dir = match item.file_type() {
            Ok(t) if t.is_symlink() => fs::metadata(item.path()).is_ok_and(|m| m.is_dir()),
            Ok(t) => t.is_dir(),
            Err(_) => fs::metadata(item.path()).is_ok_and(|m| m.is_dir()),
        };
        if is_dir {
            subdirs.push(item.path());
        } else if is_image_name(&item.file_name()) {
            out.push((dir.to_path_buf(), item.file_name()));
        }
    }
    for sub in subdirs {
        walk(&sub, visited, out)?;
    }
    Ok(())
}

/// torchvision's `has_file_allowed_extension`: the lower-cased name ends with
/// `.jpg`, `.jpeg` or `.png`.
pub(super) fn is_image_name(name: &std::ffi::OsStr) -> bool {
    let lower = name.to_string_lossy().to_ascii_lowercase();
    IMAGE_EXTENSIONS.iter().any(|ext| {
        lower
            .strip_suffix(ext)
            .is_some_and(|stem| stem.ends_with('.'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn image_names_match_case_insensitively() {
        for ok in ["a.jpg", "B.JPG", "c.Jpeg", "d.png", "e.x.PNG", ".jpg"] {
            assert!(is_image_name(OsStr::new(ok)), "{ok}");
        }
        for bad in ["a.gif", "jpg", "a.jpg.txt", "apng", "a.tar"] {
            assert!(!is_image_name(OsStr::new(bad)), "{bad}");
        }
    }

    #[test]
    fn nested_folders_are_walked_in_python_order() {
        let dir = tempfile::tempdir().unwrap();
        let c = dir.path().join("cat");
        fs::create_dir_all(c.join("sub")).unwrap();
        fs::create_dir_all(c.join("a-b")).unwrap();
        for f in [
            "cat/z.jpg",
            "cat/a.png",
            "cat/sub/b.jpg",
            "cat/a-b/c.jpg",
            "cat/n.txt",
        ] {
            fs::write(dir.path().join(f), b"x").unwrap();
        }
        fs::create_dir(dir.path().join("dog")).unwrap();
        let (names, entries) = index(dir.path()).unwrap();
        assert_eq!(names, ["cat", "dog"]);
        let got: Vec<String> = entries
            .iter()
            .map(|e| match &e.location {
                Location::File(p) => p.strip_prefix(dir.path()).unwrap().display().to_string(),
                Location::Member { .. } => unreachable!(),
            })
            .collect();
        // "cat" < "cat/a-b" < "cat/sub" as Python compares the strings.
        assert_eq!(
            got,
            ["cat/a.png", "cat/z.jpg", "cat/a-b/c.jpg", "cat/sub/b.jpg"]
        );
    }
}
