//! The stand-in end to end, in one process and across real processes: the
//! test binary runs itself as the child, with a role in the environment
//! and the mirror's fd inherited as CHILD_FD.

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Output};

use batchcast::{DeviceMirror, MirrorSpec};
use batchcast_device::{stand_in_uuid, Access, Backend, Error, Mirror, StandIn, STAND_IN_ENV};

const ROLE: &str = "BATCHCAST_DEVICE_TEST_ROLE";
const CHILD_FD: i32 = 100;
const LEN: u64 = 3 * 4096 + 17;

/// The welcome's description of a mirror on `device`.
fn spec(device: String, import_info: &[u8], len: u64) -> MirrorSpec {
    MirrorSpec {
        device,
        len,
        import_info: import_info.to_vec(),
    }
}

fn pattern(i: u64) -> u8 {
    (i * 7 % 251) as u8
}

/// A mirror on stand-in device 1, every byte set to `pattern`, copied in
/// three pieces at different offsets.
fn filled_mirror(backend: &StandIn) -> (Mirror, OwnedFd) {
    let mut mirror = backend.mirror(&stand_in_uuid(1)).unwrap();
    let fd = mirror.allocate(LEN, 0).unwrap();
    let bytes: Vec<u8> = (0..LEN).map(pattern).collect();
    for (start, end) in [(0, 4096), (4096, 9000), (9000, LEN)] {
        mirror
            .copy_in(start, &bytes[start as usize..end as usize])
            .unwrap();
    }
    (mirror, fd)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Runs test `name` of this binary as a child in `role`, with `fd` as
/// CHILD_FD and `envs` set.
fn child(name: &str, role: &str, fd: Option<&OwnedFd>, envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role);
    cmd.env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove(STAND_IN_ENV);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    if let Some(fd) = fd {
        let raw = fd.as_raw_fd();
        // SAFETY: dup2 is async-signal-safe; it gives the child CHILD_FD
        // without close-on-exec, and touches nothing else.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(raw, CHILD_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd.output().unwrap()
}

/// [`child`], which must exit 0; its output.
fn child_succeeds(name: &str, role: &str, fd: Option<&OwnedFd>, envs: &[(&str, &str)]) -> Output {
    let out = child(name, role, fd, envs);
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// In a child: the stand-in, the inherited mirror, and its geometry.
fn child_import(access: Access) -> Option<batchcast_device::Mapping> {
    std::env::var(ROLE).ok()?;
    let backend = StandIn::new(2, None).unwrap();
    let info = unhex(&std::env::var("INFO").unwrap());
    // SAFETY: the parent passed the mirror's fd as CHILD_FD; nothing else
    // in this process owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(CHILD_FD) };
    Some(
        backend
            .import(&spec(stand_in_uuid(1), &info, LEN), fd, access)
            .unwrap(),
    )
}

fn read(addr: u64, i: u64) -> u8 {
    // SAFETY: callers pass i < LEN; the mapping covers LEN bytes.
    unsafe { std::ptr::read_volatile((addr + i) as *const u8) }
}

#[test]
fn child_reads() {
    let Some(map) = child_import(Access::ReadOnly) else {
        return;
    };
    assert_eq!(map.dl_device(), (1, 0));
    assert_eq!(map.read_only_enforced(), Some(true));
    for i in 0..LEN {
        assert_eq!(read(map.addr(), i), pattern(i), "byte {i}");
    }
}

#[test]
fn child_writes_read_only() {
    let Some(map) = child_import(Access::ReadOnly) else {
        return;
    };
    // SAFETY: a write to a PROT_READ page: the point is that it faults.
    unsafe { std::ptr::write_volatile(map.addr() as *mut u8, 1) };
    println!("the write went through");
}

#[test]
fn child_writes_read_write() {
    let Some(map) = child_import(Access::ReadWrite) else {
        return;
    };
    assert_eq!(map.read_only_enforced(), Some(false));
    // SAFETY: the mapping is private and writable, and covers byte 5000.
    unsafe { std::ptr::write_volatile((map.addr() + 5000) as *mut u8, !pattern(5000)) };
    assert_eq!(read(map.addr(), 5000), !pattern(5000));
}

#[test]
fn child_resolves() {
    if std::env::var(ROLE).is_err() {
        return;
    }
    let backend = StandIn::from_env()
        .unwrap()
        .expect("the stand-in is asked for");
    let device = batchcast_device::resolve(&stand_in_uuid(1), &backend.devices().unwrap()).unwrap();
    println!("ORDINAL={}", device.ordinal);
    std::io::stdout().flush().unwrap();
}

#[test]
fn child_opens() {
    if std::env::var(ROLE).is_err() {
        return;
    }
    match batchcast_device::open() {
        Ok(b) => println!("BACKEND={}", b.name()),
        Err(e) => println!("BACKEND_ERROR={e}"),
    }
}

fn info_env(mirror: &Mirror) -> String {
    hex(&mirror.import_info())
}

#[test]
fn another_process_reads_the_bytes_copied_in() {
    let backend = StandIn::new(2, None).unwrap();
    let (mirror, fd) = filled_mirror(&backend);
    child_succeeds(
        "child_reads",
        "read",
        Some(&fd),
        &[("INFO", &info_env(&mirror))],
    );
    let stats = mirror.stats();
    assert_eq!((stats.bytes(), stats.copies()), (LEN, 3));
}

#[test]
fn a_write_through_a_read_only_mapping_faults() {
    let backend = StandIn::new(2, None).unwrap();
    let (mirror, fd) = filled_mirror(&backend);
    let out = child(
        "child_writes_read_only",
        "write",
        Some(&fd),
        &[("INFO", &info_env(&mirror))],
    );
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{out:?}");
}

#[test]
fn a_read_write_mapping_keeps_its_writes() {
    let backend = StandIn::new(2, None).unwrap();
    let (mirror, fd) = filled_mirror(&backend);
    let info = mirror.import_info();
    let seen = backend
        .import(
            &spec(stand_in_uuid(1), &info, LEN),
            fd.try_clone().unwrap(),
            Access::ReadOnly,
        )
        .unwrap();
    child_succeeds(
        "child_writes_read_write",
        "write",
        Some(&fd),
        &[("INFO", &hex(&info))],
    );
    assert_eq!(
        read(seen.addr(), 5000),
        pattern(5000),
        "another importer saw the private write"
    );
    // The producer's copy is unchanged too: a fresh import sees the pattern.
    let again = backend
        .import(&spec(stand_in_uuid(1), &info, LEN), fd, Access::ReadOnly)
        .unwrap();
    assert_eq!(read(again.addr(), 5000), pattern(5000));
}

#[test]
fn processes_with_different_visibility_agree_on_uuids() {
    let ordinal = |cvd: Option<&str>| {
        let mut envs = vec![(STAND_IN_ENV, "2")];
        if let Some(cvd) = cvd {
            envs.push(("CUDA_VISIBLE_DEVICES", cvd));
        }
        let out = child_succeeds("child_resolves", "resolve", None, &envs);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = stdout
            .lines()
            .find_map(|l| l.split("ORDINAL=").nth(1))
            .map(str::to_string);
        line.unwrap_or_else(|| panic!("no ordinal in {stdout}"))
    };
    assert_eq!(ordinal(None), "1");
    assert_eq!(ordinal(Some("1,0")), "0");
    assert_eq!(ordinal(Some("0,1")), "1");
}

#[test]
fn open_is_the_stand_in_only_when_asked() {
    let run = |envs: &[(&str, &str)]| {
        let out = child_succeeds("child_opens", "open", None, envs);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(run(&[(STAND_IN_ENV, "2")]).contains("BACKEND=stand-in"));
    let without = run(&[]);
    assert!(!without.contains("BACKEND=stand-in"), "{without}");
    assert!(run(&[(STAND_IN_ENV, "x")]).contains("BACKEND_ERROR="));
}

#[test]
fn copies_past_the_end_are_errors() {
    let backend = StandIn::new(1, None).unwrap();
    let mut mirror = backend.mirror(&stand_in_uuid(0)).unwrap();
    assert!(mirror.copy_in(0, &[1]).is_err(), "before allocate");
    let _fd = mirror.allocate(100, 0).unwrap();
    assert!(mirror.copy_in(0, &[0; 100]).is_ok());
    let e = mirror.copy_in(1, &[0; 100]).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    assert!(mirror.copy_in(u64::MAX, &[0; 2]).is_err());
    assert!(mirror.allocate(100, 0).is_err(), "allocated twice");
    assert!(backend
        .mirror(&stand_in_uuid(0))
        .unwrap()
        .allocate(0, 0)
        .is_err());
}

#[test]
fn imports_with_the_wrong_length_or_information_are_errors() {
    let backend = StandIn::new(2, None).unwrap();
    let (mirror, fd) = filled_mirror(&backend);
    let info = mirror.import_info();
    let import = |info: &[u8], len| {
        backend.import(
            &spec(stand_in_uuid(1), info, len),
            fd.try_clone().unwrap(),
            Access::ReadOnly,
        )
    };
    assert!(matches!(
        import(&info, LEN - 1),
        Err(Error::BadImportInfo(_))
    ));
    assert!(matches!(
        import(&info, LEN + 4096),
        Err(Error::BadImportInfo(_))
    ));
    assert!(matches!(
        import(b"not import information", LEN),
        Err(Error::BadImportInfo(_))
    ));
    assert!(matches!(import(&[], LEN), Err(Error::BadImportInfo(_))));
    let wrong_device = backend.import(
        &spec(stand_in_uuid(7), &info, LEN),
        fd.try_clone().unwrap(),
        Access::ReadOnly,
    );
    let e = wrong_device.unwrap_err();
    assert!(
        matches!(e, Error::UnknownDevice { .. }) && e.to_string().contains(&stand_in_uuid(0)),
        "{e}"
    );
    let map = import(&info, LEN).unwrap();
    assert_eq!((map.len(), map.ordinal()), (LEN, 1));
    assert_eq!(read(map.addr(), LEN - 1), pattern(LEN - 1));
}

#[test]
fn the_visible_devices_are_the_ones_listed() {
    let backend = StandIn::new(3, Some("2,0")).unwrap();
    let uuids: Vec<String> = backend
        .devices()
        .unwrap()
        .into_iter()
        .map(|d| d.uuid)
        .collect();
    assert_eq!(uuids, [stand_in_uuid(2), stand_in_uuid(0)]);
    assert!(matches!(
        backend.mirror(&stand_in_uuid(1)),
        Err(Error::UnknownDevice { .. })
    ));
}

#[test]
fn several_threads_import_and_read_while_the_stats_are_read() {
    let backend = StandIn::new(2, None).unwrap();
    let (mut mirror, fd) = filled_mirror(&backend);
    let info = mirror.import_info();
    let stats = mirror.stats();
    std::thread::scope(|s| {
        for _ in 0..4 {
            let (backend, info, fd) = (&backend, &info, fd.try_clone().unwrap());
            s.spawn(move || {
                let map = backend
                    .import(&spec(stand_in_uuid(1), info, LEN), fd, Access::ReadOnly)
                    .unwrap();
                for i in (0..LEN).step_by(97) {
                    assert_eq!(read(map.addr(), i), pattern(i));
                }
            });
        }
        let reader = s.spawn(|| (0..1000).map(|_| stats.copies()).max());
        for _ in 0..100 {
            mirror.copy_in(0, &[pattern(0)]).unwrap();
        }
        assert!(reader.join().unwrap().unwrap() <= 103);
    });
    assert_eq!(
        (stats.copies(), stats.bytes(), stats.pinned()),
        (103, LEN + 100, None)
    );
}
