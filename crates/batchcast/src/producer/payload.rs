//! The caller's resume payloads: an opaque text (a Python loader's
//! `state_dict`, as JSON) that restores its source at a stream position.
//!
//! A producer whose source cannot seek by rows notes, after each batch and
//! epoch end, the payload that restores it at its head
//! ([`Producer::set_resume_payload`]). The state file then holds a resume
//! point only where a payload is known: the consumers' low-water if one was
//! noted there, else the latest noted before it in the same epoch (a lower
//! point is safe: reattaching consumers skip the rows they have). Payloads
//! behind the point written are dropped, so those kept span the consumers'
//! spread (at most the window and the lag slots).

use std::collections::BTreeMap;

use super::durable::Saved;
use super::{Producer, ResumePoint};
use crate::error::{Error, Result};

/// Largest payload accepted, in bytes.
pub const MAX_PAYLOAD: usize = 128 * 1024;

/// The payloads noted at stream positions (epoch, row).
#[derive(Debug, Default)]
pub(crate) struct Payloads {
    /// True once a payload was noted or resumed: points are written only
    /// where one is known.
    used: bool,
    at: BTreeMap<(u64, u64), String>,
}

impl Payloads {
    /// The payloads of a producer that resumed from `saved`, and the
    /// payload saved with its point.
    pub fn resumed(saved: Option<Saved>) -> (Payloads, Option<String>) {
        let mut payloads = Payloads::default();
        let Some(Saved {
            point,
            payload: Some(payload),
            ..
        }) = saved
        else {
            return (payloads, None);
        };
        payloads.note((point.epoch, point.row), payload.clone());
        (payloads, Some(payload))
    }

    /// Notes `payload` as the one restoring the source at `(epoch, row)`.
    pub fn note(&mut self, position: (u64, u64), payload: String) {
        self.used = true;
        self.at.insert(position, payload);
    }

    /// The point to write for the low-water `point`, and its payload: the
    /// point itself while no payload was ever noted; else the latest noted
    /// position at or before it in its epoch (None: none is known, keep
    /// the older point). Payloads before the chosen one are dropped.
    pub fn settle(&mut self, point: ResumePoint) -> Option<(ResumePoint, Option<String>)> {
        if !self.used {
            return Some((point, None));
        }
        let (&(epoch, row), payload) = self
            .at
            .range(..=(point.epoch, point.row))
            .next_back()
            .filter(|((e, _), _)| *e == point.epoch)?;
        let payload = payload.clone();
        self.at = self.at.split_off(&(epoch, row));
        Some((ResumePoint { row, ..point }, Some(payload)))
    }
}

/// Checks a payload's size and that it fits on one line of the state file.
pub(crate) fn check(payload: &str) -> Result<()> {
    if payload.len() > MAX_PAYLOAD {
        return Err(Error::InvalidArgument(format!(
            "a resume payload of {} bytes is larger than the {MAX_PAYLOAD}-byte limit; keep the \
             loader's state small (its position, not its data)",
            payload.len()
        )));
    }
    if payload.contains(['\n', '\r']) {
        return Err(Error::InvalidArgument(
            "a resume payload must be one line (JSON without raw newlines)".into(),
        ));
    }
    Ok(())
}

impl Producer {
    /// Notes the payload (an opaque one-line text, at most
    /// [`MAX_PAYLOAD`] bytes) that restores the caller's source at this
    /// producer's head: the next row to publish (after a batch: past it;
    /// after `end_epoch`: the next epoch's start). From the first one on,
    /// the state file holds points where a payload is known, with it; a
    /// restart reads it back in [`Producer::resumed_payload`].
    ///
    /// # Errors
    /// [`Error::Usage`] for a producer that keeps no state file,
    /// [`Error::InvalidArgument`] for a payload too large or of several
    /// lines.
    pub fn set_resume_payload(&mut self, payload: String) -> Result<()> {
        if self.state_file.is_none() {
            return Err(Error::Usage(
                "set_resume_payload needs a durable producer (ProducerOptions::durable)".into(),
            ));
        }
        check(&payload)?;
        let head = self.shared.lock().head();
        self.payloads.note(head, payload);
        Ok(())
    }

    /// The payload the predecessor noted at the resume point
    /// ([`Producer::resumed`]), if it noted any.
    pub fn resumed_payload(&self) -> Option<&str> {
        self.resumed_payload.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(epoch: u64, row: u64) -> ResumePoint {
        ResumePoint {
            epoch,
            row,
            consumers: 2,
        }
    }

    #[test]
    fn without_payloads_the_point_is_kept() {
        let mut p = Payloads::default();
        assert_eq!(p.settle(at(1, 30)), Some((at(1, 30), None)));
    }

    #[test]
    fn the_point_falls_back_to_the_latest_payload_of_its_epoch() {
        let mut p = Payloads::default();
        p.note((0, 0), "a".into());
        p.note((0, 10), "b".into());
        p.note((0, 20), "c".into());
        assert_eq!(p.settle(at(0, 15)), Some((at(0, 10), Some("b".into()))));
        // Older payloads are dropped, the chosen one and later ones kept.
        assert_eq!(p.at.len(), 2);
        assert_eq!(p.settle(at(0, 20)), Some((at(0, 20), Some("c".into()))));
        // The next epoch's start is not known yet: keep the older point.
        assert_eq!(p.settle(at(1, 0)), None);
        p.note((1, 0), "d".into());
        assert_eq!(p.settle(at(1, 0)), Some((at(1, 0), Some("d".into()))));
    }

    #[test]
    fn a_restart_gets_its_payload_and_slot_size_back() {
        use super::super::durable::StateFile;
        use super::super::{Durability, ProducerOptions};
        use crate::endpoint::Endpoint;
        let dir = tempfile::tempdir().unwrap();
        let ep = Endpoint::in_dir("payload", dir.path()).unwrap();
        let d = Durability::new("seed=7");
        let (mut f, _) = StateFile::open(&ep, &d).unwrap();
        let saved = Saved {
            point: at(1, 8),
            payload: Some("{\"pos\":2}".into()),
            slot_size: Some(8192),
        };
        f.write(&saved).unwrap();
        let opts = |durable| ProducerOptions {
            dir: Some(dir.path().to_owned()),
            durable,
            ..Default::default()
        };
        let mut p = Producer::create("payload", opts(Some(d))).unwrap();
        assert_eq!(p.resumed(), Some(at(1, 8)));
        assert_eq!(p.resumed_payload(), Some("{\"pos\":2}"));
        assert_eq!(p.slot_size(), Some(8192), "the arena is made at once");
        p.set_resume_payload("{\"pos\":3}".into()).unwrap();
        drop(p);
        let mut plain = Producer::create("payload", opts(None)).unwrap();
        let err = plain.set_resume_payload("{}".into()).unwrap_err();
        assert!(err.to_string().contains("durable"), "{err}");
    }

    #[test]
    fn large_and_multi_line_payloads_are_refused() {
        assert!(check("{\"a\": 1}").is_ok());
        let err = check(&"x".repeat(MAX_PAYLOAD + 1)).unwrap_err().to_string();
        assert!(err.contains("larger than"), "{err}");
        assert!(check("{\n}").is_err());
    }
}
