//! Server CPU time from /proc, so a system's cost per message can be
//! compared independently of the load generator sharing the machine.

use std::path::Path;

/// Which processes make up a server.
#[derive(Clone, Debug)]
pub enum CpuSource {
    /// One process (Hopper, started by this program).
    Pid(u32),
    /// Every process with this command name (`beam.smp`, `postgres`).
    Comm(&'static str),
}

/// CPU time in microseconds used so far by the source's processes.
///
/// Counts each process's own user+system time plus that of its reaped
/// children: PostgreSQL backends exit when their connection closes, and the
/// postmaster's child totals keep their time, so a backend that ends between
/// two samples is still counted (and never twice).
pub fn sample(source: &CpuSource) -> Option<u64> {
    let ticks = match source {
        CpuSource::Pid(pid) => process_ticks(&Path::new("/proc").join(pid.to_string()))?,
        CpuSource::Comm(name) => {
            let mut sum = 0;
            for entry in std::fs::read_dir("/proc").ok()?.flatten() {
                let dir = entry.path();
                let is_pid = entry
                    .file_name()
                    .to_str()
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
                if !is_pid {
                    continue;
                }
                let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
                if comm.trim_end() == *name {
                    sum += process_ticks(&dir).unwrap_or(0);
                }
            }
            sum
        }
    };
    Some(ticks * 1_000_000 / clock_ticks_per_second())
}

/// utime + stime + cutime + cstime of the process at `dir`, in clock ticks.
fn process_ticks(dir: &Path) -> Option<u64> {
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    // The command name (field 2) may contain spaces; fields resume after ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // After the name: state is index 0, so utime (field 14) is index 11.
    let get = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    Some(get(11)? + get(12)? + get(13)? + get(14)?)
}

fn clock_ticks_per_second() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .filter(|&t| t > 0)
            .unwrap_or(100)
    })
}

/// CPU used by a source between two points in a run.
pub struct CpuMeter {
    source: CpuSource,
    start: Option<u64>,
}

impl CpuMeter {
    pub fn start(source: &CpuSource) -> Self {
        CpuMeter {
            source: source.clone(),
            start: sample(source),
        }
    }

    /// Server CPU microseconds used since `start`.
    pub fn used_us(&self) -> Option<u64> {
        sample(&self.source)?.checked_sub(self.start?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_this_process() {
        let pid = std::process::id();
        assert!(sample(&CpuSource::Pid(pid)).is_some());
    }
}
