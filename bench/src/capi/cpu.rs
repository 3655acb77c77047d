//! CPU time of the control plane's processes, from `/proc/<pid>/stat` (user + system), found
//! through the harness's pid files (`<state>/<component>.pid`, holding "PID START", START being
//! the process's start time, field 22 of its stat: a pid whose start differs is another process).

use std::collections::BTreeMap;
use std::path::Path;

/// The harness's components whose CPU the benchmark reports.
pub const COMPONENTS: &[&str] = &[
    "kube-apiserver",
    "etcd",
    "cluster-api-manager",
    "kube-controller-manager",
];

/// The fields after the command (field 2, in parentheses, which may hold spaces) of a stat line:
/// `fields[0]` is field 3 (state).
fn fields_after_command(stat: &str) -> Option<Vec<&str>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().collect())
}

/// (utime + stime in clock ticks, start time) of a stat line.
pub(crate) fn ticks_and_start(stat: &str) -> Option<(u64, u64)> {
    let f = fields_after_command(stat)?;
    // Fields 14 and 15 (utime, stime) and 22 (starttime); fields[0] is field 3.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    let start: u64 = f.get(19)?.parse().ok()?;
    Some((utime + stime, start))
}

/// Clock ticks per second (`getconf CLK_TCK`; 100, Linux's value, if that fails).
pub fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// CPU seconds so far of each component in `COMPONENTS` whose pid file in `state` names a live
/// process (others are left out).
pub fn sample(state: &Path, ticks_per_second: f64) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for name in COMPONENTS {
        let Ok(pidfile) = std::fs::read_to_string(state.join(format!("{name}.pid"))) else {
            continue;
        };
        let mut words = pidfile.split_whitespace();
        let (Some(pid), start) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((ticks, started)) = ticks_and_start(&stat) else {
            continue;
        };
        if start.is_some_and(|s| s.parse::<u64>().ok() != Some(started)) {
            continue;
        }
        out.insert((*name).to_string(), ticks as f64 / ticks_per_second);
    }
    out
}

/// What each component used between two samples.
pub fn since(
    after: &BTreeMap<String, f64>,
    before: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .filter_map(|(k, v)| before.get(k).map(|b| (k.clone(), v - b)))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_cpu_ticks_and_start() {
        let stat = "1234 (kube apiserver) S 1 1234 1234 0 -1 4194560 100 0 0 0 \
                    250 50 0 0 20 0 12 0 5469641 100000 200 18446744073709551615";
        assert_eq!(ticks_and_start(stat), Some((300, 5469641)));
        assert_eq!(ticks_and_start("garbage"), None);
    }

    #[test]
    fn our_own_process_is_read() {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(ticks_and_start(&stat).is_some());
    }

    #[test]
    fn differences_keep_only_what_both_samples_have() {
        let before = BTreeMap::from([("etcd".to_string(), 1.0), ("gone".to_string(), 3.0)]);
        let after = BTreeMap::from([("etcd".to_string(), 4.5), ("new".to_string(), 1.0)]);
        assert_eq!(
            since(&after, &before),
            BTreeMap::from([("etcd".to_string(), 3.5)])
        );
    }
}
