//! Device mirrors of the arena, with a memfd standing in for a device's
//! memory: every batch a consumer gets is already in every mirror at its
//! arena offset; a failed copy publishes nothing; the welcome hands the
//! mirrors' fds to consumers in other processes, and a restarted producer
//! hands new ones; options over the bounds are refused.
//!
//! The processes are this test binary run again (`--exact` one test) with
//! [`ROLE`] saying what it plays.

mod common;

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

use common::{assert_says, consumer_options, ids, producer_options, publish, publish_ids, CONNECT};

use batchcast::{
    Batch, Consumer, ConsumerOptions, DeviceMirror, Durability, Error, Event, Mirror, MirrorSpec,
    Producer, ProducerOptions, MAX_DEVICE_ID, MAX_IMPORT_INFO, MAX_MIRRORS,
};
use memmap2::Mmap;
use rustix::fs::MemfdFlags;

/// The environment variable naming the part a re-run of this binary plays.
const ROLE: &str = "BATCHCAST_MIRROR_TEST_ROLE";
/// The environment variable naming the socket directory of a re-run.
const DIR: &str = "BATCHCAST_MIRROR_TEST_DIR";

/// What a test does to a [`MemfdMirror`] while the producer owns it.
#[derive(Default)]
struct Controls {
    /// Its copies fail while set.
    fail: AtomicBool,
    /// Its allocation fails while set.
    refuse: AtomicBool,
    /// When set, the next copy takes it, says it began on the sender and
    /// waits for a word on the receiver before it copies.
    gate: Mutex<Option<(Sender<()>, Receiver<()>)>>,
    /// Copies completed, and their bytes.
    copies: AtomicU64,
    bytes: AtomicU64,
}

/// A device's memory stood in for by a memfd: `allocate` sizes it,
/// `copy_in` writes it at the offset, and the fd it hands out is mapped by
/// the consumers.
struct MemfdMirror {
    device: String,
    info: Vec<u8>,
    memory: Option<(OwnedFd, u64)>,
    controls: Arc<Controls>,
}

impl MemfdMirror {
    fn new(device: &str) -> (MemfdMirror, Arc<Controls>) {
        let controls = Arc::new(Controls::default());
        let mirror = MemfdMirror {
            device: device.to_owned(),
            info: b"memfd".to_vec(),
            memory: None,
            controls: Arc::clone(&controls),
        };
        (mirror, controls)
    }

    /// A mirror on `device` nobody controls.
    fn plain(device: &str) -> Mirror {
        Mirror::new(MemfdMirror::new(device).0)
    }
}

impl DeviceMirror for MemfdMirror {
    fn device(&self) -> &str {
        &self.device
    }

    fn import_info(&self) -> Vec<u8> {
        self.info.clone()
    }

    fn allocate(&mut self, len: u64, _arena_addr: usize) -> io::Result<OwnedFd> {
        if self.controls.refuse.load(Ordering::SeqCst) {
            return Err(io::Error::other("out of device memory"));
        }
        let fd = rustix::fs::memfd_create(&self.device, MemfdFlags::CLOEXEC)?;
        rustix::fs::ftruncate(&fd, len)?;
        let import = fd.try_clone()?;
        self.memory = Some((fd, len));
        Ok(import)
    }

    fn copy_in(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let gate = self.controls.gate.lock().unwrap().take();
        if let Some((began, go)) = gate {
            began.send(()).map_err(io::Error::other)?;
            go.recv().map_err(io::Error::other)?;
        }
        if self.controls.fail.load(Ordering::SeqCst) {
            return Err(io::Error::other("the device refused the copy"));
        }
        let Some((fd, len)) = &self.memory else {
            return Err(io::Error::other("copy before allocate"));
        };
        let end = offset.checked_add(bytes.len() as u64);
        if end.is_none_or(|e| e > *len) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "copy past the allocation",
            ));
        }
        let mut done = 0;
        while done < bytes.len() {
            done += rustix::io::pwrite(fd, &bytes[done..], offset + done as u64)?;
        }
        self.controls.copies.fetch_add(1, Ordering::SeqCst);
        self.controls
            .bytes
            .fetch_add(bytes.len() as u64, Ordering::SeqCst);
        Ok(())
    }
}

/// A consumer's read-only mapping of mirror `spec` by its `fd`.
fn import(spec: &MirrorSpec, fd: &OwnedFd) -> Mmap {
    assert_eq!(spec.import_info, b"memfd");
    let len = usize::try_from(spec.len).unwrap();
    // SAFETY: a memfd of `len` bytes (the producer sized it before the
    // welcome); the test reads only bytes of batches it holds a lease on,
    // which the producer does not rewrite meanwhile.
    unsafe { memmap2::MmapOptions::new().len(len).map(fd) }.unwrap()
}

/// Every mirror the consumer was handed, mapped.
fn import_all(consumer: &Consumer) -> Vec<Mmap> {
    consumer
        .mirrors()
        .iter()
        .map(|(spec, fd)| import(spec, fd))
        .collect()
}

/// Asserts every leaf of `batch` is byte for byte in each of `mirrors` at
/// its arena offset.
fn assert_mirrored(batch: &Batch, mirrors: &[Mmap]) {
    for leaf in batch.leaves() {
        let at = leaf.arena_offset().expect("a zero-copy leaf");
        let bytes = leaf.bytes();
        for (m, map) in mirrors.iter().enumerate() {
            assert_eq!(
                &map[at..at + bytes.len()],
                bytes,
                "mirror {m} at offset {at}, batch {}",
                batch.index
            );
        }
    }
}

/// Options of a producer of `name` in `dir` whose arena exists at once,
/// mirrored to `mirrors`.
fn mirrored_options(dir: &Path, mirrors: Vec<Mirror>) -> ProducerOptions {
    ProducerOptions {
        slot_size: Some(4096),
        samples_per_epoch: None,
        mirrors,
        ..producer_options(dir, 4, 0, 4)
    }
}

/// The next batch, skipping epoch starts and ends.
fn next_batch(consumer: &mut Consumer) -> Option<Batch> {
    loop {
        match consumer.next_event(&mut || false).unwrap() {
            Event::Batch(b) => return Some(b),
            Event::Finished(_) => return None,
            _ => {}
        }
    }
}

#[test]
fn every_batch_a_consumer_gets_is_already_in_every_mirror() {
    let dir = tempfile::tempdir().unwrap();
    let (slow, controls) = MemfdMirror::new("GPU-slow");
    let (began, began_rx) = channel();
    let (go, go_rx) = channel();
    *controls.gate.lock().unwrap() = Some((began, go_rx));
    let (other, other_controls) = MemfdMirror::new("GPU-other");
    let mirrors = vec![Mirror::new(slow), Mirror::new(other)];
    let mut producer = Producer::create("mirrored", mirrored_options(dir.path(), mirrors)).unwrap();
    let mut consumer = common::connect("mirrored", consumer_options(dir.path()));
    let maps = import_all(&consumer);
    let batches = 12u64;
    let publisher = std::thread::spawn(move || {
        producer.begin_epoch().unwrap();
        for b in 0..batches {
            publish_ids(&mut producer, b * 4, 4, &[], &mut || false);
        }
        producer.end_epoch().unwrap();
    });
    // While the first copy runs, the control thread welcomes a consumer.
    began_rx.recv().unwrap();
    let late = common::connect("mirrored", consumer_options(dir.path()));
    assert_eq!(late.mirrors().len(), 2);
    drop(late);
    go.send(()).unwrap();
    let mut seen = 0;
    while seen < batches {
        let batch = next_batch(&mut consumer).expect("a batch");
        assert_eq!(ids(&batch)[0], (seen * 4) as i64);
        assert_mirrored(&batch, &maps);
        seen += 1;
    }
    publisher.join().unwrap();
    for c in [&controls, &other_controls] {
        assert_eq!(c.copies.load(Ordering::SeqCst), batches);
        assert!(c.bytes.load(Ordering::SeqCst) >= batches * 32);
    }
}

#[test]
fn a_failed_copy_publishes_nothing_and_says_which_device() {
    let dir = tempfile::tempdir().unwrap();
    let (failing, controls) = MemfdMirror::new("GPU-failing");
    let mirrors = vec![MemfdMirror::plain("GPU-fine"), Mirror::new(failing)];
    let options = ProducerOptions {
        batch_size: Some(1),
        ..mirrored_options(dir.path(), mirrors)
    };
    let mut producer = Producer::create("failing", options).unwrap();
    let mut consumer = common::connect("failing", consumer_options(dir.path()));
    let maps = import_all(&consumer);
    producer.begin_epoch().unwrap();
    assert!(publish(&mut producer, 0, false));
    controls.fail.store(true, Ordering::SeqCst);
    let tree = batchcast::Node::Tuple(vec![batchcast::Node::Leaf(0)]);
    let leaves = [batchcast::LeafSpec::array(batchcast::DType::I64, vec![1])];
    let mut slot = producer.loan(tree, &leaves, &mut || false).unwrap();
    slot.leaf_mut(0).copy_from_slice(&99i64.to_le_bytes());
    let err = slot.publish().unwrap_err().to_string();
    assert_says(&err, "GPU-failing");
    assert_says(&err, "not published");
    controls.fail.store(false, Ordering::SeqCst);
    assert!(publish(&mut producer, 2, false));
    producer.end_epoch().unwrap();
    drop(producer);
    let mut got = Vec::new();
    while let Some(batch) = next_batch(&mut consumer) {
        assert_mirrored(&batch, &maps);
        got.push(ids(&batch)[0]);
    }
    assert_eq!(
        got,
        [0, 2],
        "the batch whose copy failed reached no consumer"
    );
}

#[test]
fn options_over_the_bounds_are_refused_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |mirrors: Vec<Mirror>| -> String {
        match Producer::create("bounds", mirrored_options(dir.path(), mirrors)) {
            Err(Error::InvalidArgument(m)) => m,
            Err(e) => panic!("expected an invalid argument, got {e}"),
            Ok(_) => panic!("options over the bounds were accepted"),
        }
    };
    let many = (0..=MAX_MIRRORS)
        .map(|i| MemfdMirror::plain(&format!("GPU-{i}")))
        .collect();
    assert_says(&refused(many), "at most 16 devices");
    let twice = vec![MemfdMirror::plain("GPU-a"), MemfdMirror::plain("GPU-a")];
    assert_says(&refused(twice), "\"GPU-a\" is mirrored twice");
    let long = vec![MemfdMirror::plain(&"G".repeat(MAX_DEVICE_ID + 1))];
    assert_says(&refused(long), "1 to 96 bytes, not 97");
    let unnamed = vec![MemfdMirror::plain("")];
    assert_says(&refused(unnamed), "1 to 96 bytes, not 0");
    let (mut wordy, _) = MemfdMirror::new("GPU-wordy");
    wordy.info = vec![0; MAX_IMPORT_INFO + 1];
    let msg = refused(vec![Mirror::new(wordy)]);
    assert_says(&msg, "257 bytes of import information");
    // A device that cannot hold the arena: an error naming it.
    let (full, controls) = MemfdMirror::new("GPU-full");
    controls.refuse.store(true, Ordering::SeqCst);
    let options = mirrored_options(dir.path(), vec![Mirror::new(full)]);
    let err = Producer::create("bounds", options)
        .err()
        .unwrap()
        .to_string();
    assert_says(&err, "GPU-full");
    assert_says(&err, "out of device memory");
}

/// A process this test started, killed (SIGKILL) and reaped when dropped,
/// so that a failing test leaves none behind.
struct Rerun(Child);

impl Drop for Rerun {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// This test binary, run again as `role` for the test `test`, in `dir`.
fn rerun(test: &str, role: &str, dir: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(DIR, dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The socket directory when this process was run again as `role`.
fn rerun_as(role: &str) -> Option<std::path::PathBuf> {
    (std::env::var(ROLE).ok()? == role).then(|| std::env::var_os(DIR).map(Into::into))?
}

#[test]
fn a_consumer_in_another_process_reads_batches_from_both_mirrors() {
    let dir = tempfile::tempdir().unwrap();
    let mirrors = vec![MemfdMirror::plain("GPU-a"), MemfdMirror::plain("GPU-b")];
    let mut producer = Producer::create("procs", mirrored_options(dir.path(), mirrors)).unwrap();
    let child = Rerun(rerun(
        "reruns::consumer_of_two_mirrors",
        "consumer",
        dir.path(),
    ));
    assert!(producer.wait_for_consumers(1, Some(CONNECT)));
    producer.begin_epoch().unwrap();
    for b in 0..6 {
        publish_ids(&mut producer, b * 4, 4, &[], &mut || false);
    }
    producer.end_epoch().unwrap();
    drop(producer);
    let mut child = child;
    let mut stdout = String::new();
    let pipe = child.0.stdout.as_mut().unwrap();
    io::Read::read_to_string(pipe, &mut stdout).unwrap();
    assert!(child.0.wait().unwrap().success(), "{stdout}");
    assert_says(&stdout, "6 batches byte-exact in GPU-a, GPU-b");
}

#[test]
fn a_restarted_producer_hands_new_mirrors_to_a_reattaching_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let test = "reruns::durable_mirrored_producer";
    let first = Rerun(rerun(test, "producer", dir.path()));
    let options = ConsumerOptions {
        reconnect_timeout: CONNECT,
        ..consumer_options(dir.path())
    };
    let mut consumer = common::connect("restarted", options);
    assert_eq!(consumer.mirror_generation(), 0);
    let inode = |c: &Consumer| rustix::fs::fstat(c.mirrors()[0].1.as_fd()).unwrap().st_ino;
    let old = inode(&consumer);
    let maps = import_all(&consumer);
    for _ in 0..3 {
        assert_mirrored(&next_batch(&mut consumer).unwrap(), &maps);
    }
    drop(first);
    let _second = Rerun(rerun(test, "producer", dir.path()));
    // The batches the killed producer published before it died come
    // first, from its mirrors; then the restarted one's, from new ones.
    let mut old_batches = 0;
    let batch = loop {
        let batch = next_batch(&mut consumer).unwrap();
        if consumer.mirror_generation() == 1 {
            break batch;
        }
        assert_mirrored(&batch, &maps);
        old_batches += 1;
        assert!(old_batches <= 64, "no more than the old window's batches");
    };
    assert_eq!(consumer.mirrors().len(), 1);
    assert_ne!(inode(&consumer), old, "the restarted producer's mirror");
    assert_mirrored(&batch, &import_all(&consumer));
}

/// The parts the tests above run in other processes: each returns at once
/// unless this process was run again to play it.
mod reruns {
    use super::*;

    #[test]
    fn consumer_of_two_mirrors() {
        let Some(dir) = rerun_as("consumer") else {
            return;
        };
        let mut consumer = common::connect("procs", consumer_options(&dir));
        let devices: Vec<_> = consumer
            .mirrors()
            .iter()
            .map(|(s, _)| s.device.clone())
            .collect();
        let maps = import_all(&consumer);
        let mut n = 0;
        while let Some(batch) = next_batch(&mut consumer) {
            assert_mirrored(&batch, &maps);
            n += 1;
        }
        println!("{n} batches byte-exact in {}", devices.join(", "));
    }

    #[test]
    fn durable_mirrored_producer() {
        let Some(dir) = rerun_as("producer") else {
            return;
        };
        let options = ProducerOptions {
            samples_per_epoch: Some(64),
            durable: Some(Durability::new("mirrors")),
            ..mirrored_options(&dir, vec![MemfdMirror::plain("GPU-a")])
        };
        let mut producer = Producer::create("restarted", options).unwrap();
        let mut row = producer.resumed().map_or(0, |r| r.row);
        // Until the test kills this process.
        for _ in 0..10_000 {
            let epoch = producer.begin_epoch().unwrap();
            while row < 64 {
                publish_ids(&mut producer, epoch * 64 + row, 4, &[], &mut || false);
                row += 4;
            }
            row = 0;
            producer.end_epoch().unwrap();
        }
    }
}
