//! Bounded reads of `/proc`: every file is read into a fixed-size buffer,
//! so a strange or huge file costs at most that much.

use std::io::Read;
use std::path::Path;

/// Longest /proc file read; the ones used here are far smaller, except
/// `/proc/stat` on a machine with thousands of cores.
const MAX_READ: usize = 1 << 20;

/// The text of a /proc file, cut at [`MAX_READ`]; `None` when it cannot be
/// read (the process ended, or belongs to someone else).
pub fn read(path: impl AsRef<Path>) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    let mut buf = Vec::with_capacity(4096);
    file.take(MAX_READ as u64).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// The fields of `/proc/PID/stat` batchcast uses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stat {
    /// State: 'R' running, 'S' sleeping, 'T' stopped, 'Z' zombie, ...
    pub state: char,
    /// Parent's pid.
    pub ppid: i32,
    /// Process group.
    pub pgrp: i32,
    /// utime + stime, clock ticks.
    pub cpu_ticks: u64,
    /// cutime + cstime: children it has waited for, clock ticks.
    pub children_cpu_ticks: u64,
    /// Threads.
    pub threads: u64,
    /// Start time after boot, clock ticks.
    pub start: u64,
    /// Resident pages.
    pub rss_pages: u64,
}

/// Parses `/proc/PID/stat`. The command name may hold spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    // f[0] is field 3 (state): field N is f[N - 3].
    let num = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        pgrp: f.get(2)?.parse().ok()?,
        cpu_ticks: num(14)? + num(15)?,
        children_cpu_ticks: num(16)? + num(17)?,
        threads: num(20)?,
        start: num(22)?,
        rss_pages: num(24)?,
    })
}

/// `/proc/PID/stat` of a live process.
pub fn stat(pid: i32) -> Option<Stat> {
    parse_stat(&read(format!("/proc/{pid}/stat"))?)
}

/// Whether `pid` is a process that has not ended: it exists and is not a
/// zombie waiting for its parent.
pub fn alive(pid: i32) -> bool {
    stat(pid).is_some_and(|s| s.state != 'Z')
}

/// Start time of a live process (clock ticks after boot): with its pid,
/// it names one process for good, against pid reuse.
pub fn start_time(pid: i64) -> Option<i64> {
    let pid = i32::try_from(pid).ok()?;
    i64::try_from(stat(pid)?.start).ok()
}

/// Every pid in /proc now.
pub fn pids() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// The value of a `Key:   123 kB` line (in the unit given, kB -> bytes).
pub fn field_kb(text: &str, key: &str) -> Option<u64> {
    let line = text
        .lines()
        .find(|l| l.starts_with(key) && l[key.len()..].starts_with(':'))?;
    let mut parts = line[key.len() + 1..].split_ascii_whitespace();
    let v: u64 = parts.next()?.parse().ok()?;
    Some(if parts.next() == Some("kB") {
        v * 1024
    } else {
        v
    })
}

/// One `cpu...` line of `/proc/stat`: its name ("cpu", "cpu0", ...), busy
/// and total clock ticks (busy: all but idle and iowait).
pub fn cpu_line(line: &str) -> Option<(&str, u64, u64)> {
    let mut f = line.split_ascii_whitespace();
    let name = f.next().filter(|n| n.starts_with("cpu"))?;
    let v: Vec<u64> = f.filter_map(|x| x.parse().ok()).collect();
    if v.len() < 5 {
        return None;
    }
    let total: u64 = v.iter().take(8).sum();
    let idle = v[3] + v[4]; // idle + iowait
    Some((name, total.saturating_sub(idle), total))
}

/// The value of a `key: 123` line (as in /proc/PID/io).
pub fn field(text: &str, key: &str) -> Option<u64> {
    field_kb(text, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_spaces_and_parens_in_the_name() {
        let line = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 5 0 123456 1000000 300 18446744073709551615";
        let s = parse_stat(line).unwrap();
        assert_eq!(
            (s.state, s.ppid, s.pgrp, s.cpu_ticks, s.children_cpu_ticks),
            ('S', 1, 4242, 300, 10)
        );
        assert_eq!((s.threads, s.start, s.rss_pages), (5, 123456, 300));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1"), None);
    }

    #[test]
    fn a_zombie_and_a_reaped_child_are_not_alive() {
        assert!(alive(std::process::id() as i32));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        // Waits for its exit but leaves it unreaped: a zombie.
        use rustix::process::{waitid, Pid, WaitId, WaitIdOptions};
        waitid(
            WaitId::Pid(Pid::from_raw(pid).unwrap()),
            WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
        )
        .unwrap();
        assert!(!alive(pid), "a zombie");
        child.wait().unwrap();
        assert!(!alive(pid), "reaped");
    }

    #[test]
    fn cpu_lines() {
        let l = "cpu0 10 1 5 100 4 2 3 1 0 0";
        assert_eq!(cpu_line(l), Some(("cpu0", 22, 126)));
        assert_eq!(cpu_line("intr 1 2 3 4 5"), None);
        assert_eq!(cpu_line("cpu 1 2"), None);
    }

    #[test]
    fn kb_fields() {
        let t = "Rss:     100 kB\nPss:      40 kB\nPss_Anon: 7 kB\n";
        assert_eq!(field_kb(t, "Pss"), Some(40 * 1024));
        assert_eq!(field(t, "Nope"), None);
        assert_eq!(
            field("read_bytes: 4096\nwrite_bytes: 0\n", "read_bytes"),
            Some(4096)
        );
    }
}
