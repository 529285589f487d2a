//! A producer that hands a consumer shared memory it must not trust (not
//! sealed, not a batchcast region, a region of another layout version, the
//! wrong region in a place, a header that disagrees with the welcome) is
//! refused at connect, with an error that says what is wrong, before any
//! slot is read. The producer here is a fake one on a real Unix socket: it
//! speaks the handshake and sends what the test gives it.

mod common;

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::thread::JoinHandle;
use std::time::Duration;

use batchcast::internals::wire::{
    encode, send_frame_with_fds, FrameReader, ToConsumer, ToProducer, Welcome, PROTOCOL_VERSION,
};
use batchcast::internals::Arena;
use batchcast::{
    Consumer, ConsumerOptions, Endpoint, Error, MirrorSpec, RegionOpenError, StreamSpec,
    MAX_MIRRORS,
};
use common::assert_says;
use rustix::fs::{MemfdFlags, SealFlags};

const SLOT: usize = 4096;

/// Accepts one consumer on `name` in `dir`, reads its hello, and welcomes
/// it to `slots` slots and `mirrors` with `fds` (arena, board, ledger,
/// holder counts, then the mirrors').
fn fake_producer(
    dir: &Path,
    name: &str,
    slots: u32,
    mirrors: Vec<MirrorSpec>,
    fds: Vec<OwnedFd>,
) -> JoinHandle<()> {
    let endpoint = Endpoint::in_dir(name, dir).unwrap();
    endpoint.ensure_dir().unwrap();
    let listener = UnixListener::bind(endpoint.socket_path()).unwrap();
    std::thread::spawn(move || {
        let (sock, _) = listener.accept().unwrap();
        let mut reader = FrameReader::new();
        while reader.next_frame::<ToProducer>().unwrap().is_none() {
            reader.fill(&sock, true, None).unwrap();
        }
        let welcome = ToConsumer::Welcome(Welcome {
            version: PROTOCOL_VERSION,
            producer_pid: std::process::id(),
            slot_size: SLOT as u64,
            slots,
            window: slots,
            samples_per_epoch: None,
            batch_size: None,
            consumer_id: 1,
            stream: StreamSpec::default(),
            first_epoch_partial: false,
            first_epoch_samples: None,
            resumable: false,
            identity: None,
            mirrors,
        });
        let fds: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
        send_frame_with_fds(&sock, &encode(&welcome).unwrap(), &fds).unwrap();
        // Until the consumer hangs up, having refused what it was sent.
        let _ = reader.fill(&sock, true, None);
    })
}

/// A memfd of `len` bytes starting with `head`, sealed against shrinking
/// when `sealed`.
fn memfd(len: u64, head: &[u8], sealed: bool) -> OwnedFd {
    let fd = rustix::fs::memfd_create("hostile", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
        .unwrap();
    rustix::fs::ftruncate(&fd, len).unwrap();
    rustix::io::pwrite(&fd, head, 0).unwrap();
    if sealed {
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW).unwrap();
    }
    fd
}

/// What a consumer gets from a producer that sends `fds` for `slots` slots.
fn connect_to(slots: u32, fds: Vec<OwnedFd>) -> Error {
    connect_to_mirrored(slots, Vec::new(), fds)
}

/// What a consumer gets from a producer that sends `fds` for `slots` slots
/// and `mirrors`.
fn connect_to_mirrored(slots: u32, mirrors: Vec<MirrorSpec>, fds: Vec<OwnedFd>) -> Error {
    let dir = tempfile::tempdir().unwrap();
    let producer = fake_producer(dir.path(), "hostile", slots, mirrors, fds);
    let opts = ConsumerOptions {
        connect_timeout: Some(Duration::from_secs(30)),
        dir: Some(dir.path().to_owned()),
        ..Default::default()
    };
    let err = Consumer::connect("hostile", opts, &mut || false)
        .err()
        .expect("the consumer refuses the producer's shared memory");
    producer.join().unwrap();
    err
}

/// Four descriptors: `arena` and `board` in their places, then two
/// placeholders (never reached: the first refusal ends the connect).
fn welcome_fds(arena: OwnedFd, board: OwnedFd) -> Vec<OwnedFd> {
    vec![arena, board, memfd(8, b"", false), memfd(8, b"", false)]
}

fn region_error(err: Error) -> RegionOpenError {
    match err {
        Error::Region(e) => e,
        other => panic!("expected a region error, got {other:?}"),
    }
}

/// Why a consumer refuses `arena`, sent (with a placeholder board) by a
/// producer that announces `slots` slots.
fn arena_refusal(slots: u32, arena: OwnedFd) -> RegionOpenError {
    region_error(connect_to(slots, welcome_fds(arena, memfd(8, b"", false))))
}

#[test]
fn an_unsealed_arena_is_refused() {
    let arena = memfd(2 * SLOT as u64, b"", false);
    let err = arena_refusal(2, arena);
    assert!(matches!(err, RegionOpenError::NotSealed { .. }), "{err}");
    assert_says(&err.to_string(), "not sealed");
}

#[test]
fn a_file_that_is_not_an_arena_is_refused() {
    // A sealed file of the size the welcome announces, in another layout.
    let arena = memfd(3 * SLOT as u64, b"BCSLOT02", true);
    let err = arena_refusal(2, arena);
    assert!(matches!(err, RegionOpenError::WrongKind { .. }), "{err}");
    assert_says(&err.to_string(), "not a batchcast arena");
}

#[test]
fn an_arena_of_another_layout_version_is_refused_naming_both() {
    // The header's first words: the arena's magic, then version 99.
    let mut head = b"BCARENA2".to_vec();
    head.extend(99u32.to_le_bytes());
    let arena = memfd(3 * SLOT as u64, &head, true);
    let err = arena_refusal(2, arena);
    assert!(
        matches!(err, RegionOpenError::VersionMismatch { .. }),
        "{err}"
    );
    let msg = err.to_string();
    assert_says(&msg, "version 99");
    assert_says(&msg, "same batchcast version");
}

#[test]
fn an_arena_sent_as_the_board_is_refused() {
    let arena = Arena::create("hostile", 2, SLOT).unwrap();
    let fds = welcome_fds(arena.readonly_fd().unwrap(), arena.readonly_fd().unwrap());
    let err = region_error(connect_to(2, fds));
    assert_says(&err.to_string(), "not a batchcast board");
}

#[test]
fn an_arena_smaller_than_the_welcome_says_is_refused() {
    let arena = Arena::create("hostile", 2, SLOT).unwrap();
    let err = arena_refusal(3, arena.readonly_fd().unwrap());
    assert!(matches!(err, RegionOpenError::Malformed { .. }), "{err}");
    assert_says(&err.to_string(), "announced 3");
}

/// A mirror of `len` bytes on `device`, as a welcome names it.
fn mirror_spec(device: &str, len: u64) -> MirrorSpec {
    MirrorSpec {
        device: device.into(),
        len,
        import_info: b"memfd".to_vec(),
    }
}

/// The message of the protocol error `err` must be.
fn protocol_message(err: Error) -> String {
    match err {
        Error::Protocol(m) => m,
        other => panic!("expected a protocol error, got {other:?}"),
    }
}

#[test]
fn a_welcome_naming_a_mirror_it_sends_no_descriptor_for_is_refused() {
    let arena = Arena::create("hostile", 2, SLOT).unwrap();
    let len = arena.mapped_len() as u64;
    let fds = welcome_fds(arena.readonly_fd().unwrap(), memfd(8, b"", false));
    let err = connect_to_mirrored(2, vec![mirror_spec("GPU-a", len)], fds);
    let msg = protocol_message(err);
    assert_says(
        &msg,
        "named 1 device mirrors but carried 4 descriptors, not 5",
    );
}

#[test]
fn a_welcome_sending_a_descriptor_for_no_mirror_is_refused() {
    let arena = Arena::create("hostile", 2, SLOT).unwrap();
    let mut fds = welcome_fds(arena.readonly_fd().unwrap(), memfd(8, b"", false));
    fds.push(memfd(8, b"", false));
    let msg = protocol_message(connect_to_mirrored(2, Vec::new(), fds));
    assert_says(&msg, "carried 5 descriptors, not 4");
}

#[test]
fn a_welcome_naming_more_mirrors_than_the_bound_is_refused() {
    let arena = Arena::create("hostile", 2, SLOT).unwrap();
    let len = arena.mapped_len() as u64;
    let mirrors = (0..=MAX_MIRRORS)
        .map(|i| mirror_spec(&format!("GPU-{i}"), len))
        .collect();
    let fds = welcome_fds(arena.readonly_fd().unwrap(), memfd(8, b"", false));
    let msg = protocol_message(connect_to_mirrored(2, mirrors, fds));
    assert_says(&msg, "more than 16");
}

/// Why a consumer refuses a welcome to a real arena and one mirror, the
/// one `spec` makes of the arena's length, its descriptor included.
fn one_mirror_refusal(spec: impl FnOnce(u64) -> MirrorSpec) -> String {
    let arena = Arena::create("hostile", 2, SLOT).unwrap();
    let spec = spec(arena.mapped_len() as u64);
    let mut fds = welcome_fds(arena.readonly_fd().unwrap(), memfd(8, b"", false));
    fds.push(memfd(8, b"", false));
    protocol_message(connect_to_mirrored(2, vec![spec], fds))
}

#[test]
fn a_mirror_of_another_length_than_the_arena_is_refused() {
    let msg = one_mirror_refusal(|len| mirror_spec("GPU-a", len - SLOT as u64));
    assert_says(&msg, "byte for byte");
}

#[test]
fn a_mirror_with_an_oversized_device_id_is_refused() {
    let long = "G".repeat(batchcast::MAX_DEVICE_ID + 1);
    let msg = one_mirror_refusal(|len| mirror_spec(&long, len));
    assert_says(&msg, "an id over 96 bytes");
}
