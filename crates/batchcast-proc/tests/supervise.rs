//! The supervisor and the sampler against real processes: trees of `sh`,
//! stopped, killed and measured.

use std::io::{BufRead, BufReader};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use batchcast_proc::{snapshot, Options, Output, Process, ProcessTree, Signal};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::process::{pidfd_open, Pid, PidfdFlags};

fn sh(script: &str) -> Command {
    let mut c = Command::new("/bin/sh");
    c.args(["-c", script]);
    c
}

/// Starts `script`, which prints a pid on its first line; returns it.
fn start_printing_pid(script: &str) -> (Process, i32) {
    let opts = Options {
        stdout: Output::Pipe,
        ..Options::default()
    };
    let mut p = Process::start(sh(script), opts).unwrap();
    let out = p.take_stdout().unwrap();
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).unwrap();
    (p, line.trim().parse().unwrap())
}

/// Waits (on its pidfd, not by polling) until `pid` has ended; whether it
/// did within `within`.
fn ends_within(pid: i32, within: Duration) -> bool {
    let Ok(fd) = pidfd_open(Pid::from_raw(pid).unwrap(), PidfdFlags::empty()) else {
        return true; // already gone
    };
    let t = Timespec {
        tv_sec: within.as_secs() as _,
        tv_nsec: 0,
    };
    poll(&mut [PollFd::new(&fd, PollFlags::IN)], Some(&t)).unwrap() == 1
}

#[test]
fn grace_then_kill_reaches_a_grandchild_that_ignores_sigterm() {
    let (mut p, grandchild) =
        start_printing_pid("trap '' TERM; sh -c 'trap \"\" TERM; sleep 1000' & echo $!; wait");
    let t0 = Instant::now();
    assert!(p.stop(Duration::from_millis(300)), "it was running");
    assert!(
        t0.elapsed() >= Duration::from_millis(300),
        "grace was given"
    );
    assert_eq!(p.outcome(), Some((None, Some(9))));
    assert!(ends_within(grandchild, Duration::from_secs(5)));
}

#[test]
fn a_process_that_obeys_sigterm_ends_within_its_grace() {
    let mut p = Process::start(sh("exec sleep 1000"), Options::default()).unwrap();
    let t0 = Instant::now();
    p.stop(Duration::from_secs(30));
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(p.outcome(), Some((None, Some(15))));
    assert!(
        !p.stop(Duration::from_secs(1)),
        "stopping it twice does nothing"
    );
}

#[test]
fn a_stopped_process_is_killed_after_the_grace() {
    let mut p = Process::start(sh("exec sleep 1000"), Options::default()).unwrap();
    p.signal(Signal::STOP);
    // Until it has stopped: a SIGTERM arriving first would end it.
    let pid = Pid::from_raw(p.pid()).unwrap();
    let flags = rustix::process::WaitIdOptions::STOPPED | rustix::process::WaitIdOptions::NOWAIT;
    rustix::process::waitid(rustix::process::WaitId::Pid(pid), flags).unwrap();
    p.stop(Duration::from_millis(200));
    assert_eq!(p.outcome(), Some((None, Some(9))));
}

#[test]
fn a_dropped_process_takes_its_group_with_it() {
    let (p, grandchild) = start_printing_pid("sleep 1000 & echo $!; wait");
    drop(p);
    assert!(ends_within(grandchild, Duration::from_secs(5)));
}

#[test]
fn leftovers_in_the_group_are_killed_when_the_leader_exits_if_asked() {
    let opts = Options {
        stdout: Output::Pipe,
        kill_group_on_exit: true,
        ..Options::default()
    };
    let mut p = Process::start(sh("sleep 1000 & echo $!"), opts).unwrap();
    let mut line = String::new();
    BufReader::new(p.take_stdout().unwrap())
        .read_line(&mut line)
        .unwrap();
    let worker: i32 = line.trim().parse().unwrap();
    assert_eq!(p.wait().ok().and_then(|s| s.code()), Some(0));
    assert!(ends_within(worker, Duration::from_secs(5)));
}

#[test]
fn the_output_tail_is_bounded_and_the_sink_sees_everything() {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let opts = Options {
        stdout: Output::Capture(Some(Box::new(move |b: &[u8]| {
            counter.fetch_add(b.len(), Ordering::SeqCst);
        }))),
        stderr: Output::Capture(None),
        tail_bytes: 1024,
        ..Options::default()
    };
    // One stream: two streams' readers may interleave in the tail.
    let script = "head -c 5000000 /dev/zero | tr '\\0' x; echo; echo last line";
    let mut p = Process::start(sh(script), opts).unwrap();
    assert_eq!(p.wait().ok().and_then(|s| s.code()), Some(0));
    assert!(p.finish_output(Duration::from_secs(10)).is_empty());
    assert_eq!(seen.load(Ordering::SeqCst), 5_000_011);
    assert_eq!(p.tail(1), "last line");
    assert!(p.tail(1000).len() <= 1024);
}

#[test]
fn output_held_by_a_process_outside_the_group_is_cut_short() {
    let opts = Options {
        stdout: Output::Capture(None),
        ..Options::default()
    };
    // setsid: a daemon that keeps stdout open after its parent exits.
    let mut p = Process::start(sh("setsid sleep 1000 & echo $!"), opts).unwrap();
    p.wait().unwrap();
    assert_eq!(p.finish_output(Duration::from_millis(200)), vec!["stdout"]);
    let daemon: i32 = p.tail(1).trim().parse().unwrap();
    let _ = rustix::process::kill_process(Pid::from_raw(daemon).unwrap(), Signal::KILL);
}

#[test]
fn the_sampler_sums_the_cpu_of_the_whole_tree() {
    let spin = "(i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done)";
    let mut p = Process::start(sh(&format!("{spin} & {spin} & wait")), Options::default()).unwrap();
    let mut tree = ProcessTree::new(p.pid());
    let mut peak = 0;
    let mut last = None;
    while !p.poll() {
        let all = snapshot();
        let s = tree.sample(&all);
        peak = peak.max(s.processes);
        // The tree's total is its members' own times (and those that ended).
        let alive: u64 = all
            .iter()
            .filter(|(pid, _)| tree.members().contains(pid))
            .map(|(_, st)| st.cpu_ticks)
            .sum();
        assert!(s.cpu_seconds + 1e-9 >= alive as f64 / batchcast_proc::ticks_per_second());
        last = Some(s);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(peak >= 3, "the leader and both subshells: {peak}");
    let usage = p.usage().unwrap();
    let sampled = last.unwrap().cpu_seconds;
    // wait4 counts every subshell the leader waited for; the sampler saw
    // most of it.
    assert!(usage.cpu_seconds > 0.0 && sampled <= usage.cpu_seconds + 0.05);
    assert!(usage.max_rss_bytes > 0);
}
