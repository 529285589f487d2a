//! The machine listener: CPU per core and in total, memory, disk and
//! network throughput, from /proc.

use std::collections::HashMap;
use std::time::Instant;

use crate::keys;
use batchcast_proc::procfs;

/// At most this many disks and network interfaces are recorded (a machine
/// with thousands of virtual interfaces must not flood the store).
const MAX_DEVICES: usize = 32;

#[derive(Default)]
pub(crate) struct Machine {
    /// cpu name ("cpu", "cpu0", ...) -> (busy, total) jiffies.
    cpu: HashMap<String, (u64, u64)>,
    /// "disk/sda/read" etc. -> bytes.
    counters: HashMap<String, u64>,
    when: Option<Instant>,
}

impl Machine {
    pub(crate) fn sample(&mut self, out: &mut Vec<(String, f64)>) {
        let now = Instant::now();
        let dt = self
            .when
            .map(|t| now.duration_since(t).as_secs_f64())
            .filter(|d| *d > 0.0);
        if let Some(stat) = procfs::read("/proc/stat") {
            for line in stat.lines().filter(|l| l.starts_with("cpu")).take(4096) {
                let Some((name, busy, total)) = procfs::cpu_line(line) else {
                    continue;
                };
                if let Some((b0, t0)) = self.cpu.insert(name.to_string(), (busy, total)) {
                    let dtot = total.saturating_sub(t0);
                    if dtot > 0 {
                        let pct = 100.0 * busy.saturating_sub(b0) as f64 / dtot as f64;
                        let key = if name == "cpu" {
                            keys::SYS_CPU_PERCENT.to_string()
                        } else {
                            format!("sys/cpu/{}_percent", &name[3..])
                        };
                        out.push((key, pct));
                    }
                }
            }
        }
        if let Some(mem) = procfs::read("/proc/meminfo") {
            if let (Some(total), Some(avail)) = (
                procfs::field_kb(&mem, "MemTotal"),
                procfs::field_kb(&mem, "MemAvailable"),
            ) {
                out.push((
                    keys::SYS_MEM_USED_BYTES.into(),
                    total.saturating_sub(avail) as f64,
                ));
            }
        }
        let mut counters = Vec::new();
        if let Some(disk) = procfs::read("/proc/diskstats") {
            for line in disk.lines() {
                let f: Vec<&str> = line.split_ascii_whitespace().collect();
                // Whole disks only: those listed in /sys/block (not partitions, loops, rams).
                let Some(name) = f.get(2) else { continue };
                if name.starts_with("loop")
                    || name.starts_with("ram")
                    || !std::path::Path::new("/sys/block").join(name).exists()
                {
                    continue;
                }
                let sectors =
                    |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0) * 512;
                counters.push((format!("sys/disk/{name}/read_bytes_per_s"), sectors(5)));
                counters.push((format!("sys/disk/{name}/write_bytes_per_s"), sectors(9)));
            }
        }
        if let Some(net) = procfs::read("/proc/net/dev") {
            for line in net.lines().skip(2) {
                let Some((name, rest)) = line.split_once(':') else {
                    continue;
                };
                let name = name.trim();
                if name == "lo" {
                    continue;
                }
                let f: Vec<u64> = rest
                    .split_ascii_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                if f.len() >= 9 {
                    counters.push((format!("sys/net/{name}/rx_bytes_per_s"), f[0]));
                    counters.push((format!("sys/net/{name}/tx_bytes_per_s"), f[8]));
                }
            }
        }
        for (key, value) in counters.into_iter().take(4 * MAX_DEVICES) {
            if let (Some(dt), Some(prev)) = (dt, self.counters.get(&key)) {
                out.push((key.clone(), value.saturating_sub(*prev) as f64 / dt));
            }
            self.counters.insert(key, value);
        }
        self.when = Some(now);
    }
}
