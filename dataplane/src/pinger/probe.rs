//! One probe of the [pinger](super): an ICMP echo on a raw socket, or a TCP handshake,
//! bounded by a timeout. An answer is its round-trip time; no answer in time is a loss.
//! A TCP reset counts as an answer (the peer's kernel got the SYN and replied), so a
//! target needs no listener on the probed port.

use std::io::ErrorKind;
use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

/// A probe that could not be sent (as opposed to one that was lost).
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct ProbeError {
    what: &'static str,
    source: std::io::Error,
}

fn err(what: &'static str) -> impl FnOnce(std::io::Error) -> ProbeError {
    move |source| ProbeError { what, source }
}

/// The echo identifier: distinct per probe of this process (raw sockets see every echo
/// reply of the host, so the identifier and sequence pick ours).
fn next_id() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = (std::process::id() as u16).rotate_left(5);
    base ^ NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The Internet checksum (RFC 1071) of `data`.
pub fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An echo request (ICMP type 8, or ICMPv6 type 128 whose checksum the kernel fills in).
pub fn echo_request(v6: bool, id: u16, seq: u16) -> Vec<u8> {
    let mut p = vec![if v6 { 128 } else { 8 }, 0, 0, 0];
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(b"zstack-ovn-pinger");
    if !v6 {
        let c = checksum(&p);
        p[2..4].copy_from_slice(&c.to_be_bytes());
    }
    p
}

/// Whether `pkt` (as a raw socket reads it: with the IPv4 header, without an IPv6 one)
/// is the echo reply to (`id`, `seq`).
pub fn is_reply(v6: bool, pkt: &[u8], id: u16, seq: u16) -> bool {
    let icmp = if v6 {
        pkt
    } else {
        let Some(ihl) = pkt.first().map(|b| usize::from(b & 0x0f) * 4) else {
            return false;
        };
        pkt.get(ihl..).unwrap_or_default()
    };
    icmp.len() >= 8
        && icmp[0] == if v6 { 129 } else { 0 }
        && icmp[1] == 0
        && icmp[4..6] == id.to_be_bytes()
        && icmp[6..8] == seq.to_be_bytes()
}

/// One ICMP echo to `dst`: `Some(rtt)`, or `None` when no reply came within `timeout`.
pub async fn icmp(
    dst: IpAddr,
    seq: u16,
    timeout: Duration,
) -> Result<Option<Duration>, ProbeError> {
    let v6 = dst.is_ipv6();
    let (domain, proto) = if v6 {
        (Domain::IPV6, Protocol::ICMPV6)
    } else {
        (Domain::IPV4, Protocol::ICMPV4)
    };
    let sock = Socket::new(domain, Type::RAW, Some(proto)).map_err(err("raw ICMP socket"))?;
    sock.set_nonblocking(true).map_err(err("non-blocking"))?;
    // a connected raw socket gets only what `dst` sends
    sock.connect(&SocketAddr::new(dst, 0).into())
        .map_err(err("connect"))?;
    // SAFETY: the socket owns its fd for the AsyncFd's whole life (it drops its
    // registration before the socket it holds)
    let fd = unsafe { AsyncFd::register_with_interest(sock, tokio::io::Interest::READABLE) }
        .map_err(|e| err("register the socket")(e.into_parts().1))?;
    let id = next_id();
    let start = Instant::now();
    let deadline = start + timeout;
    match fd.get_ref().send(&echo_request(v6, id, seq)) {
        Ok(_) => {}
        // no route, or the neighbour is unresolved: a loss, not a fault of the probe
        Err(e) if e.kind() != ErrorKind::PermissionDenied => return Ok(None),
        Err(e) => return Err(err("send")(e)),
    }
    let mut buf = [MaybeUninit::<u8>::uninit(); 1600];
    loop {
        let Ok(guard) = tokio::time::timeout_at(deadline, fd.readable()).await else {
            return Ok(None);
        };
        let mut guard = guard.map_err(err("wait"))?;
        match guard.try_io(|s| s.get_ref().recv(&mut buf)) {
            Ok(Ok(n)) => {
                // SAFETY: `recv` initialised the first `n` bytes
                let pkt: Vec<u8> = buf[..n]
                    .iter()
                    .map(|b| unsafe { b.assume_init() })
                    .collect();
                if is_reply(v6, &pkt, id, seq) {
                    return Ok(Some(start.elapsed()));
                }
            }
            // an ICMP error for an earlier send (e.g. host unreachable): keep waiting
            Ok(Err(_)) => {}
            Err(_would_block) => {}
        }
    }
}

/// One TCP handshake with `dst`: `Some(rtt)` when it answered (accepted or reset), `None`
/// when nothing came back within `timeout` (or the network said it is unreachable).
pub async fn tcp(dst: SocketAddr, timeout: Duration) -> Option<Duration> {
    let start = Instant::now();
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(dst)).await {
        Ok(Ok(_)) => Some(start.elapsed()),
        Ok(Err(e)) if e.kind() == ErrorKind::ConnectionRefused => Some(start.elapsed()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_requests_carry_a_valid_checksum_and_match_only_their_reply() {
        let req = echo_request(false, 0x1234, 7);
        // a packet with its checksum sums to zero
        assert_eq!(checksum(&req), 0);
        let mut reply = vec![0x45u8; 1];
        reply.extend_from_slice(&[0; 19]);
        let mut icmp = req.clone();
        icmp[0] = 0;
        reply.extend_from_slice(&icmp);
        assert!(is_reply(false, &reply, 0x1234, 7));
        assert!(!is_reply(false, &reply, 0x1234, 8));
        assert!(!is_reply(false, &reply, 0x1235, 7));
        // our own request (seen on loopback) is not a reply
        let mut own = vec![0x45u8; 1];
        own.extend_from_slice(&[0; 19]);
        own.extend_from_slice(&req);
        assert!(!is_reply(false, &own, 0x1234, 7));
        let mut r6 = echo_request(true, 9, 1);
        r6[0] = 129;
        assert!(is_reply(true, &r6, 9, 1));
        assert!(!is_reply(true, &r6[..6], 9, 1));
    }
}
