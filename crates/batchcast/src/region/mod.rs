//! One shared-memory region type: the arena, the board, the ledgers and the
//! holder counts are each a [`Region`] of their own [`Kind`].
//!
//! A region is an anonymous memfd (no name in any file system, so nothing is
//! ever left behind), sized and reserved at creation, mapped, then sealed
//! against shrinking and growing: whoever else maps it can never make a
//! mapping fault with SIGBUS. It is laid out as
//!
//! ```text
//! [Header][T: the kind's fixed part][padding][item 0][item 1] ...
//! ```
//!
//! - [`Header`]: the kind's magic, [`VERSION`], the size of `T`, the
//!   region's length, and its items' geometry (where they start, how many,
//!   how large). Written once by the creator, before the region is shared.
//! - `T`: a `#[repr(C)]` struct of atomics ([`Shared`]).
//! - the items, each starting at a multiple of [`Kind::item_align`] (a page
//!   for the arena's slots, so that a consumer can drop its private pages of
//!   one slot without touching the header or another slot).
//!
//! # Invariants
//! - Every word another process may touch is reached as an atomic through
//!   the mapping's raw pointer, never through a `&[u8]` or `&u64`: a shared
//!   slice would assert that nobody writes it.
//! - [`Region::open`] trusts nothing it receives: the file must be sealed
//!   against shrinking, and the header's magic, version, length and geometry
//!   must match this build and the caller's expectations before any item is
//!   reached. The geometry is read once, at open, and kept in this process: a
//!   peer that rewrites the header later changes nothing here.

use std::fs::File;
use std::marker::PhantomData;
use std::mem::{align_of, size_of};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};
use rustix::fs::{FallocateFlags, MemfdFlags, SealFlags};
use rustix::io::Errno;

mod errors;

pub(crate) use errors::CreateError;
pub use errors::RegionOpenError;

use crate::error::Error;

/// The region layout this build writes and reads; a region of another
/// version is refused at open.
pub(crate) const VERSION: u32 = 1;

/// A type that lives in a region: a kind's fixed part, or an item.
///
/// # Safety
/// An implementor is `#[repr(C)]` (or an atomic) and holds only atomics
/// (directly or in `#[repr(C)]` structs of them): every bit pattern is a
/// valid value, and any field may be changed by another process at any
/// time. It holds no pointer or reference, and its alignment is at most 8.
pub(crate) unsafe trait Shared: Sized {}

// SAFETY: atomics of alignment 8 and 4.
unsafe impl Shared for AtomicU64 {}
// SAFETY: as above.
unsafe impl Shared for AtomicU32 {}

/// What a region holds: `Self` is its fixed part.
pub(crate) trait Kind: Shared {
    /// The first word of every region of this kind.
    const MAGIC: [u8; 8];
    /// Its name in messages ("board").
    const WHAT: &'static str;
    /// What its items are, in messages ("slots").
    const ITEMS: &'static str;
    /// Where items start: a multiple of this (a power of two, at least the
    /// alignment of what is read at an item's start). Item sizes are
    /// multiples of it too, so that every item starts aligned.
    fn item_align() -> usize {
        8
    }
}

/// The start of every region.
#[repr(C)]
pub(crate) struct Header {
    magic: AtomicU64,
    version: AtomicU32,
    /// `size_of` the kind's fixed part, as the creator's build laid it out.
    fixed_len: AtomicU32,
    /// Bytes of the region (the memfd's size).
    length: AtomicU64,
    /// Byte offset of item 0.
    body_at: AtomicU64,
    items: AtomicU64,
    item_size: AtomicU64,
}

// SAFETY: `#[repr(C)]`, atomics only.
unsafe impl Shared for Header {}

const _: () = assert!(size_of::<Header>() == 48 && align_of::<Header>() == 8);

/// How many items of how many bytes a region holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Number of items.
    pub items: usize,
    /// Bytes per item.
    pub item_size: usize,
}

/// Who may write a region once it is shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writers {
    /// The creator's own mapping only (sealed with `F_SEAL_FUTURE_WRITE`:
    /// no new shared writable mapping, no `write(2)`, not even by it).
    Creator,
    /// Whoever receives the descriptor (it maps it shared and writable).
    Anyone,
}

/// How a received region is mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Shared, read-only: a write is SIGSEGV.
    ReadOnly,
    /// Shared and writable.
    ReadWrite,
    /// Private and writable: a write lands on a private copy of its page.
    CopyOnWrite,
}

/// A mapped region of kind `T`.
pub(crate) struct Region<T> {
    map: MmapRaw,
    geometry: Geometry,
    body_at: usize,
    kind: PhantomData<T>,
}

/// Byte offset of item 0 in a region of kind `T`.
fn body_at<T: Kind>() -> usize {
    (size_of::<Header>() + size_of::<T>()).next_multiple_of(T::item_align())
}

fn magic_of<T: Kind>() -> u64 {
    u64::from_le_bytes(T::MAGIC)
}

impl<T: Kind> Region<T> {
    /// Creates a zeroed region of `geometry`, with the memory of its first
    /// `reserved` items (and its header) reserved now: [`Region::reserve`]
    /// reserves the others before their first use. Returns the region,
    /// mapped shared and writable, and its file (to share).
    pub fn create(
        label: &str,
        geometry: Geometry,
        reserved: usize,
        writers: Writers,
    ) -> Result<(Region<T>, File), CreateError> {
        let what = T::WHAT;
        let body_at = body_at::<T>();
        let too_large = || CreateError::TooLarge {
            what,
            items: geometry.items,
            item_size: geometry.item_size,
        };
        let span = |n: usize| {
            n.checked_mul(geometry.item_size)
                .and_then(|b| b.checked_add(body_at))
        };
        let len = span(geometry.items).ok_or_else(too_large)?;
        let upfront = span(reserved.min(geometry.items)).ok_or_else(too_large)?;
        let os = |step| move |errno| CreateError::Os { what, step, errno };
        let fd = rustix::fs::memfd_create(label, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
            .map_err(os("create (memfd_create)"))?;
        rustix::fs::ftruncate(&fd, len as u64).map_err(os("size (ftruncate)"))?;
        rustix::fs::fallocate(&fd, FallocateFlags::empty(), 0, upfront as u64)
            .map_err(os("reserve (fallocate)"))?;
        let file = File::from(fd);
        // Our own memfd, sealed against resizing below before anyone else
        // can see it: its size cannot change under the mapping.
        let map = MmapOptions::new()
            .len(len)
            .map_raw(&file)
            .map_err(|e| os("map")(Errno::from_io_error(&e).unwrap_or(Errno::INVAL)))?;
        let region = Region {
            map,
            geometry,
            body_at,
            kind: PhantomData,
        };
        let header = region.header();
        header.magic.store(magic_of::<T>(), Ordering::Relaxed);
        header.version.store(VERSION, Ordering::Relaxed);
        header
            .fixed_len
            .store(size_of::<T>() as u32, Ordering::Relaxed);
        header.length.store(len as u64, Ordering::Relaxed);
        header.body_at.store(body_at as u64, Ordering::Relaxed);
        header.items.store(geometry.items as u64, Ordering::Relaxed);
        header
            .item_size
            .store(geometry.item_size as u64, Ordering::Relaxed);
        // After our mapping: FUTURE_WRITE lets it be, and refuses every
        // later writable mapping and write(2).
        let mut seals = SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL;
        if writers == Writers::Creator {
            seals |= SealFlags::FUTURE_WRITE;
        }
        rustix::fs::fcntl_add_seals(&file, seals).map_err(os("seal"))?;
        Ok((region, file))
    }

    /// Maps a region received from another process, validating its header
    /// against this build and `expect`: its item size, and its number of
    /// items when the caller knows it (`None`: at least one).
    pub fn open(
        fd: OwnedFd,
        access: Access,
        items: Option<usize>,
        item_size: usize,
    ) -> Result<Region<T>, RegionOpenError> {
        let what = T::WHAT;
        let os = |step| {
            move |e: std::io::Error| RegionOpenError::Os {
                what,
                step,
                source: e,
            }
        };
        let file = File::from(fd);
        let size = rustix::fs::fstat(file.as_fd())
            .map_err(|e| os("inspect")(e.into()))?
            .st_size;
        let len = usize::try_from(size).unwrap_or(0);
        let sealed =
            rustix::fs::fcntl_get_seals(file.as_fd()).is_ok_and(|s| s.contains(SealFlags::SHRINK));
        if !sealed {
            return Err(RegionOpenError::NotSealed { what });
        }
        if len < size_of::<Header>() + size_of::<T>() {
            return Err(RegionOpenError::WrongKind {
                what,
                len,
                magic: 0,
            });
        }
        let mut options = MmapOptions::new();
        options.len(len);
        let map = match access {
            // Shared mappings of a file sealed against shrinking (checked
            // above): no SIGBUS; words are reached as atomics only.
            Access::ReadOnly => options.map_raw_read_only(&file),
            Access::ReadWrite => options.map_raw(&file),
            // SAFETY: a private mapping of a file sealed against shrinking
            // (no SIGBUS). Our writes never reach the file; the owner's
            // reach the pages we have not written. The mapping is used only
            // as a raw pointer (see `Region::item_ptr`), never as a slice.
            Access::CopyOnWrite => unsafe { options.map_copy(&file) }.map(MmapRaw::from),
        }
        .map_err(os("map"))?;
        let mut region = Region {
            map,
            geometry: Geometry {
                items: 0,
                item_size,
            },
            body_at: body_at::<T>(),
            kind: PhantomData,
        };
        region.geometry = region.validate(len, items, item_size)?;
        Ok(region)
    }

    /// Checks the header of a region of `len` bytes; returns its geometry.
    fn validate(
        &self,
        len: usize,
        items: Option<usize>,
        item_size: usize,
    ) -> Result<Geometry, RegionOpenError> {
        let what = T::WHAT;
        let header = self.header();
        let magic = header.magic.load(Ordering::Relaxed);
        if magic != magic_of::<T>() {
            return Err(RegionOpenError::WrongKind { what, len, magic });
        }
        let version = header.version.load(Ordering::Relaxed);
        if version != VERSION {
            return Err(RegionOpenError::VersionMismatch {
                what,
                ours: VERSION,
                theirs: version,
            });
        }
        let malformed = |why: String| Err(RegionOpenError::Malformed { what, why });
        let fixed = header.fixed_len.load(Ordering::Relaxed);
        let at = header.body_at.load(Ordering::Relaxed);
        if fixed as usize != size_of::<T>() || at != self.body_at as u64 {
            return malformed(format!(
                "its fixed part has {fixed} bytes and its items start at byte {at}; this build \
                 lays out {} and {}",
                size_of::<T>(),
                self.body_at
            ));
        }
        let said = header.length.load(Ordering::Relaxed);
        if said != len as u64 {
            return malformed(format!("its header says {said} bytes, its file has {len}"));
        }
        if item_size == 0 || !item_size.is_multiple_of(T::item_align()) {
            return malformed(format!(
                "the producer announced {} of {item_size} bytes, not a multiple of {}",
                T::ITEMS,
                T::item_align()
            ));
        }
        let size = header.item_size.load(Ordering::Relaxed);
        if size != item_size as u64 {
            return malformed(format!(
                "its {} have {size} bytes each, the producer announced {item_size}",
                T::ITEMS
            ));
        }
        let count = header.items.load(Ordering::Relaxed);
        match items {
            Some(n) if count != n as u64 => {
                return malformed(format!(
                    "it has {count} {}, the producer announced {n}",
                    T::ITEMS
                ))
            }
            None if count == 0 => return malformed(format!("it has no {}", T::ITEMS)),
            _ => {}
        }
        let end = count
            .checked_mul(item_size as u64)
            .and_then(|b| b.checked_add(at));
        match (end, usize::try_from(count)) {
            (Some(end), Ok(items)) if end <= len as u64 => Ok(Geometry { items, item_size }),
            _ => malformed(format!(
                "{count} {} of {item_size} bytes do not fit its {len} bytes",
                T::ITEMS
            )),
        }
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping (page aligned) holds at least a header: `open`
        // checked its length, `create` made it. `Header` is `Shared`.
        unsafe { &*self.map.as_ptr().cast::<Header>() }
    }

    /// The kind's fixed part.
    pub fn fixed(&self) -> &T {
        const { assert!(align_of::<T>() <= 8, "a fixed part is at most 8-aligned") };
        // SAFETY: the fixed part follows the header (48 bytes, so 8-aligned,
        // and `T: Shared` needs at most 8), inside the mapping (checked at
        // open, made so at create); the reference borrows the mapping.
        unsafe { &*self.map.as_ptr().add(size_of::<Header>()).cast::<T>() }
    }

    /// The `E` at the start of item `i`; `None` if `i` is out of range.
    ///
    /// Panics if `E` is larger than an item or more aligned than the items:
    /// a fault of the caller's types, never of input.
    pub fn item<E: Shared>(&self, i: usize) -> Option<&E> {
        assert!(
            size_of::<E>() <= self.geometry.item_size && align_of::<E>() <= T::item_align(),
            "{} does not fit an item of the {}",
            std::any::type_name::<E>(),
            T::WHAT
        );
        let ptr = self.item_ptr(i)?;
        assert!(
            ptr.cast::<E>().is_aligned(),
            "items of the {} are misaligned",
            T::WHAT
        );
        // SAFETY: item `i` lies inside the mapping (`item_ptr` checks the
        // index against the geometry validated at open), `E` fits in it and
        // is aligned (asserted above), and `E: Shared`; the reference
        // borrows the mapping.
        Some(unsafe { &*ptr.cast::<E>() })
    }

    /// The start of item `i`; `None` if `i` is out of range.
    pub fn item_ptr(&self, i: usize) -> Option<*mut u8> {
        (i < self.geometry.items).then(|| {
            // In bounds: the validated geometry fits the mapping.
            self.map.as_mut_ptr().wrapping_add(self.item_offset(i))
        })
    }

    /// Byte offset of item `i` in the mapping.
    pub fn item_offset(&self, i: usize) -> usize {
        self.body_at + i * self.geometry.item_size
    }

    /// The mapping (for `crate::private_pages`).
    pub fn map(&self) -> &MmapRaw {
        &self.map
    }

    /// Number of items.
    pub fn items(&self) -> usize {
        self.geometry.items
    }

    /// Bytes per item.
    pub fn item_size(&self) -> usize {
        self.geometry.item_size
    }

    /// Reserves the memory of item `i` of the region in `file` (a no-op
    /// for one already reserved). Fails with the kernel's refusal (ENOSPC,
    /// ENOMEM) when memory is short: then writing the item would be SIGBUS.
    pub fn reserve(&self, file: &File, i: usize) -> Result<(), Errno> {
        if i >= self.geometry.items {
            return Err(Errno::INVAL);
        }
        let (at, len) = (self.item_offset(i), self.geometry.item_size);
        rustix::fs::fallocate(file, FallocateFlags::empty(), at as u64, len as u64)
    }
}

/// A read-only descriptor of `file` (`/proc/self/fd/N` reopened): whoever
/// receives it can neither write the file nor map it writable.
pub(crate) fn reopen_readonly(file: &File) -> crate::error::Result<OwnedFd> {
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    rustix::fs::open(
        path.as_str(),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| Error::io("cannot reopen shared memory read-only", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    struct Test {
        word: AtomicU64,
    }
    // SAFETY: `#[repr(C)]`, atomics only.
    unsafe impl Shared for Test {}
    impl Kind for Test {
        const MAGIC: [u8; 8] = *b"BCTEST01";
        const WHAT: &'static str = "test region";
        const ITEMS: &'static str = "words";
    }

    /// A kind laid out as [`Test`] is: only its magic tells them apart.
    #[repr(C)]
    struct Other(Test);
    // SAFETY: `#[repr(C)]` around a `Shared` struct of atomics.
    unsafe impl Shared for Other {}
    impl Kind for Other {
        const MAGIC: [u8; 8] = *b"BCOTHER1";
        const WHAT: &'static str = "other region";
        const ITEMS: &'static str = "words";
    }

    fn made(items: usize) -> (Region<Test>, File) {
        let geometry = Geometry {
            items,
            item_size: 8,
        };
        Region::<Test>::create("t", geometry, items, Writers::Anyone).unwrap()
    }

    fn reopen<T: Kind>(file: &File, items: Option<usize>) -> Result<Region<T>, RegionOpenError> {
        Region::<T>::open(reopen_readonly(file).unwrap(), Access::ReadOnly, items, 8)
    }

    /// The header's word at `k` (in 8-byte words), rewritten by a peer.
    fn poke(region: &Region<Test>, k: usize, value: u64) {
        assert!(k < size_of::<Header>() / 8);
        let ptr = region.map.as_mut_ptr().cast::<AtomicU64>();
        // SAFETY: word `k` of the header, inside the mapping, 8-aligned.
        unsafe { &*ptr.add(k) }.store(value, Ordering::Relaxed);
    }

    #[test]
    fn what_one_side_writes_the_other_reads() {
        let (region, file) = made(3);
        let view = reopen::<Test>(&file, Some(3)).unwrap();
        region.fixed().word.store(7, Ordering::Relaxed);
        region
            .item::<AtomicU64>(2)
            .unwrap()
            .store(9, Ordering::Relaxed);
        assert_eq!(view.fixed().word.load(Ordering::Relaxed), 7);
        assert_eq!(
            view.item::<AtomicU64>(2).unwrap().load(Ordering::Relaxed),
            9
        );
        assert!(view.item::<AtomicU64>(3).is_none());
        assert_eq!(reopen::<Test>(&file, None).unwrap().items(), 3);
    }

    #[test]
    fn another_kind_is_refused_by_its_magic() {
        let (_region, file) = made(1);
        let err = reopen::<Other>(&file, None).err().unwrap();
        assert!(matches!(err, RegionOpenError::WrongKind { .. }), "{err}");
        assert!(
            err.to_string().contains("not a batchcast other region"),
            "{err}"
        );
    }

    #[test]
    fn another_version_is_refused_with_both_versions() {
        let (region, file) = made(1);
        poke(&region, 1, u64::from(VERSION + 1) | (8 << 32));
        let err = reopen::<Test>(&file, None).err().unwrap().to_string();
        assert!(err.contains(&format!("version {}", VERSION + 1)), "{err}");
        assert!(err.contains("same batchcast version"), "{err}");
    }

    #[test]
    fn a_header_that_disagrees_with_the_file_is_refused() {
        // Words: 2 length, 3 body_at, 4 items, 5 item_size.
        let bad = [
            (2, 1 << 40),
            (3, 8),
            (4, 0),
            (4, 1 << 40),
            (4, u64::MAX),
            (5, 16),
            (5, u64::MAX),
        ];
        for (k, value) in bad {
            let (region, file) = made(2);
            poke(&region, k, value);
            let err = reopen::<Test>(&file, None).err().unwrap();
            assert!(
                matches!(err, RegionOpenError::Malformed { .. }),
                "word {k} = {value}: {err}"
            );
        }
        let (_region, file) = made(2);
        assert!(reopen::<Test>(&file, Some(3)).is_err());
    }

    #[test]
    fn an_unsealed_or_truncated_file_is_refused() {
        let file = tempfile::tempfile().unwrap();
        file.set_len(4096).unwrap();
        let err = Region::<Test>::open(file.into(), Access::ReadOnly, None, 8)
            .err()
            .unwrap();
        assert!(matches!(err, RegionOpenError::NotSealed { .. }), "{err}");
        let fd =
            rustix::fs::memfd_create("t", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
        rustix::fs::ftruncate(&fd, 16).unwrap();
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK).unwrap();
        let err = Region::<Test>::open(fd, Access::ReadOnly, None, 8)
            .err()
            .unwrap();
        assert!(matches!(err, RegionOpenError::WrongKind { .. }), "{err}");
    }

    #[test]
    fn a_creator_only_region_cannot_be_written_through_its_file() {
        let geometry = Geometry {
            items: 1,
            item_size: 8,
        };
        let (region, file) = Region::<Test>::create("t", geometry, 1, Writers::Creator).unwrap();
        assert_eq!(
            rustix::io::pwrite(&file, b"x", 0).unwrap_err(),
            rustix::io::Errno::PERM
        );
        region.fixed().word.store(1, Ordering::Relaxed);
        assert!(Region::<Test>::open(file.into(), Access::ReadWrite, None, 8).is_err());
    }
}
