//! The shim ↔ agent wire protocol.
//!
//! One request per connection on a unix stream socket:
//!
//! 1. the shim connects and writes one frame holding a [`Request`];
//! 2. the agent writes one frame holding a [`Response`] and closes.
//!
//! A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON.
//! Frames larger than [`MAX_MESSAGE`] are refused by both sides before reading the body.
//! A length prefix (rather than newline-delimited JSON) lets a reader tell a complete
//! answer from a connection that closed mid-reply.
//!
//! The shim side uses blocking std I/O ([`write_request`], [`read_response`]; see
//! [`crate::client::call`]); the agent side uses tokio ([`read_request`],
//! [`write_response`], feature `server`).

use std::io::{self, Read, Write};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::request::{Request, Response};

/// Largest frame body either side accepts: 4 MiB (stdin is capped at 1 MiB; the config
/// is embedded as a JSON string, so escaping can grow it).
pub const MAX_MESSAGE: usize = 4 << 20;

/// Length of the frame header.
pub const HEADER_LEN: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("the peer closed the connection without sending a message")]
    Closed,
    #[error("the peer closed the connection mid-message ({got} of {expected} bytes received)")]
    Truncated { got: usize, expected: usize },
    #[error("message of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error("invalid message: {0}")]
    Decode(#[source] serde_json::Error),
    #[error("cannot encode message: {0}")]
    Encode(#[source] serde_json::Error),
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

impl ProtocolError {
    /// True when the error is a read/write timeout (`SO_RCVTIMEO`/`SO_SNDTIMEO` expired).
    pub fn is_timeout(&self) -> bool {
        matches!(self, ProtocolError::Io(e)
            if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
    }
}

/// Encodes `msg` as a frame (header + body).
pub fn encode_frame<T: Serialize>(msg: &T) -> Result<Vec<u8>, ProtocolError> {
    let body = serde_json::to_vec(msg).map_err(ProtocolError::Encode)?;
    if body.len() > MAX_MESSAGE {
        return Err(ProtocolError::TooLarge {
            len: body.len(),
            max: MAX_MESSAGE,
        });
    }
    let len = u32::try_from(body.len()).map_err(|_| ProtocolError::TooLarge {
        len: body.len(),
        max: MAX_MESSAGE,
    })?;
    let mut frame = Vec::with_capacity(HEADER_LEN + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

fn body_len(header: [u8; HEADER_LEN]) -> Result<usize, ProtocolError> {
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_MESSAGE {
        return Err(ProtocolError::TooLarge {
            len,
            max: MAX_MESSAGE,
        });
    }
    Ok(len)
}

fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, ProtocolError> {
    serde_json::from_slice(body).map_err(ProtocolError::Decode)
}

/// Reads into `buf` until full or EOF; returns how many bytes were read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads one frame (blocking).
pub fn read_frame<T: DeserializeOwned>(r: &mut impl Read) -> Result<T, ProtocolError> {
    let mut header = [0u8; HEADER_LEN];
    match read_full(r, &mut header)? {
        0 => return Err(ProtocolError::Closed),
        HEADER_LEN => {}
        got => {
            return Err(ProtocolError::Truncated {
                got,
                expected: HEADER_LEN,
            });
        }
    }
    let len = body_len(header)?;
    let mut body = vec![0u8; len];
    let got = read_full(r, &mut body)?;
    if got < len {
        return Err(ProtocolError::Truncated {
            got: HEADER_LEN + got,
            expected: HEADER_LEN + len,
        });
    }
    decode(&body)
}

/// Writes one frame (blocking).
pub fn write_frame<T: Serialize>(w: &mut impl Write, msg: &T) -> Result<(), ProtocolError> {
    w.write_all(&encode_frame(msg)?)?;
    w.flush()?;
    Ok(())
}

/// Shim side: sends the request.
pub fn write_request(w: &mut impl Write, req: &Request) -> Result<(), ProtocolError> {
    write_frame(w, req)
}

/// Shim side: reads the agent's answer.
pub fn read_response(r: &mut impl Read) -> Result<Response, ProtocolError> {
    read_frame(r)
}

#[cfg(feature = "server")]
mod server {
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

    use super::*;

    async fn read_full_async<R: AsyncRead + Unpin>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
        let mut got = 0;
        while got < buf.len() {
            match r.read(&mut buf[got..]).await? {
                0 => break,
                n => got += n,
            }
        }
        Ok(got)
    }

    /// Reads one frame from an async stream.
    pub async fn read_frame_async<T: DeserializeOwned, R: AsyncRead + Unpin>(
        r: &mut R,
    ) -> Result<T, ProtocolError> {
        let mut header = [0u8; HEADER_LEN];
        match read_full_async(r, &mut header).await? {
            0 => return Err(ProtocolError::Closed),
            HEADER_LEN => {}
            got => {
                return Err(ProtocolError::Truncated {
                    got,
                    expected: HEADER_LEN,
                });
            }
        }
        let len = body_len(header)?;
        let mut body = vec![0u8; len];
        let got = read_full_async(r, &mut body).await?;
        if got < len {
            return Err(ProtocolError::Truncated {
                got: HEADER_LEN + got,
                expected: HEADER_LEN + len,
            });
        }
        decode(&body)
    }

    /// Writes one frame to an async stream.
    pub async fn write_frame_async<T: Serialize, W: AsyncWrite + Unpin>(
        w: &mut W,
        msg: &T,
    ) -> Result<(), ProtocolError> {
        w.write_all(&encode_frame(msg)?).await?;
        w.flush().await?;
        Ok(())
    }

    /// Agent side: reads the shim's request (e.g. from a `tokio::net::UnixStream`).
    /// The agent should bound this with its own timeout.
    pub async fn read_request<R: AsyncRead + Unpin>(r: &mut R) -> Result<Request, ProtocolError> {
        read_frame_async(r).await
    }

    /// Agent side: writes the answer. Close the connection afterwards.
    pub async fn write_response<W: AsyncWrite + Unpin>(
        w: &mut W,
        resp: &Response,
    ) -> Result<(), ProtocolError> {
        write_frame_async(w, resp).await
    }
}

#[cfg(feature = "server")]
pub use server::{read_frame_async, read_request, write_frame_async, write_response};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::CniError;
    use std::io::Cursor;

    #[test]
    fn frame_round_trip() {
        let resp = Response::Error(CniError::new(101, "refused"));
        let frame = encode_frame(&resp).unwrap();
        assert_eq!(&frame[..4], &((frame.len() - 4) as u32).to_be_bytes());
        let back = read_response(&mut Cursor::new(frame)).unwrap();
        assert_eq!(back, resp);
    }

    #[test]
    fn truncated_and_closed() {
        let frame = encode_frame(&Response::Ok).unwrap();
        let cut = &frame[..frame.len() - 1];
        match read_response(&mut Cursor::new(cut.to_vec())) {
            Err(ProtocolError::Truncated { got, expected }) => {
                assert_eq!((got, expected), (frame.len() - 1, frame.len()));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            read_response(&mut Cursor::new(vec![0u8, 0])),
            Err(ProtocolError::Truncated {
                got: 2,
                expected: 4
            })
        ));
        assert!(matches!(
            read_response(&mut Cursor::new(Vec::new())),
            Err(ProtocolError::Closed)
        ));
    }

    #[test]
    fn oversized_header_is_refused_before_reading() {
        let header = ((MAX_MESSAGE + 1) as u32).to_be_bytes().to_vec();
        assert!(matches!(
            read_response(&mut Cursor::new(header)),
            Err(ProtocolError::TooLarge { .. })
        ));
    }

    #[test]
    fn garbage_body_is_a_decode_error() {
        let mut frame = 3u32.to_be_bytes().to_vec();
        frame.extend_from_slice(b"{{{");
        assert!(matches!(
            read_response(&mut Cursor::new(frame)),
            Err(ProtocolError::Decode(_))
        ));
    }
}
