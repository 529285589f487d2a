//! Reading a file whole, bounded while it is read: its size beforehand
//! (`metadata`) says nothing true of a FIFO, of `/proc` or `/dev` files, or
//! of a file that grows between the look and the read.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// The text of `path`, at most `max` bytes of it; a longer file is an
/// [`io::ErrorKind::FileTooLarge`] error, read no further than `max + 1`.
pub fn read_text(path: &Path, max: u64) -> io::Result<String> {
    let mut text = String::new();
    File::open(path)?
        .take(max.saturating_add(1))
        .read_to_string(&mut text)?;
    if text.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("larger than {max} bytes"),
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_read_whole_up_to_the_bound_and_refused_past_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, "abcd").unwrap();
        assert_eq!(read_text(&p, 4).unwrap(), "abcd");
        assert_eq!(
            read_text(&p, 3).unwrap_err().kind(),
            io::ErrorKind::FileTooLarge
        );
        // A file whose size says nothing: read only to the bound.
        let err = read_text(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
        assert!(
            err.to_string().contains("larger than 1048576 bytes"),
            "{err}"
        );
    }
}
