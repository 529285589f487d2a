//! What copy-on-write costs a consumer per batch, for each way of giving a
//! consumer private in-place writes, side by side:
//!
//! - `shared-ro`: the arena mapped shared and read-only (no in-place writes
//!   possible: a write is SIGSEGV). The baseline.
//! - `private+dontneed`: mapped `MAP_PRIVATE` and writable; before a reused
//!   slot is read, `MADV_DONTNEED` drops its private pages (and with them
//!   its page-table entries, so the next read of each page faults again).
//! - `+populate`: the same, then `MADV_POPULATE_READ` maps the slot again in
//!   one call instead of a fault per 64 KiB (fault-around) on first read.
//! - `+pagemap-skip`: `MADV_DONTNEED` only when `/proc/self/pagemap` shows a
//!   private page in the slot (reads 8 bytes per page of the slot).
//! - `batchcast`: what batchcast does (`ArenaView::refresh` on a
//!   copy-on-write view): the `PAGEMAP_SCAN` ioctl (Linux 6.7+) finds the
//!   private pages, and only their ranges are dropped.
//!
//! Each is measured for a consumer that leaves the data alone (reads the
//! slot's header page only), one that reads every page of each batch (one
//! word per page: the fault and TLB cost without the memory bandwidth), and
//! one that also writes one byte of each batch in place. A producer (this
//! process, its own shared mapping) cycles through a window of slots, so
//! every batch lands in a reused slot as it does in a real run.
//!
//! Run: `cargo run --release -p batchcast --example inplace_cost`
//! (`-- 1,64` picks the batch sizes in MiB).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use batchcast::internals::{Arena, ArenaView};
use memmap2::{MmapMut, MmapOptions, MmapRaw};

const WINDOW: usize = 8;
const PAGE: usize = 4096;

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    SharedRo,
    Dontneed,
    Populate,
    PagemapSkip,
    Batchcast,
}

const VARIANTS: [(Variant, &str); 5] = [
    (Variant::SharedRo, "shared-ro"),
    (Variant::Dontneed, "private+dontneed"),
    (Variant::Populate, "+populate"),
    (Variant::PagemapSkip, "+pagemap-skip"),
    (Variant::Batchcast, "batchcast"),
];

#[derive(Clone, Copy, PartialEq)]
enum Use {
    Untouched,
    ReadsPages,
    WritesOne,
    /// Reads every byte (for scale; not in the table).
    ReadsAll,
}

const USES: [(Use, &str); 3] = [
    (Use::Untouched, "untouched"),
    (Use::ReadsPages, "reads every page"),
    (Use::WritesOne, "writes 1 byte, reads every page"),
];

struct Setup {
    producer: MmapMut,
    consumer: MmapRaw,
    pagemap: File,
    slot: usize,
    entries: Vec<u8>,
    /// For `Variant::Batchcast`: the real arena and view.
    real: Option<(Arena, ArenaView)>,
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "1,64".into())
        .split(',')
        .map(|s| s.parse().expect("batch sizes in MiB, e.g. 1,64"))
        .collect();
    println!(
        "per-batch consumer cost in microseconds (median of 5 runs; window {WINDOW}; x = ratio to shared-ro)"
    );
    for &mb in &sizes {
        let slot = mb << 20;
        let batches = (2048 / mb).clamp(64, 1024);
        println!("\n{mb} MiB batches ({batches} per run)");
        print!("{:>18}", "variant");
        for (_, uname) in USES {
            print!(" {uname:>32}");
        }
        println!();
        let mut base = [f64::NAN; USES.len()];
        for (variant, vname) in VARIANTS {
            print!("{vname:>18}");
            for (k, (usage, _)) in USES.iter().enumerate() {
                if variant == Variant::SharedRo && *usage == Use::WritesOne {
                    print!(" {:>32}", "(SIGSEGV)");
                    continue;
                }
                let us = median_us(variant, *usage, slot, batches);
                if variant == Variant::SharedRo {
                    base[k] = us;
                }
                if base[k].is_nan() || base[k] < 1.0 || variant == Variant::SharedRo {
                    print!(" {us:>32.1}");
                } else {
                    print!(" {:>32}", format!("{us:.1} ({:.1}x)", us / base[k]));
                }
            }
            println!();
        }
        let all = |v| median_us(v, Use::ReadsAll, slot, batches);
        let (ro, ours) = (all(Variant::SharedRo), all(Variant::Batchcast));
        println!(
            "{:>18} {:>32.1} {:>32}",
            "reading all bytes",
            ro,
            format!("batchcast: {ours:.1} ({:.2}x)", ours / ro)
        );
    }
}

/// [`per_batch_us`], the median of 5 runs.
fn median_us(variant: Variant, usage: Use, slot: usize, batches: usize) -> f64 {
    let mut runs: Vec<f64> = (0..5)
        .map(|_| per_batch_us(variant, usage, slot, batches))
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[2]
}

fn setup(variant: Variant, slot: usize) -> Setup {
    let fd = rustix::fs::memfd_create("inplace-cost", rustix::fs::MemfdFlags::CLOEXEC)
        .expect("memfd_create");
    let file = File::from(fd);
    file.set_len((slot * WINDOW) as u64)
        .expect("size the memfd");
    // SAFETY: our own memfd, never resized after this.
    let mut producer = unsafe { MmapOptions::new().map_mut(&file) }.expect("map the producer");
    producer.fill(1); // allocate every page, as fallocate does
    let consumer = if variant == Variant::SharedRo {
        MmapOptions::new().map_raw_read_only(&file)
    } else {
        // SAFETY: a private mapping: writes never reach the file.
        unsafe { MmapOptions::new().map_copy(&file) }.map(MmapRaw::from)
    }
    .expect("map the consumer");
    Setup {
        producer,
        consumer,
        pagemap: File::open("/proc/self/pagemap").expect("open /proc/self/pagemap"),
        slot,
        entries: vec![0u8; slot / PAGE * 8],
        real: (variant == Variant::Batchcast).then(|| {
            let mut arena = Arena::create("inplace-cost", WINDOW, slot).expect("arena");
            for i in 0..WINDOW {
                arena.slot_mut(i).fill(1);
            }
            let fd = arena.readonly_fd().expect("arena fd");
            let view = ArenaView::map(fd, WINDOW, slot, true).expect("map the arena");
            (arena, view)
        }),
    }
}

fn per_batch_us(variant: Variant, usage: Use, slot: usize, batches: usize) -> f64 {
    let mut s = setup(variant, slot);
    let mut total = 0.0;
    let mut sum = 0u64;
    // One warm-up pass over the window, then the timed batches.
    for b in 0..WINDOW + batches {
        let i = b % WINDOW;
        let t0;
        let base = match s.real.as_mut() {
            Some((arena, view)) => {
                arena.slot_mut(i)[0] = b as u8; // the producer's new header
                t0 = Instant::now();
                view.refresh(i).expect("refresh");
                view.slot_ptr(i).expect("slot")
            }
            None => {
                s.producer[i * slot] = b as u8;
                t0 = Instant::now();
                refresh(&mut s, variant, i);
                s.consumer.as_mut_ptr().wrapping_add(i * slot)
            }
        };
        // SAFETY: reads and writes inside slot `i` of our own mapping (a
        // write only on a private mapping); the slot is page aligned, and
        // nothing writes it while the u64 slice lives (one thread).
        unsafe {
            sum += u64::from(base.read_volatile());
            if usage == Use::WritesOne {
                // The last write to this slot was dropped by the refresh.
                assert_eq!(
                    base.add(slot / 2).read_volatile(),
                    1,
                    "a private page survived"
                );
                base.add(slot / 2).write_volatile(9);
            }
            if usage == Use::ReadsAll {
                let words = std::slice::from_raw_parts(base.cast::<u64>(), slot / 8);
                sum += words.iter().fold(0u64, |a, &w| a.wrapping_add(w));
            } else if usage != Use::Untouched {
                for p in (0..slot).step_by(PAGE) {
                    sum += u64::from(base.add(p).read_volatile());
                }
            }
        }
        if b >= WINDOW {
            total += t0.elapsed().as_secs_f64();
        }
    }
    std::hint::black_box(sum);
    total * 1e6 / batches as f64
}

fn refresh(s: &mut Setup, variant: Variant, i: usize) {
    let (off, len) = (i * s.slot, s.slot);
    let dontneed = |s: &Setup| {
        // SAFETY: no reference into the slot is alive; dropping private
        // pages of a private mapping only shows the file again.
        unsafe {
            s.consumer
                .unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, off, len)
        }
        .expect("madvise(DONTNEED)")
    };
    match variant {
        Variant::SharedRo | Variant::Batchcast => {}
        Variant::Dontneed => dontneed(s),
        Variant::Populate => {
            dontneed(s);
            s.consumer
                .advise_range(memmap2::Advice::PopulateRead, off, len)
                .expect("madvise(POPULATE_READ)");
        }
        Variant::PagemapSkip => {
            let addr = s.consumer.as_ptr() as usize + off;
            s.pagemap
                .read_exact_at(&mut s.entries, (addr / PAGE * 8) as u64)
                .expect("read /proc/self/pagemap");
            let private = s.entries.chunks_exact(8).any(|e| {
                let e = u64::from_ne_bytes(e.try_into().unwrap_or([0; 8]));
                let (present, swapped, file) = (e >> 63 & 1, e >> 62 & 1, e >> 61 & 1);
                (present == 1 && file == 0) || swapped == 1
            });
            if private {
                dontneed(s);
            }
        }
    }
}
