//! The process' own figures, read from `/proc` when the metrics are scraped (Linux; elsewhere the
//! gauges stay 0): resident memory, its peak (`VmHWM`) and CPU time; and the memory limit of its
//! cgroup (a container's `resources.limits.memory`), so that an alert can fire before it.

/// Memory and CPU time of a process.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// Resident set size in bytes.
    pub rss_bytes: u64,
    /// Peak resident set size in bytes since the process started.
    pub peak_rss_bytes: u64,
    /// User plus system CPU time in seconds.
    pub cpu_seconds: f64,
}

/// Clock ticks per second of `/proc/<pid>/stat`'s times: `USER_HZ`, which Linux fixes at 100 for
/// user space on every architecture it supports.
const USER_HZ: f64 = 100.0;

/// This process' figures (`None` without `/proc`).
pub fn own() -> Option<Sample> {
    of("self")
}

/// The figures of process `pid` (`"self"` for this one), `None` when `/proc` does not have it.
pub fn of(pid: &str) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(parse(&status, &stat))
}

/// The memory limit of this process' cgroup in bytes: cgroup v2's `memory.max` (in a container,
/// `/sys/fs/cgroup` is its own cgroup), else cgroup v1's `memory.limit_in_bytes`; `None` without a
/// limit.
pub fn memory_limit() -> Option<u64> {
    [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|path| std::fs::read_to_string(path).ok())
    .and_then(|text| parse_limit(&text))
}

/// A cgroup memory limit: `max` (v2) and v1's "no limit" (a page-rounded `i64::MAX`) are none.
fn parse_limit(text: &str) -> Option<u64> {
    let text = text.trim();
    if text == "max" {
        return None;
    }
    text.parse::<u64>().ok().filter(|&v| v > 0 && v < 1 << 60)
}

fn parse(status: &str, stat: &str) -> Sample {
    let kib = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |k| k * 1024)
    };
    // Fields after the command name (which may hold spaces, inside parentheses): state is field
    // 3, utime 14 and stime 15.
    let cpu_seconds = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect::<Vec<_>>())
        .and_then(|fields| {
            let utime: u64 = fields.get(11)?.parse().ok()?;
            let stime: u64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) as f64 / USER_HZ)
        })
        .unwrap_or(0.0);
    Sample {
        rss_bytes: kib("VmRSS:"),
        peak_rss_bytes: kib("VmHWM:"),
        cpu_seconds,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn status_and_stat_are_parsed() {
        let status = "Name:\tcapi-lb\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\n";
        let stat = "4242 (capi lb) S 1 4242 4242 0 -1 4194560 1 0 0 0 250 50 0 0 20 0 8 0";
        let s = parse(status, stat);
        assert_eq!(s.rss_bytes, 40960 * 1024);
        assert_eq!(s.peak_rss_bytes, 51200 * 1024);
        assert!((s.cpu_seconds - 3.0).abs() < 1e-9, "{}", s.cpu_seconds);
    }

    #[test]
    fn cgroup_limits_are_parsed() {
        assert_eq!(parse_limit("268435456\n"), Some(268_435_456));
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit("garbage"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_figures() {
        let s = own().unwrap();
        assert!(s.rss_bytes > 0 && s.peak_rss_bytes >= s.rss_bytes);
    }
}
