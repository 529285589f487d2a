//! CPU time of this process and of its reaped children.

/// Whose CPU time.
#[derive(Clone, Copy)]
pub enum Who {
    /// This process, all threads.
    SelfProcess,
    /// Children that have been waited for.
    Children,
}

/// User + system CPU seconds of `who`.
pub fn cpu_secs(who: Who) -> f64 {
    let which = match who {
        Who::SelfProcess => libc::RUSAGE_SELF,
        Who::Children => libc::RUSAGE_CHILDREN,
    };
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage for the call to fill.
    if unsafe { libc::getrusage(which, &mut usage) } != 0 {
        return 0.0;
    }
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(usage.ru_utime) + t(usage.ru_stime)
}
