//! A state file's text: a first line `batchcast-state FORMAT`, then
//! `epoch`, `row` and `consumers` lines, `slot_size` and `payload` lines
//! where known, one `identity` line per line of the stream's identity,
//! and last a `check` line, an FNV-1a checksum of the lines before it in
//! hex. [`parse`] reads it back whole or says what is wrong with it
//! ([`StateParseError`]); nothing else is trusted.

use super::{ResumePoint, Saved, MAX_FILE};

/// The format version written on the first line.
const FORMAT: u32 = 1;
/// The first line's word.
const MAGIC: &str = "batchcast-state";
/// Largest slot size a state file may give, in bytes (1 TiB).
const MAX_SLOT_SIZE: u64 = 1 << 40;

/// What is wrong with a state file's text. Each message names the
/// problem; the [`Error::StateFile`](crate::Error::StateFile) that carries
/// it names the file and the fix (start afresh with `--fresh`, or remove
/// the file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StateParseError {
    /// Longer than any state file a producer writes.
    #[error("it is larger than {max} bytes", max = MAX_FILE)]
    TooLarge,
    /// Written by another format version.
    #[error("it is of format version {0:?}, this batchcast reads version {format}", format = FORMAT)]
    Version(String),
    /// Not a state file at all.
    #[error("it is not a batchcast state file")]
    NotStateFile,
    /// Cut short before its last line.
    #[error("it is truncated")]
    Truncated,
    /// Cut short: its last line is not the checksum.
    #[error("it is truncated (no checksum line)")]
    NoChecksum,
    /// Its checksum does not match.
    #[error("it is corrupt (its checksum does not match its content)")]
    Corrupt,
    /// A line whose number cannot be read.
    #[error("bad line {0:?}")]
    BadLine(String),
    /// A slot size no producer writes.
    #[error(
        "its slot size {0} is not whole 4 KiB pages of at most {max} bytes, as a producer writes it",
        max = MAX_SLOT_SIZE
    )]
    SlotSize(u64),
    /// A line of no known kind.
    #[error("unknown line {0:?}")]
    UnknownLine(String),
    /// A line that every state file has is missing.
    #[error("it lacks the epoch, row or consumers line")]
    Incomplete,
}

/// FNV-1a, 64 bits: enough to tell a damaged file from a whole one.
fn checksum(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The text of a state file of the stream `identity` holding `saved`.
pub(super) fn render(identity: &str, saved: &Saved) -> String {
    let p = &saved.point;
    let mut body = format!(
        "{MAGIC} {FORMAT}\nepoch {}\nrow {}\nconsumers {}\n",
        p.epoch, p.row, p.consumers
    );
    if let Some(size) = saved.slot_size {
        body.push_str(&format!("slot_size {size}\n"));
    }
    if let Some(payload) = &saved.payload {
        body.push_str("payload ");
        body.push_str(payload);
        body.push('\n');
    }
    for line in identity.lines() {
        body.push_str("identity ");
        body.push_str(line);
        body.push('\n');
    }
    let sum = checksum(&body);
    format!("{body}check {sum:016x}\n")
}

/// The identity and the rest of a state file's text, or why not.
pub(super) fn parse(text: &str) -> Result<(String, Saved), StateParseError> {
    check_header(text)?;
    let body = checked_body(text)?;
    parse_lines(body)
}

/// Refuses an oversized text, or one of another format or version.
fn check_header(text: &str) -> Result<(), StateParseError> {
    if text.len() as u64 > MAX_FILE {
        return Err(StateParseError::TooLarge);
    }
    let first = text.lines().next().unwrap_or("");
    match first.strip_prefix(MAGIC).map(str::trim) {
        Some(v) if v == FORMAT.to_string() => Ok(()),
        Some(v) => Err(StateParseError::Version(v.to_owned())),
        None => Err(StateParseError::NotStateFile),
    }
}

/// The lines before the checksum line, once the checksum matches them.
fn checked_body(text: &str) -> Result<&str, StateParseError> {
    let body_end = text
        .trim_end_matches('\n')
        .rfind('\n')
        .map(|i| i + 1)
        .ok_or(StateParseError::Truncated)?;
    let (body, last) = text.split_at(body_end);
    let sum = last
        .trim_end()
        .strip_prefix("check ")
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .ok_or(StateParseError::NoChecksum)?;
    if sum != checksum(body) {
        return Err(StateParseError::Corrupt);
    }
    Ok(body)
}

/// The identity and the saved point of a checked body.
fn parse_lines(body: &str) -> Result<(String, Saved), StateParseError> {
    let (mut epoch, mut row, mut consumers) = (None, None, None);
    let mut identity = String::new();
    let (mut payload, mut slot_size) = (None, None);
    for line in body.lines().skip(1) {
        let (key, value) = line.split_once(' ').unwrap_or((line, ""));
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| StateParseError::BadLine(line.to_owned()))
        };
        match key {
            "epoch" => epoch = Some(number()?),
            "row" => row = Some(number()?),
            "consumers" => consumers = Some(number()?.min(u64::from(u32::MAX)) as u32),
            "payload" => payload = Some(value.to_owned()),
            "slot_size" => {
                let n = number()?;
                if n == 0 || n % 4096 != 0 || n > MAX_SLOT_SIZE {
                    return Err(StateParseError::SlotSize(n));
                }
                slot_size = Some(n);
            }
            "identity" => {
                identity.push_str(value);
                identity.push('\n');
            }
            _ => return Err(StateParseError::UnknownLine(line.to_owned())),
        }
    }
    let (Some(epoch), Some(row), Some(consumers)) = (epoch, row, consumers) else {
        return Err(StateParseError::Incomplete);
    };
    let point = ResumePoint {
        epoch,
        row,
        consumers,
    };
    Ok((
        identity,
        Saved {
            point,
            payload,
            slot_size,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `body` (the lines after the first) with its first line and a
    /// matching checksum.
    fn file(body: &str) -> String {
        let body = format!("{MAGIC} {FORMAT}\n{body}");
        format!("{body}check {:016x}\n", checksum(&body))
    }

    #[test]
    fn each_damage_is_named_as_it_always_was() {
        let whole = file("epoch 1\nrow 2\nconsumers 3\n");
        let cases = [
            (
                "x".repeat(MAX_FILE as usize + 1),
                "it is larger than 147456 bytes",
            ),
            (
                "batchcast-state 9\n".into(),
                "it is of format version \"9\", this batchcast reads version 1",
            ),
            ("hello\n".into(), "it is not a batchcast state file"),
            ("batchcast-state 1".into(), "it is truncated"),
            (
                "batchcast-state 1\nepoch 1\n".into(),
                "it is truncated (no checksum line)",
            ),
            (
                whole.replace("row 2", "row 9"),
                "it is corrupt (its checksum does not match its content)",
            ),
            (file("epoch x\n"), "bad line \"epoch x\""),
            (
                file("slot_size 100\n"),
                "its slot size 100 is not whole 4 KiB pages of at most 1099511627776 bytes, \
                 as a producer writes it",
            ),
            (file("colour blue\n"), "unknown line \"colour blue\""),
            (
                file("epoch 1\nrow 2\n"),
                "it lacks the epoch, row or consumers line",
            ),
        ];
        for (text, want) in cases {
            let err = parse(&text).expect_err(want);
            assert_eq!(err.to_string(), want);
        }
        let (identity, saved) = parse(&whole).unwrap();
        assert_eq!((identity.as_str(), saved.point.row), ("", 2));
    }
}
