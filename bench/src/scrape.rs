//! Reading a running controller's `/metrics` (the Prometheus text format) over plain HTTP on
//! loopback, without an HTTP client library: one `GET` with `Connection: close`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One sample: metric name, labels, value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The metric name as exposed (with `_total` for counters).
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// A scrape of the metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scrape(pub Vec<Sample>);

impl Scrape {
    /// The sum of `name` over the samples whose labels include every pair of `filter`.
    pub fn sum(&self, name: &str, filter: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                filter
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
            .sum()
    }

    /// The samples of `name`.
    pub fn samples<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.0.iter().filter(move |s| s.name == name)
    }
}

/// Parse the text format (comments and `# EOF` skipped; label values without escaped quotes).
pub fn parse(text: &str) -> Scrape {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = match line.rsplit_once(' ') {
            Some(parts) => parts,
            None => continue,
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let labels = labels
            .split("\",")
            .filter_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                Some((k.trim().to_string(), v.trim().trim_matches('"').to_string()))
            })
            .collect();
        out.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    Scrape(out)
}

/// `GET path` on `address`: the status code and the body.
pub async fn get(address: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in 10 s"))??;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    // axum answers a `Connection: close` request without chunking when the length is known;
    // decode chunks if it did chunk.
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((code, body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// Scrape `/metrics` on `address`.
pub async fn metrics(address: SocketAddr) -> std::io::Result<Scrape> {
    let (code, body) = get(address, "/metrics").await?;
    if code != 200 {
        return Err(std::io::Error::other(format!("/metrics answered {code}")));
    }
    Ok(parse(&body))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_text_format_is_parsed_and_summed() {
        let text = "# HELP capi_lb_reconciles Reconciles\n# TYPE capi_lb_reconciles counter\n\
            capi_lb_reconciles_total{controller=\"loadbalancer\",result=\"success\"} 12\n\
            capi_lb_reconciles_total{controller=\"loadbalancer\",result=\"error\"} 3\n\
            capi_lb_reconciles_total{controller=\"external-endpoint\",result=\"success\"} 5\n\
            capi_lb_leader 1\n# EOF\n";
        let s = parse(text);
        assert_eq!(
            s.sum(
                "capi_lb_reconciles_total",
                &[("controller", "loadbalancer")]
            ),
            15.0
        );
        assert_eq!(s.sum("capi_lb_reconciles_total", &[]), 20.0);
        assert_eq!(s.sum("capi_lb_leader", &[]), 1.0);
        assert_eq!(s.sum("capi_lb_missing", &[]), 0.0);
    }

    #[test]
    fn chunked_bodies_are_decoded() {
        assert_eq!(
            dechunk("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
            "hello world"
        );
    }
}
