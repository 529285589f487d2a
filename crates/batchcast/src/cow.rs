//! Copy-on-write for in-place writes to read-only batch views.
//!
//! Consumers map the arena read-only, so that no consumer can change what the
//! others read. A Python user who writes to a batch tensor in place
//! (`images.sub_(mean)`) would then die of SIGSEGV. With copy-on-write
//! enabled ([`enable`]), a SIGSEGV handler catches a write fault inside a
//! registered arena, remaps that one slot `MAP_PRIVATE` and writable at the
//! same address, and returns: the write proceeds, on a private copy of each
//! page it touches, visible to this process only. When the slot is leased
//! again for a new batch, [`refresh`] maps it shared and read-only again
//! first, so the new batch is seen as the producer wrote it.
//!
//! Faults outside every arena go to the handler that was installed before
//! (Python's faulthandler, or the default action), so real crashes still
//! crash. The common path costs nothing: no fault, no handler.
//!
//! The registry is a fixed table of atomics, read by the handler without
//! locks or allocation. Slots are page-aligned (the arena rounds slot sizes
//! up to pages), so remapping one slot never touches another.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Most arenas registered at once in one process.
const MAX_REGIONS: usize = 32;
/// Most slots per arena that copy-on-write tracks.
pub const MAX_SLOTS: usize = 1024;

struct Region {
    start: AtomicUsize,
    len: AtomicUsize,
    slot_size: AtomicUsize,
    fd: AtomicI32,
    dirty: [AtomicU64; MAX_SLOTS / 64],
}

#[allow(clippy::declare_interior_mutable_const)] // used only as an array initialiser
const EMPTY_REGION: Region = Region {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    slot_size: AtomicUsize::new(0),
    fd: AtomicI32::new(-1),
    dirty: [const { AtomicU64::new(0) }; MAX_SLOTS / 64],
};

/// `si_code` of a fault on a mapped page without the needed permission
/// (Linux's SEGV_ACCERR; the libc crate does not export it on every target).
const SEGV_ACCERR: libc::c_int = 2;

static REGIONS: [Region; MAX_REGIONS] = [EMPTY_REGION; MAX_REGIONS];
static INSTALLED: AtomicBool = AtomicBool::new(false);
static INSTALL_LOCK: Mutex<()> = Mutex::new(());
/// The handler that was in place before ours (a `libc::sigaction`, written
/// once under `INSTALL_LOCK` before our handler can run).
static mut PREVIOUS: Option<libc::sigaction> = None;

/// Installs the SIGSEGV handler (once per process; again if someone has
/// replaced it since). Returns false if it could not be installed.
pub fn enable() -> bool {
    let _guard = INSTALL_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: querying the current action with a null new action only
    // writes `current`, a valid sigaction.
    let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut current) } != 0 {
        return false;
    }
    if INSTALLED.load(Ordering::Acquire) && current.sa_sigaction == on_segv as *const () as usize {
        return true;
    }
    // SAFETY: a zeroed sigaction is valid; we fill the fields we use.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_segv as *const () as usize;
    action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
    // SAFETY: `action.sa_mask` is a valid sigset to initialise.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: PREVIOUS is written only here, under INSTALL_LOCK, before the
    // new handler (its only reader) is installed by the call below.
    unsafe { PREVIOUS = Some(current) };
    // SAFETY: installing a handler with a valid sigaction.
    let ok = unsafe { libc::sigaction(libc::SIGSEGV, &action, std::ptr::null_mut()) } == 0;
    INSTALLED.store(ok, Ordering::Release);
    ok
}

/// Registers an arena mapping for copy-on-write. Returns its registry index,
/// or None if the table is full or the arena has too many slots.
pub fn register(start: usize, len: usize, slot_size: usize, fd: i32) -> Option<usize> {
    if len / slot_size.max(1) > MAX_SLOTS || slot_size % page_size() != 0 {
        return None;
    }
    for (i, r) in REGIONS.iter().enumerate() {
        if r.start
            .compare_exchange(0, usize::MAX, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            for d in &r.dirty {
                d.store(0, Ordering::Relaxed);
            }
            r.len.store(len, Ordering::Relaxed);
            r.slot_size.store(slot_size, Ordering::Relaxed);
            r.fd.store(fd, Ordering::Relaxed);
            r.start.store(start, Ordering::Release);
            return Some(i);
        }
    }
    None
}

/// Forgets a registered arena (before it is unmapped).
pub fn unregister(index: usize) {
    if let Some(r) = REGIONS.get(index) {
        r.start.store(0, Ordering::Release);
    }
}

/// Before slot `slot` of arena `index` is read for a new batch: if this
/// process wrote to it, maps it shared and read-only again.
pub fn refresh(index: usize, slot: usize) -> std::io::Result<()> {
    let Some(r) = REGIONS.get(index) else {
        return Ok(());
    };
    let (word, bit) = (slot / 64, 1u64 << (slot % 64));
    if slot >= MAX_SLOTS || r.dirty[word].fetch_and(!bit, Ordering::AcqRel) & bit == 0 {
        return Ok(());
    }
    let size = r.slot_size.load(Ordering::Relaxed);
    let addr = r.start.load(Ordering::Acquire) + slot * size;
    // SAFETY: the range is slot `slot` of our own live mapping (registered,
    // so not yet unmapped); no view of it exists, since the slot was
    // released before the producer could reuse it, so replacing its pages
    // with the shared, read-only ones invalidates no reference.
    let res = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            size,
            libc::PROT_READ,
            libc::MAP_SHARED | libc::MAP_FIXED,
            r.fd.load(Ordering::Relaxed),
            (slot * size) as libc::off_t,
        )
    };
    if res == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn page_size() -> usize {
    rustix::param::page_size()
}

/// The SIGSEGV handler. Async-signal-safe: atomics and `mmap` only.
extern "C" fn on_segv(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let (addr, code) = unsafe { ((*info).si_addr() as usize, (*info).si_code) };
    if code == SEGV_ACCERR {
        for r in &REGIONS {
            let start = r.start.load(Ordering::Acquire);
            let len = r.len.load(Ordering::Relaxed);
            if start == 0 || start == usize::MAX || addr < start || addr >= start + len {
                continue;
            }
            let size = r.slot_size.load(Ordering::Relaxed);
            let slot = (addr - start) / size;
            let slot_addr = start + slot * size;
            // SAFETY: replaces slot `slot` of our own mapping with a private,
            // writable mapping of the same bytes at the same address. The
            // pages' contents are unchanged for every reader in this
            // process; only the protection and sharing change. mmap is a
            // plain syscall, safe in a signal handler.
            let res = unsafe {
                libc::mmap(
                    slot_addr as *mut libc::c_void,
                    size,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_FIXED,
                    r.fd.load(Ordering::Relaxed),
                    (slot * size) as libc::off_t,
                )
            };
            if res != libc::MAP_FAILED {
                if slot < MAX_SLOTS {
                    r.dirty[slot / 64].fetch_or(1 << (slot % 64), Ordering::AcqRel);
                }
                return; // the write is retried, now on a private page
            }
        }
    }
    chain(sig, info, ctx);
}

/// Hands a fault that is not ours to the previous handler.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: PREVIOUS was written before this handler was installed and is
    // never written again while it is installed.
    let prev = unsafe { *std::ptr::addr_of!(PREVIOUS) };
    match prev {
        Some(p) if p.sa_sigaction != libc::SIG_DFL && p.sa_sigaction != libc::SIG_IGN => {
            if p.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous handler was installed with SA_SIGINFO,
                // so it has this signature.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(p.sa_sigaction) };
                f(sig, info, ctx);
            } else {
                // SAFETY: a plain handler takes the signal number only.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(p.sa_sigaction) };
                f(sig);
            }
        }
        _ => {
            // Restore the default action; returning re-runs the faulting
            // instruction, which then crashes as it would have without us.
            // SAFETY: a zeroed sigaction with SIG_DFL is valid.
            let mut dfl: libc::sigaction = unsafe { std::mem::zeroed() };
            dfl.sa_sigaction = libc::SIG_DFL;
            // SAFETY: installing the default action.
            unsafe { libc::sigaction(libc::SIGSEGV, &dfl, std::ptr::null_mut()) };
        }
    }
}
