//! The control plane against hostile, broken or foreign peers, and the
//! files of killed producers: real `batchcast` processes, attacked from this
//! test process (issue 10, faults 5 and 8, and the stale-file finding).

mod common;

use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{assert_full_epoch, jpeg_dataset, Env, Proc};
use rustix::event::{PollFd, PollFlags, Timespec};

/// CPU seconds (user + system) the process has used, from /proc.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which ends with the last ')'.
    let rest: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: u64 = rest[11].parse::<u64>().unwrap() + rest[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / hz
}

/// A `VmXXX:` figure of the process, in KiB.
fn vm_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A synthetic producer that runs until killed, with an optional open-file
/// limit.
fn long_producer(env: &Env, name: &str, nofile: Option<u64>) -> Proc {
    let args = [
        "serve",
        "--name",
        name,
        "--synthetic",
        "--json",
        "--samples",
        "200",
        "--batch-size",
        "10",
        "--epochs",
        "1000000",
        "--window",
        "4",
    ];
    let mut p = Proc::start(limited(env.cmd(&args), nofile));
    p.expect("listening");
    p
}

/// `cmd` with an open-file limit (soft and hard) of `nofile`.
fn limited(mut cmd: std::process::Command, nofile: Option<u64>) -> std::process::Command {
    if let Some(n) = nofile {
        // SAFETY: setrlimit is async-signal-safe and touches no memory of
        // the parent; the closure allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: n,
                    rlim_max: n,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd
}

/// Keeps opening silent connections to `sock` (about one a millisecond,
/// holding the newest 1,500) until `stop` is set; a full backlog skips one.
/// Opens connections that never say hello until `stop`, at about one a
/// millisecond, holding the newest 1,500; counts them in `opened`.
fn flood(
    sock: &Path,
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<()> {
    let addr = rustix::net::SocketAddrUnix::new(sock).unwrap();
    std::thread::spawn(move || {
        let mut held: std::collections::VecDeque<OwnedFd> = Default::default();
        while !stop.load(Ordering::Relaxed) {
            let fd = rustix::net::socket_with(
                rustix::net::AddressFamily::UNIX,
                rustix::net::SocketType::STREAM,
                rustix::net::SocketFlags::NONBLOCK | rustix::net::SocketFlags::CLOEXEC,
                None,
            )
            .unwrap();
            if rustix::net::connect(&fd, &addr).is_ok() {
                opened.fetch_add(1, Ordering::Relaxed);
                held.push_back(fd);
                if held.len() > 1500 {
                    held.pop_front();
                }
            }
            std::thread::sleep(Duration::from_millis(1)); // the attack's pace
        }
    })
}

/// Runs one real consumer for one epoch; returns the time its welcome took.
fn serve_one_consumer(env: &Env, name: &str) -> Duration {
    let t0 = Instant::now();
    let mut c = env.spawn(&["consume", name, "--verify", "--epochs", "1"]);
    c.expect("connected");
    let welcome = t0.elapsed();
    assert!(c.finish().success(), "{}", c.stderr_text());
    let ends = c.events("epoch_end");
    assert_eq!(ends.len(), 1);
    assert_full_epoch(&ends[0], 0, 199);
    welcome
}

/// Fault 5: 1,500 connections that never say hello, against a producer
/// limited to 1,024 descriptors. Before: the control thread spun on EMFILE
/// at 100% of a core and a real consumer waited 4-5 s for its welcome. Now
/// the oldest silent connections are closed beyond 64, the producer idles,
/// and the consumer is welcomed at once.
#[test]
fn fault5_silent_connections_at_fd_limit() {
    let env = Env::new();
    let producer = long_producer(&env, "flood", Some(1024));
    let sock = env.path().join("flood.sock");
    let cpu0 = cpu_secs(producer.pid());
    let t0 = Instant::now();
    let silent: Vec<UnixStream> = (0..1500)
        .map(|_| UnixStream::connect(&sock).expect("connect"))
        .collect();
    // Measure the producer's CPU while the attack holds.
    std::thread::sleep(Duration::from_secs(2));
    let cpu = (cpu_secs(producer.pid()) - cpu0) / t0.elapsed().as_secs_f64();
    let welcome = serve_one_consumer(&env, "flood");
    eprintln!(
        "1500 silent connections at nofile=1024: producer CPU {:.1}% of a core, welcome in {:.0} ms",
        cpu * 100.0,
        welcome.as_secs_f64() * 1e3
    );
    assert!(
        cpu < 0.25,
        "the control thread spins: {:.0}% of a core",
        cpu * 100.0
    );
    assert!(welcome < Duration::from_secs(1), "welcome took {welcome:?}");
    drop(silent);
}

/// Fault 5: a loader that opens files keeps working while silent
/// connections keep arriving at a 1,024-descriptor limit. Before: the
/// connections took every descriptor, so whatever the producer opened next
/// (the loader's images, the consumer's ledger) failed with EMFILE and the
/// consumer was dropped. Now at most 64 wait for a hello and a quarter of
/// the limit stays free.
#[test]
fn fault5_loader_keeps_its_descriptors_under_a_flood() {
    let env = Env::new();
    let data = jpeg_dataset(&env.path().join("data"), 3, 7, (64, 96));
    let args = [
        "serve",
        "--name",
        "img",
        "--data",
        data.to_str().unwrap(),
        "--batch-size",
        "4",
        "--epochs",
        "20",
        "--image-size",
        "16",
        "--consumers",
        "1",
        "--json",
        "--workers",
        "2",
    ];
    let mut producer = Proc::start(limited(env.cmd(&args), Some(1024)));
    producer.expect("listening");
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicUsize::new(0));
    let flooder = flood(
        &env.path().join("img.sock"),
        Arc::clone(&stop),
        Arc::clone(&opened),
    );
    // The loader starts once the flood is past the descriptor limit.
    let deadline = Instant::now() + Duration::from_secs(60);
    while opened.load(Ordering::Relaxed) <= 1500 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        opened.load(Ordering::Relaxed) > 1500,
        "the flood did not pass 1,500 connections within 60 s"
    );
    let mut c = env.spawn(&["consume", "img", "--verify"]);
    let ok = c.finish().success();
    stop.store(true, Ordering::Relaxed);
    flooder.join().unwrap();
    let opened = opened.load(Ordering::Relaxed);
    if !ok {
        producer.kill9();
        panic!(
            "consumer failed: {:?}; producer's stderr: {}",
            c.seen,
            producer.stderr_text()
        );
    }
    let ends = c.events("epoch_end");
    assert_eq!(ends.len(), 20, "{ends:?}");
    for end in &ends {
        assert_eq!(end["samples"], 21, "{end}");
    }
    assert!(producer.finish().success(), "{}", producer.stderr_text());
    assert!(opened > 1500, "the flood opened only {opened} connections");
}

/// Fault 5: 300 connections that each announce an almost-1 MiB hello and
/// send most of it. Before: the producer buffered every byte (+320 MiB).
/// Now a frame before the hello is at most 4 KiB, refused from its length
/// prefix, so the producer's peak memory barely moves.
#[test]
fn fault5_large_partial_handshakes() {
    let env = Env::new();
    let producer = long_producer(&env, "big", None);
    let sock = env.path().join("big.sock");
    let rss0 = vm_kib(producer.pid(), "VmRSS:");
    let announced: u32 = (1 << 20) - 1;
    let body = vec![0u8; announced as usize - 4096];
    let mut conns: Vec<(UnixStream, usize)> = (0..300)
        .map(|_| {
            let s = UnixStream::connect(&sock).unwrap();
            (&s).write_all(&announced.to_le_bytes()).unwrap();
            s.set_nonblocking(true).unwrap();
            (s, 0)
        })
        .collect();
    // Push every body until it is all sent or the producer closed the
    // connection, waiting on POLLOUT (the producer reading) in between.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !conns.is_empty() && Instant::now() < deadline {
        conns.retain_mut(|(s, sent)| match (&*s).write(&body[*sent..]) {
            Ok(n) => {
                *sent += n;
                *sent < body.len()
            }
            Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
        });
        let mut fds: Vec<PollFd<'_>> = conns
            .iter()
            .map(|(s, _)| PollFd::new(s, PollFlags::OUT))
            .collect();
        let _ = rustix::event::poll(
            &mut fds,
            Some(&Timespec {
                tv_sec: 0,
                tv_nsec: 100_000_000,
            }),
        );
    }
    let grown_mib = vm_kib(producer.pid(), "VmHWM:").saturating_sub(rss0) as f64 / 1024.0;
    serve_one_consumer(&env, "big");
    eprintln!("300 partial ~1 MiB handshakes: producer peak RSS grew {grown_mib:.1} MiB");
    assert!(grown_mib < 32.0, "producer grew {grown_mib:.1} MiB");
    drop(conns);
}

/// The files of killed producers are removed by the next process that
/// finds them dead: `status` lists none of them and leaves no file, and a
/// consumer connecting to a dead name gets ProducerNotFound and removes its
/// files.
#[test]
fn killed_producers_leave_no_files_behind() {
    let env = Env::new();
    for name in ["dead1", "dead2", "dead3"] {
        let mut p = long_producer(&env, name, None);
        p.kill9();
    }
    assert_eq!(env.leftovers().len(), 6, "{:?}", env.leftovers());
    let out = env.cmd(&["status"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(!stdout.contains("dead"), "{stdout}");
    assert!(stdout.contains("no producer is running"), "{stdout}");
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());

    let mut p = long_producer(&env, "dead4", None);
    p.kill9();
    let mut c = env.spawn(&["consume", "dead4"]);
    assert_eq!(c.finish().code(), Some(2));
    assert_eq!(c.events("error")[0]["kind"], "not_found");
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
}

/// A live producer's files are never touched by a status query or a
/// consumer of another name.
#[test]
fn a_live_producer_keeps_its_files() {
    let env = Env::new();
    let live = long_producer(&env, "alive", None);
    let out = env.cmd(&["status"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("alive (pid"));
    let mut c = env.spawn(&["consume", "other"]);
    assert_eq!(c.finish().code(), Some(2));
    assert!(env.path().join("alive.sock").exists());
    assert!(env.path().join("alive.lock").exists());
    serve_one_consumer(&env, "alive");
    drop(live);
}

/// Fault 8: a consumer of another uid got IoError (EACCES); it gets
/// PermissionDenied with a message saying the producer runs as another user.
#[test]
fn fault8_another_uid_gets_permission_denied() {
    // SAFETY: getuid has no memory effects.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("skipped: switching to another uid needs root");
        return;
    }
    if std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: setpriv (util-linux) is not installed");
        return;
    }
    let env = Env::new();
    let _producer = long_producer(&env, "mine", None);
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_batchcast"))
        .args(["consume", "mine"])
        .env("BATCHCAST_DIR", env.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stdout}{stderr}");
    assert!(stdout.contains("\"permission_denied\""), "{stdout}");
    assert!(stderr.contains("permission denied"), "{stderr}");
    assert!(stderr.contains("runs as another user"), "{stderr}");
    assert!(env.path().join("mine.sock").exists());
}
