//! A consumer's private pages of a slot: found and dropped before the slot
//! is read for a new batch.
//!
//! With copy-on-write, a consumer maps the arena `MAP_PRIVATE` and writable.
//! An in-place write gives the writer a private copy of the page it touches
//! (the kernel's copy-on-write, page by page, correct under any number of
//! threads and with no signal handler); a page never written keeps showing
//! the file, so the producer's later writes show through it. A written page
//! would not: before a reused slot is read, its private pages must go.
//! `madvise(MADV_DONTNEED)` on a private file mapping does that: it discards
//! the private copies, and the next access reads the file again.
//!
//! Dropping a whole slot costs a consumer that only reads: `MADV_DONTNEED`
//! also unmaps the shared pages, and each is faulted in again on the next
//! read (20x the read-only mapping's per-batch cost for a consumer that
//! reads 64 MiB batches; see `examples/inplace_cost.rs`). So where the kernel offers it (Linux 6.7+),
//! the `PAGEMAP_SCAN` ioctl on `/proc/self/pagemap` first finds the slot's
//! private pages (present or swapped, not file pages), and only those
//! ranges are dropped: nothing, for a consumer that never writes. Where the
//! scan is unavailable or fails, the whole slot is dropped: the scan only
//! ever saves work, it never decides that a private page may stay.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

use memmap2::{MmapRaw, UncheckedAdvice};

/// `struct pm_scan_arg` of `<linux/fs.h>` (not in the libc crate yet).
#[repr(C)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region` of `<linux/fs.h>`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

const PAGE_IS_FILE: u64 = 1 << 2;
const PAGE_IS_PRESENT: u64 = 1 << 3;
const PAGE_IS_SWAPPED: u64 = 1 << 4;
/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: libc::c_ulong = 0xC060_6610;
/// Regions found per ioctl; more are found by calling again.
const REGIONS: usize = 32;

/// Drops a consumer's private pages.
pub(crate) struct PrivatePages {
    /// `/proc/self/pagemap`, while `PAGEMAP_SCAN` works on it.
    pagemap: Option<File>,
    /// The process that opened it: a forked child inherits the descriptor,
    /// which still describes its parent's memory, not the child's.
    opened_by: rustix::process::Pid,
    scan_works: AtomicBool,
}

impl PrivatePages {
    /// Opens `/proc/self/pagemap` for scans, if it can.
    pub(crate) fn new() -> PrivatePages {
        let pagemap = File::open("/proc/self/pagemap").ok();
        PrivatePages {
            scan_works: AtomicBool::new(pagemap.is_some()),
            opened_by: rustix::process::getpid(),
            pagemap,
        }
    }

    /// Drops every private page in bytes `offset..offset + len` of `map`,
    /// so that the range shows the file again.
    ///
    /// # Safety
    /// The range must lie inside `map`, a private file mapping, and no
    /// reference into it may be alive: its contents change.
    pub(crate) unsafe fn drop_in(
        &self,
        map: &MmapRaw,
        offset: usize,
        len: usize,
    ) -> std::io::Result<()> {
        let base = map.as_ptr() as u64;
        let (mut at, end) = (base + offset as u64, base + (offset + len) as u64);
        let dontneed = |from: u64, to: u64| {
            // SAFETY: `from..to` lies inside the caller's range (scan results
            // lie inside the scanned range), which the caller vouches for.
            unsafe {
                map.unchecked_advise_range(
                    UncheckedAdvice::DontNeed,
                    (from - base) as usize,
                    (to - from) as usize,
                )
            }
        };
        while at < end {
            let Some((regions, walk_end)) = self.scan(at, end) else {
                return dontneed(at, end);
            };
            for r in regions {
                dontneed(r.start.max(at), r.end.min(end))?;
            }
            // The kernel always makes progress; a result that does not is
            // not trusted: drop the rest.
            if walk_end <= at {
                return dontneed(at, end);
            }
            at = walk_end;
        }
        Ok(())
    }

    /// Private pages (present or swapped, not file pages) in `start..end`:
    /// up to [`REGIONS`] ranges, and where the walk stopped. `None` if the
    /// kernel cannot tell.
    fn scan(&self, start: u64, end: u64) -> Option<(Vec<PageRegion>, u64)> {
        let pagemap = self.pagemap.as_ref()?;
        if !self.scan_works.load(Ordering::Relaxed) || rustix::process::getpid() != self.opened_by {
            return None;
        }
        let mut found = [PageRegion::default(); REGIONS];
        let mut arg = PmScanArg {
            size: std::mem::size_of::<PmScanArg>() as u64,
            flags: 0,
            start,
            end,
            walk_end: 0,
            vec: found.as_mut_ptr() as u64,
            vec_len: REGIONS as u64,
            max_pages: 0,
            category_inverted: PAGE_IS_FILE,
            category_mask: PAGE_IS_FILE,
            category_anyof_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
            return_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
        };
        // SAFETY: `arg` is a valid pm_scan_arg whose `vec` points at room
        // for `vec_len` page_regions; both live across the call, which
        // writes nothing else.
        let n = unsafe { libc::ioctl(pagemap.as_raw_fd(), PAGEMAP_SCAN, &mut arg) };
        let Ok(n) = usize::try_from(n) else {
            let errno = std::io::Error::last_os_error().raw_os_error();
            if matches!(errno, Some(libc::ENOTTY | libc::EINVAL)) {
                // Unsupported (before Linux 6.7): never try again.
                self.scan_works.store(false, Ordering::Relaxed);
            }
            return None;
        };
        let regions = found.get(..n)?.to_vec();
        let walk_end = if arg.walk_end == 0 { end } else { arg.walk_end };
        Some((regions, walk_end.min(end)))
    }

    /// True when this kernel finds private pages without dropping the whole
    /// range.
    #[cfg(test)]
    pub(crate) fn scans(&self) -> bool {
        self.pagemap.is_some() && self.scan_works.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memmap2::MmapOptions;

    /// A memfd of `pages` pages of 1s, mapped privately.
    fn private_map(pages: usize) -> (File, MmapRaw) {
        let page = rustix::param::page_size();
        let fd = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        let file = File::from(fd);
        file.set_len((pages * page) as u64).unwrap();
        // SAFETY: our own memfd, never resized.
        let mut shared = unsafe { MmapOptions::new().map_mut(&file) }.unwrap();
        shared.fill(1);
        // SAFETY: a private mapping of the same memfd.
        let map = unsafe { MmapOptions::new().map_copy(&file) }.unwrap();
        (file, MmapRaw::from(map))
    }

    fn byte(map: &MmapRaw, at: usize) -> u8 {
        // SAFETY: inside the mapping; read through the raw pointer.
        unsafe { map.as_ptr().add(at).read_volatile() }
    }

    fn write(map: &MmapRaw, at: usize, v: u8) {
        // SAFETY: inside a private, writable mapping.
        unsafe { map.as_mut_ptr().add(at).write_volatile(v) }
    }

    #[test]
    fn written_pages_are_dropped_and_others_kept() {
        let page = rustix::param::page_size();
        let (_file, map) = private_map(64);
        for p in [0, 1, 7, 40, 63] {
            write(&map, p * page + 5, 9);
        }
        byte(&map, 20 * page); // a shared page, mapped
        let pages = PrivatePages::new();
        // Pages 1..48 of the mapping: 7 and 40 go; 0 and 63 lie outside.
        // SAFETY: inside the mapping; no reference into it.
        unsafe { pages.drop_in(&map, page, 47 * page) }.unwrap();
        assert_eq!(byte(&map, 7 * page + 5), 1);
        assert_eq!(byte(&map, 40 * page + 5), 1);
        assert_eq!(byte(&map, page + 5), 1);
        assert_eq!(byte(&map, 5), 9, "outside the range");
        assert_eq!(byte(&map, 63 * page + 5), 9, "outside the range");
    }

    #[test]
    fn more_written_runs_than_one_scan_returns_are_all_dropped() {
        let page = rustix::param::page_size();
        let (_file, map) = private_map(4 * REGIONS + 8);
        let written: Vec<usize> = (0..4 * REGIONS + 8).step_by(2).collect();
        for &p in &written {
            write(&map, p * page, 9);
        }
        let pages = PrivatePages::new();
        // SAFETY: the whole mapping; no reference into it.
        unsafe { pages.drop_in(&map, 0, map.len()) }.unwrap();
        for &p in &written {
            assert_eq!(byte(&map, p * page), 1, "page {p}");
        }
    }

    #[test]
    fn without_a_scan_the_whole_range_is_dropped() {
        let page = rustix::param::page_size();
        let (_file, map) = private_map(8);
        write(&map, 3 * page, 9);
        let pages = PrivatePages {
            pagemap: None,
            opened_by: rustix::process::getpid(),
            scan_works: AtomicBool::new(false),
        };
        // SAFETY: the whole mapping; no reference into it.
        unsafe { pages.drop_in(&map, 0, map.len()) }.unwrap();
        assert_eq!(byte(&map, 3 * page), 1);
        // Nor in a forked child, whose inherited pagemap is its parent's.
        write(&map, 5 * page, 9);
        let parent = rustix::process::getppid().unwrap_or(rustix::process::Pid::INIT);
        let forked = PrivatePages {
            opened_by: parent,
            ..PrivatePages::new()
        };
        assert!(forked
            .scan(map.as_ptr() as u64, map.as_ptr() as u64 + 4096)
            .is_none());
        // SAFETY: the whole mapping; no reference into it.
        unsafe { forked.drop_in(&map, 0, map.len()) }.unwrap();
        assert_eq!(byte(&map, 5 * page), 1);
    }

    #[test]
    fn this_kernel_scans() {
        // Linux 6.7+ (CI runs one): the saving is real there. Elsewhere the
        // whole slot is dropped, which is correct but slower.
        let release = rustix::system::uname()
            .release()
            .to_string_lossy()
            .into_owned();
        let mut v = release
            .split(['.', '-'])
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
        if (major, minor) >= (6, 7) {
            assert!(
                PrivatePages::new().scans(),
                "PAGEMAP_SCAN fails on {release}"
            );
        }
    }
}
