//! A Machine's host going away: once a deleted Machine's API server stopped (or, in a failover,
//! when it is killed), its address drops every packet, as the address of a deleted or crashed VM
//! does, instead of refusing connections as a host whose server process stopped does. On a live
//! host a client's connection to a stopped server is refused at once and it tries the name's next
//! address; on a vanished one it waits for its connect timeout. An nftables table of the run's own
//! (an `output` hook, a set of addresses, removed at the end) does it.

use std::io::Write;
use std::net::IpAddr;
use std::process::{Command, Stdio};

use crate::launch::BenchError;

/// The run's nftables table of vanished hosts.
#[derive(Debug)]
pub struct BlackHole {
    table: String,
}

impl BlackHole {
    /// Create the table `capi-lb-bench-<tag>` (tag: the run's namespace), with an empty set.
    pub fn create(tag: &str) -> Result<Self, BenchError> {
        let table = format!("capi-lb-bench-{tag}");
        nft(&format!(
            "table inet {table} {{\n  set gone {{ type ipv4_addr; }}\n  chain output {{\n    \
             type filter hook output priority 0; policy accept;\n    ip daddr @gone drop\n  }}\n}}\n"
        ))?;
        Ok(BlackHole { table })
    }

    /// From now on, `address` answers nothing.
    pub fn vanish(&self, address: IpAddr) -> Result<(), BenchError> {
        nft(&format!(
            "add element inet {} gone {{ {address} }}\n",
            self.table
        ))
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        let _ = nft(&format!("delete table inet {}\n", self.table));
    }
}

/// Take `addresses` out of every run's table of vanished hosts, before a run starts servers on
/// them: a run that was killed (its table never dropped) would otherwise black-hole the next run's
/// servers on the same addresses. Best effort: nothing to do without nftables or such tables, and
/// concurrent runs use other addresses.
pub fn revive(addresses: &[IpAddr]) {
    let Ok(out) = Command::new("nft").args(["list", "tables"]).output() else {
        return;
    };
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    let tables = listed
        .lines()
        .filter_map(|l| l.strip_prefix("table inet "))
        .filter(|t| t.starts_with("capi-lb-bench-"));
    for table in tables {
        for address in addresses {
            // An address that is not in the set is an error, and nothing to do.
            let _ = nft(&format!(
                "delete element inet {table} gone {{ {address} }}\n"
            ));
        }
    }
}

/// Run `nft -f -` with `script`.
fn nft(script: &str) -> Result<(), BenchError> {
    let fail = |why: String| {
        BenchError::Setup(format!(
            "nft (--black-hole needs nftables and CAP_NET_ADMIN): {why}"
        ))
    };
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(e.to_string()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| fail(e.to_string()))?;
    }
    let out = child.wait_with_output().map_err(|e| fail(e.to_string()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(fail(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ))
    }
}
