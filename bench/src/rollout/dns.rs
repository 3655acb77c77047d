//! A name resolved as a client in the cluster resolves it: an `A` query to the cluster's DNS
//! server (CoreDNS on the harness), over UDP.

use std::net::{Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RData, RecordType};

use crate::launch::BenchError;

/// The IPv4 addresses `server` answers for `name`, in its order (a client tries the first first;
/// empty for no such name).
pub async fn lookup_a(server: SocketAddr, name: &str) -> Result<Vec<Ipv4Addr>, BenchError> {
    let setup = |e: String| BenchError::Setup(format!("resolving {name} at {server}: {e}"));
    let mut query = Message::query();
    let id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    query.metadata.id = (id % 65_536) as u16;
    query.metadata.recursion_desired = true;
    query.add_query(Query::query(
        Name::from_str(name).map_err(|e| setup(e.to_string()))?,
        RecordType::A,
    ));
    let bytes = query.to_vec().map_err(|e| setup(e.to_string()))?;
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .map_err(|e| setup(e.to_string()))?;
    let mut buffer = vec![0u8; 4096];
    for _attempt in 0..5 {
        socket
            .send_to(&bytes, server)
            .await
            .map_err(|e| setup(e.to_string()))?;
        let Ok(Ok((len, _))) =
            tokio::time::timeout(Duration::from_secs(1), socket.recv_from(&mut buffer)).await
        else {
            continue;
        };
        let Ok(answer) = Message::from_vec(&buffer[..len]) else {
            continue;
        };
        if answer.metadata.id != query.metadata.id {
            continue;
        }
        let out: Vec<Ipv4Addr> = answer
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(a.0),
                _ => None,
            })
            .collect();
        return Ok(out);
    }
    Err(setup("no answer after 5 tries".into()))
}
