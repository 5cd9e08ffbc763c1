//! What the report says about the machine and the software under test.

use std::path::Path;
use std::process::Command;

/// Output of a command, trimmed; `None` if it fails or prints nothing.
fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn cpu_model() -> String {
    read("/proc/cpuinfo")
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

fn memory_gib() -> Option<f64> {
    let meminfo = read("/proc/meminfo")?;
    let kib: f64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kib / (1024.0 * 1024.0))
}

/// Filesystem type and device holding `path` (longest matching mount).
pub fn filesystem(path: &Path) -> Option<String> {
    let path = path.canonicalize().ok()?;
    let mounts = read("/proc/self/mounts")?;
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (device, mount, fstype) = (f.next()?, f.next()?, f.next()?);
            path.starts_with(mount)
                .then(|| (mount.len(), format!("{fstype} on {device}")))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, fs)| fs)
}

pub fn machine_lines(data_dirs: &[(&str, &Path)]) -> Vec<String> {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let mut lines = vec![
        format!("CPU: {} ({cores} cores available)", cpu_model()),
        format!(
            "RAM: {}",
            memory_gib()
                .map(|g| format!("{g:.0} GiB"))
                .unwrap_or_else(|| "unknown".into())
        ),
        format!(
            "Kernel: Linux {}",
            read("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_default()
        ),
    ];
    for (what, dir) in data_dirs {
        if let Some(fs) = filesystem(dir) {
            lines.push(format!("{what} data: {} ({fs})", dir.display()));
        }
    }
    if let Some(rustc) = output("rustc", &["--version"]) {
        lines.push(format!("Load generator built with {rustc}"));
    }
    lines
}

/// Version of an installed Debian package.
pub fn debian_version(package: &str) -> Option<String> {
    output("dpkg-query", &["-W", "-f", "${Version}", package])
}

/// Installed Debian packages matching a pattern, as `name version` lines.
pub fn debian_packages(pattern: &str) -> Vec<String> {
    output("dpkg-query", &["-W", "-f", "${Package} ${Version}\\n", pattern])
        .map(|s| {
            s.lines()
                .filter(|l| l.split_whitespace().nth(1).is_some())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// `git describe` of the repository at `root`.
pub fn git_describe(root: &Path) -> Option<String> {
    let root = root.to_str()?;
    output("git", &["-C", root, "describe", "--always", "--dirty", "--tags"])
}

/// Today's date and time in UTC, e.g. `2026-11-22 14:05 UTC`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

/// Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_414), (2025, 11, 22));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
