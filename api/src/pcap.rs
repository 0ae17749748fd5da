//! Classic pcap (libpcap's file format): a 24-byte file header, then one 16-byte record
//! header per packet. Written little-endian (magic `a1b2c3d4` in the host order of
//! x86/arm64), microsecond timestamps, `LINKTYPE_ETHERNET`, snaplen 65535; read in either
//! byte order, micro- or nanosecond timestamps.
//!
//! The stream of `zovn capture`: written on the node by the agent, read by the CLI
//! (and by the tests).

use std::io::{self, Read, Write};

/// The version of the capture stream `zstack-ovnkube-node debug capture` writes and the
/// `zovn` CLI reads: this pcap on standard output, diagnostics on standard error, exit
/// 0/1/2. The CLI passes it (`--protocol`); a node speaking another refuses. Bump it
/// when either side's expectation changes.
pub const CAPTURE_PROTOCOL: u32 = 1;
/// The capture's exit code on the operator's mistake (a pod port not on this node, a
/// CLI of another protocol).
pub const EXIT_INPUT: i32 = 2;
/// The capture's exit code on a system failure (OVS unreachable, the tap never appeared).
pub const EXIT_FAILURE: i32 = 1;
use std::time::Duration;

/// The magic number of a microsecond-resolution file.
pub const MAGIC: u32 = 0xa1b2_c3d4;
/// The magic number of a nanosecond-resolution file.
pub const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
/// Ethernet frames.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// The longest frame kept.
pub const SNAPLEN: u32 = 65535;

/// One captured packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// Time since the Unix epoch.
    pub ts: Duration,
    /// Length on the wire (`data` holds at most the snaplen).
    pub orig_len: u32,
    pub data: Vec<u8>,
}

/// Why a pcap stream could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    #[error("reading the capture: {0}")]
    Io(#[from] io::Error),
    #[error("not a pcap stream (magic {0:#010x})")]
    Magic(u32),
    #[error("truncated pcap stream ({0})")]
    Truncated(&'static str),
    #[error("packet record of {0} bytes is longer than the snaplen")]
    TooLong(u32),
}

/// Writes pcap to `W`, flushing after every packet (a reader downstream sees each packet
/// as it comes).
pub struct PcapWriter<W: Write> {
    w: W,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header.
    pub fn new(mut w: W) -> io::Result<PcapWriter<W>> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&MAGIC.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes()); // thiszone
        h.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
        h.extend_from_slice(&SNAPLEN.to_le_bytes());
        h.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        w.write_all(&h)?;
        w.flush()?;
        Ok(PcapWriter { w })
    }

    /// Writes one packet (`data` cut to the snaplen) and flushes.
    pub fn write(&mut self, ts: Duration, orig_len: u32, data: &[u8]) -> io::Result<()> {
        let data = &data[..data.len().min(SNAPLEN as usize)];
        let mut rec = Vec::with_capacity(16 + data.len());
        // pcap's seconds field is 32 bits: wraps in 2106
        rec.extend_from_slice(&(ts.as_secs() as u32).to_le_bytes());
        rec.extend_from_slice(&ts.subsec_micros().to_le_bytes());
        rec.extend_from_slice(&(data.len() as u32).to_le_bytes());
        rec.extend_from_slice(&orig_len.max(data.len() as u32).to_le_bytes());
        rec.extend_from_slice(data);
        self.w.write_all(&rec)?;
        self.w.flush()
    }

    pub fn into_inner(self) -> W {
        self.w
    }
}

/// Reads pcap from `R`.
pub struct PcapReader<R: Read> {
    r: R,
    swapped: bool,
    nanos: bool,
    /// The file's link type ([`LINKTYPE_ETHERNET`] from `zovn capture`).
    pub linktype: u32,
    pub snaplen: u32,
}

impl<R: Read> PcapReader<R> {
    /// Reads and checks the file header.
    pub fn new(mut r: R) -> Result<PcapReader<R>, PcapError> {
        let mut h = [0u8; 24];
        if !read_full(&mut r, &mut h)? {
            return Err(PcapError::Truncated("no file header"));
        }
        let le = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let (swapped, nanos) = match (le, le.swap_bytes()) {
            (MAGIC, _) => (false, false),
            (MAGIC_NANOS, _) => (false, true),
            (_, MAGIC) => (true, false),
            (_, MAGIC_NANOS) => (true, true),
            _ => return Err(PcapError::Magic(le)),
        };
        let mut p = PcapReader {
            r,
            swapped,
            nanos,
            linktype: 0,
            snaplen: 0,
        };
        p.snaplen = p.u32_at(&h, 16);
        p.linktype = p.u32_at(&h, 20);
        Ok(p)
    }

    fn u32_at(&self, b: &[u8], at: usize) -> u32 {
        let v = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        if self.swapped { v.swap_bytes() } else { v }
    }

    /// The next packet; `None` at the end of the stream (between records).
    pub fn next_packet(&mut self) -> Result<Option<Packet>, PcapError> {
        let mut h = [0u8; 16];
        if !read_full(&mut self.r, &mut h)? {
            return Ok(None);
        }
        let (secs, frac, incl, orig) = (
            self.u32_at(&h, 0),
            self.u32_at(&h, 4),
            self.u32_at(&h, 8),
            self.u32_at(&h, 12),
        );
        if incl > self.snaplen.max(SNAPLEN) {
            return Err(PcapError::TooLong(incl));
        }
        let mut data = vec![0u8; incl as usize];
        if !read_full(&mut self.r, &mut data)? {
            return Err(PcapError::Truncated("packet data"));
        }
        let sub = if self.nanos {
            Duration::from_nanos(u64::from(frac))
        } else {
            Duration::from_micros(u64::from(frac))
        };
        Ok(Some(Packet {
            ts: Duration::from_secs(u64::from(secs)) + sub,
            orig_len: orig,
            data,
        }))
    }
}

/// Every packet of a whole pcap file.
pub fn read_all(bytes: &[u8]) -> Result<Vec<Packet>, PcapError> {
    let mut r = PcapReader::new(bytes)?;
    let mut out = Vec::new();
    while let Some(p) = r.next_packet()? {
        out.push(p);
    }
    Ok(out)
}

/// Fills `buf`: true when filled, false at an end of stream before its first byte, an
/// error at an end of stream inside it.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> Result<bool, PcapError> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(PcapError::Truncated("a record cut short")),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_classic_header_and_reads_back_what_it_wrote() {
        let mut w = PcapWriter::new(Vec::new()).expect("header");
        let ts = Duration::new(1_700_000_000, 123_456_000);
        w.write(ts, 60, &[0xaa; 60]).expect("packet");
        w.write(ts + Duration::from_millis(1), 9000, &[1, 2, 3])
            .expect("packet");
        let bytes = w.into_inner();
        assert_eq!(&bytes[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(
            u32::from_le_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]),
            65535
        );
        assert_eq!(
            u32::from_le_bytes([bytes[20], bytes[21], bytes[22], bytes[23]]),
            1
        );
        let p = read_all(&bytes).expect("read");
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].ts, ts);
        assert_eq!(p[0].data, vec![0xaa; 60]);
        assert_eq!((p[1].orig_len, p[1].data.len()), (9000, 3));
    }

    #[test]
    fn reads_big_endian_and_nanosecond_files() {
        let mut b = Vec::new();
        b.extend_from_slice(&MAGIC_NANOS.to_be_bytes());
        b.extend_from_slice(&[0, 2, 0, 4]);
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&65535u32.to_be_bytes());
        b.extend_from_slice(&1u32.to_be_bytes());
        for v in [10u32, 5, 2, 2] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        b.extend_from_slice(&[7, 8]);
        let p = read_all(&b).expect("read");
        assert_eq!(p[0].ts, Duration::new(10, 5));
        assert_eq!(p[0].data, vec![7, 8]);
    }

    #[test]
    fn refuses_garbage_and_truncation() {
        assert!(matches!(read_all(&[0u8; 24]), Err(PcapError::Magic(0))));
        assert!(matches!(read_all(&[0xd4]), Err(PcapError::Truncated(_))));
        let mut w = PcapWriter::new(Vec::new()).expect("header");
        w.write(Duration::ZERO, 4, &[1, 2, 3, 4]).expect("packet");
        let mut bytes = w.into_inner();
        bytes.pop();
        assert!(matches!(read_all(&bytes), Err(PcapError::Truncated(_))));
        // a header alone is an empty capture
        let empty = PcapWriter::new(Vec::new()).expect("header").into_inner();
        assert_eq!(read_all(&empty).expect("empty").len(), 0);
    }
}
