//! Jobs left running by a runner that died (SIGKILL, the OOM killer, a
//! lost machine session) before it could stop them. Their runs are still
//! RUNNING in the store with the job's pid and start time; before the next
//! runner marks them KILLED and starts their rows again, it stops each such
//! job that is still running (the same pid *and* start time: a process that
//! merely reused the pid is left alone), or refuses to go on, naming it.

use std::time::{Duration, Instant};

use rustix::process::{kill_process, kill_process_group, Pid, Signal};

use super::{process_start, RunError};
use crate::{Orphan, Store};

/// How long a stopped orphan may take to go after SIGKILL.
const GONE_WITHIN: Duration = Duration::from_secs(5);

/// Whether the process `pid` that started at `start` is still running (a
/// zombie is not).
fn running(pid: i64, start: i64) -> bool {
    let Some(s) = i32::try_from(pid)
        .ok()
        .and_then(batchcast_proc::procfs::stat)
    else {
        return false;
    };
    i64::try_from(s.start).ok() == Some(start) && s.state != 'Z'
}

fn signal(pid: i64, sig: Signal) -> rustix::io::Result<()> {
    let p = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or(rustix::io::Errno::SRCH)?;
    // The job leads its own group (its workers are in it); a job that left
    // it (setsid) is still reached as itself.
    kill_process_group(p, sig).or_else(|_| kill_process(p, sig))
}

/// Stops every job that a dead runner of `host` left running, SIGTERM
/// then SIGKILL after `grace`, and notes it in each run's events. Returns
/// a line per job stopped, for the user; an error naming the job when one
/// cannot be stopped (then nothing is started beside it).
pub(crate) fn stop_orphans(
    store: &Store,
    host: &str,
    grace: Duration,
) -> Result<Vec<String>, RunError> {
    let orphans = store.orphans(host, |pid, start| process_start(pid) == Some(start))?;
    let live: Vec<(Orphan, i64, i64)> = orphans
        .into_iter()
        .filter_map(|o| {
            let (pid, start) = (o.pid?, o.pid_start?);
            running(pid, start).then_some((o, pid, start))
        })
        .collect();
    let describe = |o: &Orphan, pid: i64| {
        format!(
            "run {} ({}, pid {pid}), left running by runner pid {} that died",
            o.run,
            o.name,
            o.runner_pid.map_or("?".to_string(), |p| p.to_string())
        )
    };
    for (o, pid, _) in &live {
        if let Err(e) = signal(*pid, Signal::TERM) {
            return Err(RunError::OrphanUnstoppable {
                orphan: describe(o, *pid),
                pid: *pid,
                error: e.into(),
            });
        }
    }
    let deadline = Instant::now() + grace;
    while live.iter().any(|(_, p, s)| running(*p, *s)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for (_, pid, start) in &live {
        if running(*pid, *start) {
            let _ = signal(*pid, Signal::KILL);
        }
    }
    let deadline = Instant::now() + GONE_WITHIN;
    while live.iter().any(|(_, p, s)| running(*p, *s)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut lines = Vec::new();
    for (o, pid, start) in &live {
        if running(*pid, *start) {
            return Err(RunError::OrphanSurvived {
                orphan: describe(o, *pid),
                pid: *pid,
            });
        }
        let line = format!("stopped {}", describe(o, *pid));
        let _ = store.add_event(o.run, "runner", &line);
        lines.push(line);
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_orphan_that_will_not_stop_is_named_with_the_command_that_stops_it() {
        let orphan = "run 3 (a, pid 77), left running by runner pid 9 that died".to_string();
        let e = RunError::OrphanUnstoppable {
            orphan: orphan.clone(),
            pid: 77,
            error: rustix::io::Errno::PERM.into(),
        };
        assert_eq!(
            e.to_string(),
            format!(
                "{orphan} cannot be stopped ({}); stop it yourself (`kill -- -77`) and run \
                 again, or a second copy of it would run beside it",
                std::io::Error::from(rustix::io::Errno::PERM)
            )
        );
        // The reason is in the message only: `{:#}` of the chain says it once.
        assert!(std::error::Error::source(&e).is_none());
        let e = RunError::OrphanSurvived { orphan, pid: 77 };
        assert!(
            e.to_string().ends_with(
                "did not end after SIGKILL; stop it yourself (`kill -KILL -- -77`) and run \
                 again, or a second copy of it would run beside it"
            ),
            "{e}"
        );
    }
}
