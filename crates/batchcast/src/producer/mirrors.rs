//! The producer's side of its device mirrors (`crate::mirror`): each is
//! allocated the arena's length once, and each slot is copied into every
//! one before it is published.

use std::os::fd::OwnedFd;

use crate::arena::Arena;
use crate::error::{Error, Result};
use crate::mirror::{Mirror, MirrorSpec};

/// Allocates every mirror the arena's length; the first refusal is an
/// error naming its device.
pub(super) fn allocate_mirrors(
    mirrors: &[Mirror],
    arena: &Arena,
) -> Result<Vec<(MirrorSpec, OwnedFd)>> {
    let len = arena.mapped_len() as u64;
    mirrors
        .iter()
        .map(|m| {
            let mut m = m.lock();
            let device = m.device().to_owned();
            let fd = m.allocate(len, arena.addr()).map_err(|e| {
                Error::io(
                    format!("device {device:?} cannot hold a {len}-byte copy of the arena"),
                    e,
                )
            })?;
            let import_info = m.import_info();
            Ok((
                MirrorSpec {
                    device,
                    len,
                    import_info,
                },
                fd,
            ))
        })
        .collect()
}

/// Copies the first `len` bytes of slot `index` (header, arrays and
/// encoded layout) to the same offset of every mirror, each copy complete
/// on return; the first failure is an error naming its device.
pub(super) fn copy_to_mirrors(
    mirrors: &[Mirror],
    arena: &mut Arena,
    index: usize,
    len: usize,
) -> Result<()> {
    if mirrors.is_empty() {
        return Ok(());
    }
    let offset = arena.slot_offset(index) as u64;
    let bytes = arena.slot_prefix(index, len);
    for m in mirrors {
        let mut m = m.lock();
        m.copy_in(offset, bytes).map_err(|e| {
            Error::io(
                format!(
                    "cannot copy a batch to device {:?}; the batch is not published",
                    m.device()
                ),
                e,
            )
        })?;
    }
    Ok(())
}
