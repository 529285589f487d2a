//! WebDataset shard indexing.
//!
//! Members are grouped into samples as WebDataset does: the key is the member
//! path up to the first dot of its file name, the extension the rest
//! (lower-cased); consecutive members with the same key form one sample. A
//! sample needs an image (`jpg`, `jpeg` or `png`; the first one wins) and a
//! `cls` member holding its integer label. Other members are ignored, as are
//! metadata members named `__...__`.
//!
//! Indexing walks each shard's headers once (seeking over member data) and
//! records every image's byte offset and length, so samples can later be read
//! in any order with one positioned read.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use super::{Entry, Location, IMAGE_EXTENSIONS};
use crate::PipelineError;

/// The longest `.cls` member read (a label is a short decimal number).
const MAX_CLS_BYTES: u64 = 64;

/// Indexes all `shards` in order; `root` names the dataset in errors.
pub(super) fn index(root: &Path, shards: &[PathBuf]) -> Result<Vec<Entry>, PipelineError> {
    let mut entries = Vec::new();
    for (i, shard) in shards.iter().enumerate() {
        let shard_id = u32::try_from(i).map_err(|_| {
            PipelineError::InvalidConfig(format!(
                "{} holds more than {} shards; merge some",
                root.display(),
                u32::MAX
            ))
        })?;
        index_shard(shard_id, shard, &mut entries)?;
    }
    if entries.is_empty() {
        return Err(PipelineError::Empty { path: root.into() });
    }
    Ok(entries)
}

/// A sample being assembled from consecutive members with one key.
struct Pending {
    key: String,
    image: Option<(u64, u64, String)>,
    label: Option<i64>,
}

impl Pending {
    fn finish(self, shard_id: u32, shard: &Path) -> Result<Entry, PipelineError> {
        let Some((offset, len, name)) = self.image else {
            return Err(PipelineError::MissingImage {
                shard: shard.into(),
                key: self.key,
            });
        };
        let Some(label) = self.label else {
            return Err(PipelineError::MissingLabel {
                shard: shard.into(),
                key: self.key,
            });
        };
        Ok(Entry {
            location: Location::Member {
                shard: shard_id,
                offset,
                len,
                name: name.into(),
            },
            label,
        })
    }
}

fn index_shard(shard_id: u32, shard: &Path, out: &mut Vec<Entry>) -> Result<(), PipelineError> {
    let file = File::open(shard).map_err(|e| PipelineError::io(shard, e))?;
    let file_len = file
        .metadata()
        .map_err(|e| PipelineError::io(shard, e))?
        .len();
    let corrupt = |offset: u64, detail: String| PipelineError::CorruptShard {
        shard: shard.into(),
        offset,
        detail,
    };
    let mut archive = tar::Archive::new(BufReader::new(file));
    let members = archive
        .entries_with_seek()
        .map_err(|e| corrupt(0, e.to_string()))?;
    // Where the next header should start, for error messages.
    let mut next_header = 0u64;
    let mut pending: Option<Pending> = None;
    for member in members {
        let mut member = member.map_err(|e| corrupt(next_header, e.to_string()))?;
        let offset = member.raw_file_position();
        let len = member.size();
        let path = member
            .path()
            .map_err(|e| corrupt(member.raw_header_position(), e.to_string()))?
            .to_string_lossy()
            .into_owned();
        if offset.saturating_add(len) > file_len {
            return Err(corrupt(
                offset,
                format!("member {path:?} needs {len} bytes but the file ends at byte {file_len}"),
            ));
        }
        next_header = offset + len.div_ceil(512) * 512;
        if !member.header().entry_type().is_file() {
            continue;
        }
        let Some((key, ext)) = split_key(&path) else {
            continue;
        };
        if pending.as_ref().is_some_and(|p| p.key != key) {
            if let Some(done) = pending.take() {
                out.push(done.finish(shard_id, shard)?);
            }
        }
        let sample = pending.get_or_insert_with(|| Pending {
            key: key.to_string(),
            image: None,
            label: None,
        });
        let ext = ext.to_ascii_lowercase();
        if IMAGE_EXTENSIONS.contains(&ext.as_str()) {
            if sample.image.is_none() {
                sample.image = Some((offset, len, path.clone()));
            }
        } else if ext == "cls" {
            let mut text = String::new();
            (&mut member)
                .take(MAX_CLS_BYTES)
                .read_to_string(&mut text)
                .map_err(|e| corrupt(offset, format!("cannot read {path:?}: {e}")))?;
            sample.label = Some(parse_label(&text).ok_or_else(|| PipelineError::BadLabel {
                shard: shard.into(),
                key: key.to_string(),
                text: text.chars().take(32).collect(),
            })?);
        }
    }
    if let Some(done) = pending.take() {
        out.push(done.finish(shard_id, shard)?);
    }
    Ok(())
}

/// Splits a member path into WebDataset's `(key, extension)`: the key runs to
/// the first dot of the file name. Names without a dot, names starting with a
/// dot and `__meta__` members give `None`.
fn split_key(path: &str) -> Option<(&str, &str)> {
    let name_start = path.rfind('/').map_or(0, |i| i + 1);
    let name = &path[name_start..];
    if name.starts_with("__") && name.ends_with("__") {
        return None;
    }
    let dot = name.find('.')?;
    if dot == 0 {
        return None;
    }
    Some((&path[..name_start + dot], &name[dot + 1..]))
}

/// Parses a `.cls` member as Python's `int()` would (surrounding whitespace
/// allowed), refusing negative labels.
fn parse_label(text: &str) -> Option<i64> {
    let t = text.trim();
    let t = t.strip_prefix('+').unwrap_or(t);
    t.parse::<i64>().ok().filter(|v| *v >= 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_at_the_first_dot_of_the_file_name() {
        assert_eq!(split_key("a/b.c/x.seg.png"), Some(("a/b.c/x", "seg.png")));
        assert_eq!(split_key("000123.jpg"), Some(("000123", "jpg")));
        assert_eq!(split_key("dir/n01.CLS"), Some(("dir/n01", "CLS")));
        assert_eq!(split_key("noext"), None);
        assert_eq!(split_key("d/.hidden"), None);
        assert_eq!(split_key("__index__"), None);
    }

    #[test]
    fn labels_parse_like_python_int() {
        assert_eq!(parse_label("7"), Some(7));
        assert_eq!(parse_label(" 12\n"), Some(12));
        assert_eq!(parse_label("+3"), Some(3));
        assert_eq!(parse_label("-1"), None);
        assert_eq!(parse_label("cat"), None);
        assert_eq!(parse_label(""), None);
    }
}
