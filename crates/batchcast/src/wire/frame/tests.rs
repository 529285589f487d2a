//! Framing and message round trips.

use super::super::*;
use super::*;
use std::io::Write;
use std::os::unix::net::UnixStream;

fn sample_start() -> ToConsumer {
    ToConsumer::EpochStart(EpochStart {
        epoch: 1,
        samples: Some(100),
        batch_size: 8,
        partial: false,
        first_seq: 7,
        first_row: 0,
    })
}

#[test]
fn frames_round_trip_across_split_reads() {
    let (a, b) = UnixStream::pair().unwrap();
    let msgs = vec![
        sample_start(),
        ToConsumer::EpochEnd {
            epoch: 1,
            samples: 100,
            end_seq: 20,
        },
        ToConsumer::Boundary(Boundary {
            next_samples: Some(150),
            trigger: Some(TriggerFired {
                id: "amount=40".into(),
                seq: 1,
                epoch: 2,
                samples: 50,
                arrivals: Some((1.5e9, 1.6e9)),
            }),
        }),
        ToConsumer::Shutdown(ShutdownReason::Failed("disk".into())),
    ];
    let mut bytes = Vec::new();
    for m in &msgs {
        bytes.extend(encode(m).unwrap());
    }
    // Deliver one byte at a time: frames must reassemble.
    let mut r = FrameReader::new();
    let mut got = Vec::new();
    for byte in bytes {
        (&a).write_all(&[byte]).unwrap();
        assert_eq!(r.fill(&b, true, None).unwrap(), Fill::Data);
        while let Some(m) = r.next_frame::<ToConsumer>().unwrap() {
            got.push(m);
        }
    }
    assert_eq!(got, msgs);
    drop(a);
    assert_eq!(r.fill(&b, true, None).unwrap(), Fill::Eof);
}

#[test]
fn oversized_frame_is_refused_before_reading_it() {
    let (a, b) = UnixStream::pair().unwrap();
    (&a).write_all(&u32::MAX.to_le_bytes()).unwrap();
    let mut r = FrameReader::new();
    // The read that brings the prefix already refuses it.
    let err = r.fill(&b, true, None).unwrap_err().to_string();
    assert!(err.contains("exceeds"), "{err}");
    let err = r.next_frame::<ToProducer>().unwrap_err().to_string();
    assert!(err.contains("exceeds"), "{err}");
}

#[test]
fn a_long_prefix_is_refused_before_its_body_is_buffered() {
    let (a, b) = UnixStream::pair().unwrap();
    let mut partial = ((MAX_FRAME - 1) as u32).to_le_bytes().to_vec();
    partial.extend(vec![0u8; 100_000]);
    (&a).write_all(&partial[..8192]).unwrap();
    let mut r = FrameReader::with_limit(MAX_REQUEST_FRAME);
    let err = r.fill(&b, true, None).unwrap_err().to_string();
    assert!(err.contains("4096-byte limit"), "{err}");
    assert!(
        r.buf.capacity() <= 4 + MAX_REQUEST_FRAME,
        "{}",
        r.buf.capacity()
    );
}

#[test]
fn the_buffer_compacts_and_stays_bounded() {
    let (a, b) = UnixStream::pair().unwrap();
    let big = encode(&ToConsumer::Refused("x".repeat(300_000))).unwrap();
    let small = encode(&sample_start()).unwrap();
    let mut r = FrameReader::new();
    for round in 0..20 {
        let writer = {
            let a = a.try_clone().unwrap();
            let frames = [small.clone(), big.clone(), small.clone()].concat();
            std::thread::spawn(move || (&a).write_all(&frames).unwrap())
        };
        let mut got = 0;
        while got < 3 {
            match r.next_frame::<ToConsumer>().unwrap() {
                Some(_) => got += 1,
                None => {
                    r.fill(&b, true, None).unwrap();
                }
            }
            assert!(
                r.buf.len() <= 4 + MAX_FRAME,
                "round {round}: {}",
                r.buf.len()
            );
        }
        writer.join().unwrap();
    }
    // Nothing pending: the next read starts from an empty, small buffer.
    assert_eq!(r.pending(), 0);
    r.compact();
    assert!(r.buf.capacity() <= 2 * READ_CHUNK, "{}", r.buf.capacity());
}

#[test]
fn received_fds_are_close_on_exec() {
    let (a, b) = UnixStream::pair().unwrap();
    let f = tempfile::tempfile().unwrap();
    // Sent without close-on-exec, as another process could.
    rustix::io::fcntl_setfd(&f, rustix::io::FdFlags::empty()).unwrap();
    let frame = encode(&ToConsumer::Refused("x".into())).unwrap();
    send_frame_with_fds(&a, &frame, &[f.as_fd()]).unwrap();
    let mut r = FrameReader::new();
    let mut fds = Vec::new();
    r.fill(&b, true, Some(&mut fds)).unwrap();
    let flags = rustix::io::fcntl_getfd(&fds[0]).unwrap();
    assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
}

#[test]
fn garbage_is_a_protocol_error_not_a_panic() {
    let (a, b) = UnixStream::pair().unwrap();
    let mut frame = 16u32.to_le_bytes().to_vec();
    frame.extend([0xff; 16]);
    (&a).write_all(&frame).unwrap();
    let mut r = FrameReader::new();
    r.fill(&b, true, None).unwrap();
    assert!(matches!(
        r.next_frame::<ToProducer>(),
        Err(Error::Protocol(_))
    ));
}

#[test]
fn nonblocking_fill_reports_would_block() {
    let (_a, b) = UnixStream::pair().unwrap();
    let mut r = FrameReader::new();
    assert_eq!(r.fill(&b, false, None).unwrap(), Fill::WouldBlock);
}

#[test]
fn fds_travel_with_the_frame() {
    let (a, b) = UnixStream::pair().unwrap();
    let (f1, f2) = (tempfile::tempfile().unwrap(), tempfile::tempfile().unwrap());
    let frame = encode(&ToConsumer::Refused("x".into())).unwrap();
    send_frame_with_fds(&a, &frame, &[f1.as_fd(), f2.as_fd()]).unwrap();
    let mut r = FrameReader::new();
    let mut fds = Vec::new();
    r.fill(&b, true, Some(&mut fds)).unwrap();
    assert_eq!(fds.len(), 2);
    assert_eq!(
        r.next_frame::<ToConsumer>().unwrap(),
        Some(ToConsumer::Refused("x".into()))
    );
}

#[test]
fn a_welcome_with_every_mirror_carries_all_its_fds_and_no_more() {
    let (a, b) = UnixStream::pair().unwrap();
    let files: Vec<_> = (0..MAX_FDS)
        .map(|_| tempfile::tempfile().unwrap())
        .collect();
    let fds: Vec<_> = files.iter().map(|f| f.as_fd()).collect();
    assert_eq!(MAX_FDS, 4 + crate::MAX_MIRRORS);
    let frame = encode(&ToConsumer::Refused("x".into())).unwrap();
    send_frame_with_fds(&a, &frame, &fds).unwrap();
    let mut r = FrameReader::new();
    let mut got = Vec::new();
    r.fill(&b, true, Some(&mut got)).unwrap();
    assert_eq!(got.len(), MAX_FDS);
    // One more than a frame carries is refused before anything is sent.
    let extra = tempfile::tempfile().unwrap();
    let mut over = fds.clone();
    over.push(extra.as_fd());
    let err = send_frame_with_fds(&a, &frame, &over).unwrap_err();
    assert!(matches!(err, Error::Protocol(_)), "{err}");
}

#[test]
fn join_policies_parse_and_name() {
    for p in [JoinPolicy::CatchUp, JoinPolicy::NextEpoch, JoinPolicy::Now] {
        assert_eq!(JoinPolicy::parse(p.name()).unwrap(), p);
    }
    assert!(JoinPolicy::parse("later").is_err());
}
