//! A bounded reader of 1-D little-endian float32/float64 `.npy` vectors
//! (NumPy's format, versions 1-3): the file's size is checked against the
//! one it must have before its data is read.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::PipelineError;

const MAGIC: &[u8] = b"\x93NUMPY";
/// The longest header accepted (NumPy writes under 200 bytes for a vector).
const MAX_HEADER: usize = 64 * 1024;

fn bad(path: &Path, why: impl std::fmt::Display) -> PipelineError {
    PipelineError::InvalidConfig(format!(
        "scores file {}: {why}; it must be a 1-D float32 or float64 .npy vector with one score \
         per sample in dataset order (numpy.save(path, scores.astype('float32')))",
        path.display()
    ))
}

/// The value of `key` in the header's dict, up to the next `,` or `}` at
/// depth 0 (a tuple's commas are inside its parentheses).
fn field<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let start = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[start..].trim_start().strip_prefix(':')?.trim_start();
    let mut depth = 0usize;
    for (i, c) in rest.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' | '}' if depth == 0 => return Some(rest[..i].trim()),
            _ => {}
        }
    }
    None
}

/// Reads the vector in `path`, which must hold exactly `expect` scores.
pub(crate) fn read_scores(path: &Path, expect: usize) -> Result<Vec<f64>, PipelineError> {
    let mut file = File::open(path).map_err(|e| PipelineError::io(path, e))?;
    let size = file
        .metadata()
        .map_err(|e| PipelineError::io(path, e))?
        .len();
    let (header, data_at) = read_header(&mut file, path)?;
    let (width, n) = vector_of(&header, path)?;
    if n != expect {
        return Err(bad(
            path,
            format!("it holds {n} scores but the dataset has {expect} samples"),
        ));
    }
    let data_len = n
        .checked_mul(width)
        .ok_or_else(|| bad(path, "a length that overflows"))?;
    let want = data_at as u64 + data_len as u64;
    if size != want {
        return Err(bad(
            path,
            format!("the file has {size} bytes where its header says {want}"),
        ));
    }
    let mut data = vec![0u8; data_len];
    file.read_exact(&mut data)
        .map_err(|e| PipelineError::io(path, e))?;
    let scores: Vec<f64> = if width == 4 {
        data.chunks_exact(4)
            .map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect()
    } else {
        data.chunks_exact(8)
            .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            .collect()
    };
    if let Some(i) = scores.iter().position(|s| s.is_nan()) {
        return Err(bad(path, format!("score {i} is NaN")));
    }
    Ok(scores)
}

/// The header (a Python dict literal) of the `.npy` file `file`, read
/// from its start (at most [`MAX_HEADER`] bytes), and where its data
/// begins.
fn read_header(file: &mut File, path: &Path) -> Result<(String, usize), PipelineError> {
    let mut head = [0u8; 10];
    file.read_exact(&mut head)
        .map_err(|_| bad(path, "too short for a .npy file"))?;
    if &head[..6] != MAGIC {
        return Err(bad(path, "not a .npy file (no \\x93NUMPY magic)"));
    }
    let (header_len, prefix) = match head[6] {
        1 => (usize::from(u16::from_le_bytes([head[8], head[9]])), 10usize),
        2 | 3 => {
            let mut more = [0u8; 2];
            file.read_exact(&mut more)
                .map_err(|_| bad(path, "truncated header"))?;
            let n = u32::from_le_bytes([head[8], head[9], more[0], more[1]]);
            (usize::try_from(n).unwrap_or(usize::MAX), 12usize)
        }
        v => return Err(bad(path, format!(".npy version {v} is not 1, 2 or 3"))),
    };
    if header_len > MAX_HEADER {
        return Err(bad(
            path,
            format!("a header of {header_len} bytes (over {MAX_HEADER})"),
        ));
    }
    let mut header = vec![0u8; header_len];
    file.read_exact(&mut header)
        .map_err(|_| bad(path, "truncated header"))?;
    let header = String::from_utf8_lossy(&header).into_owned();
    Ok((header, prefix + header_len))
}

/// The width in bytes of the header's dtype (little-endian float32 or
/// float64) and the length of its 1-D shape.
fn vector_of(header: &str, path: &Path) -> Result<(usize, usize), PipelineError> {
    let descr = field(header, "descr").unwrap_or_default();
    let width = match descr.trim_matches(|c| c == '\'' || c == '"') {
        "<f4" => 4usize,
        "<f8" => 8usize,
        other => {
            return Err(bad(
                path,
                format!("dtype {other:?} is not little-endian float32 ('<f4') or float64 ('<f8')"),
            ))
        }
    };
    let shape = field(header, "shape").unwrap_or_default();
    let dims: Vec<&str> = shape
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    let n: usize = match dims.as_slice() {
        [n] => n
            .parse()
            .map_err(|_| bad(path, format!("shape {shape} is not a length")))?,
        _ => return Err(bad(path, format!("shape {shape} is not 1-D"))),
    };
    Ok((width, n))
}

/// A version-1 `.npy` file of the vector `data` (`n` elements of type
/// `descr`), laid out as `numpy.save` writes it.
#[cfg(any(test, feature = "generate"))]
fn encode(descr: &str, n: usize, data: &[u8]) -> Vec<u8> {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({n},), }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = MAGIC.to_vec();
    out.extend([1, 0]);
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// Writes `scores` as a float32 `.npy` vector, as
/// `numpy.save(path, scores.astype('float32'))` does (for tests and demos
/// of `--select scores=FILE,keep=P`).
#[cfg(any(test, feature = "generate"))]
pub fn write_scores(path: &Path, scores: &[f32]) -> Result<(), PipelineError> {
    let data: Vec<u8> = scores.iter().flat_map(|s| s.to_le_bytes()).collect();
    std::fs::write(path, encode("<f4", scores.len(), &data))
        .map_err(|e| PipelineError::write(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_vector_and_refuses_a_wrong_length_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.npy");
        let data: Vec<u8> = [0.5f64, -1.0, 3.0]
            .iter()
            .flat_map(|s| s.to_le_bytes())
            .collect();
        std::fs::write(&p, encode("<f8", 3, &data)).unwrap();
        assert_eq!(read_scores(&p, 3).unwrap(), vec![0.5, -1.0, 3.0]);
        let m = read_scores(&p, 4).unwrap_err().to_string();
        assert!(
            m.contains("holds 3 scores") && m.contains("has 4 samples"),
            "{m}"
        );
    }

    #[test]
    fn reads_float32_and_refuses_other_dtypes_shapes_and_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.npy");
        write_scores(&p, &[1.5, 2.5]).unwrap();
        assert_eq!(read_scores(&p, 2).unwrap(), vec![1.5, 2.5]);
        let bytes = std::fs::read(&p).unwrap();
        let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n";
        // Truncated data: the size is refused before the data is read.
        std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
        assert!(read_scores(&p, 2)
            .unwrap_err()
            .to_string()
            .contains("bytes"));
        for (from, to) in [("<f4", ">f4"), ("(2,)", "(1, 2)")] {
            let h = header.replace(from, to);
            let mut b = MAGIC.to_vec();
            b.extend([1, 0]);
            b.extend((h.len() as u16).to_le_bytes());
            b.extend(h.as_bytes());
            b.extend([0u8; 8]);
            std::fs::write(&p, &b).unwrap();
            let m = read_scores(&p, 2).unwrap_err().to_string();
            assert!(m.contains("float32"), "{m}");
        }
        std::fs::write(&p, b"not numpy at all").unwrap();
        assert!(read_scores(&p, 2)
            .unwrap_err()
            .to_string()
            .contains("magic"));
    }
}
