//! The attach socket's framing, spoken between an attach session (the agent) and the io
//! relay: `[u8 kind][u32 big-endian length][payload]`.
//!
//! Hand-written: the protocol is private to the two sides of one binary, five message kinds
//! over a local socket, so a codec crate would add more than it saves.

use std::io::{self, Read, Write};

use tokio::io::{AsyncRead, AsyncReadExt};

/// Largest payload either side accepts; the relay reads output in 32 KiB chunks and stdin
/// is written as it comes, so anything larger is a broken peer.
pub const MAX_PAYLOAD: usize = 1 << 20;

/// Session → relay: the first message; payload one byte of [`Wants`] bits.
pub const HELLO: u8 = 1;
/// Session → relay: bytes for the container's stdin.
pub const STDIN: u8 = 2;
/// Session → relay: this session's stdin ended.
pub const CLOSE_STDIN: u8 = 3;
/// Relay → session: the answer to HELLO; payload one byte of [`Container`] bits.
pub const WELCOME: u8 = 16;
pub const STDOUT: u8 = 17;
pub const STDERR: u8 = 18;
/// Relay → session: the container's output ended; nothing follows.
pub const END: u8 = 19;

/// Which of the container's streams a session wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wants {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

impl Wants {
    pub fn to_byte(self) -> u8 {
        u8::from(self.stdin) | u8::from(self.stdout) << 1 | u8::from(self.stderr) << 2
    }

    pub fn from_byte(b: u8) -> Self {
        Wants {
            stdin: b & 1 != 0,
            stdout: b & 2 != 0,
            stderr: b & 4 != 0,
        }
    }
}

/// What the container's stdio is, as the relay was started for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Container {
    pub stdin: bool,
    pub tty: bool,
    pub stdin_once: bool,
}

impl Container {
    pub fn to_byte(self) -> u8 {
        u8::from(self.stdin) | u8::from(self.tty) << 1 | u8::from(self.stdin_once) << 2
    }

    pub fn from_byte(b: u8) -> Self {
        Container {
            stdin: b & 1 != 0,
            tty: b & 2 != 0,
            stdin_once: b & 4 != 0,
        }
    }
}

/// One message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: u8,
    pub payload: Vec<u8>,
}

impl Frame {
    pub fn new(kind: u8, payload: impl Into<Vec<u8>>) -> Self {
        Frame {
            kind,
            payload: payload.into(),
        }
    }

    /// The frame's bytes, header included, ready for one write.
    pub fn encode(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(5 + payload.len());
        out.push(kind);
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        out.extend_from_slice(payload);
        out
    }
}

fn too_large(len: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("attach frame of {len} bytes exceeds the {MAX_PAYLOAD} byte limit"),
    )
}

/// Writes one frame (blocking side: the relay).
pub fn write_frame(w: &mut impl Write, kind: u8, payload: &[u8]) -> io::Result<()> {
    w.write_all(&Frame::encode(kind, payload))
}

/// Reads one frame; `None` at a clean end of stream between frames.
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<Frame>> {
    let mut header = [0u8; 5];
    let mut got = 0;
    while got < header.len() {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(too_large(len));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok(Some(Frame::new(header[0], payload)))
}

/// Reads one frame (async side: the agent); `None` at a clean end of stream.
pub async fn read_frame_async(r: &mut (impl AsyncRead + Unpin)) -> io::Result<Option<Frame>> {
    let kind = match r.read_u8().await {
        Ok(k) => k,
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = r.read_u32().await? as usize;
    if len > MAX_PAYLOAD {
        return Err(too_large(len));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    Ok(Some(Frame::new(kind, payload)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_a_clean_end_is_none() {
        let mut wire = Vec::new();
        write_frame(&mut wire, STDIN, b"one\n").unwrap();
        write_frame(&mut wire, CLOSE_STDIN, b"").unwrap();
        let mut r = &wire[..];
        assert_eq!(
            read_frame(&mut r).unwrap(),
            Some(Frame::new(STDIN, b"one\n".to_vec()))
        );
        assert_eq!(
            read_frame(&mut r).unwrap(),
            Some(Frame::new(CLOSE_STDIN, Vec::new()))
        );
        assert_eq!(read_frame(&mut r).unwrap(), None);
    }

    #[test]
    fn a_cut_frame_or_an_oversized_one_is_an_error() {
        let wire = Frame::encode(STDOUT, b"abcdef");
        let mut cut = &wire[..wire.len() - 2];
        assert!(read_frame(&mut cut).is_err());
        let mut header = &wire[..3];
        assert_eq!(
            read_frame(&mut header).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        let mut big = vec![STDOUT];
        big.extend_from_slice(&((MAX_PAYLOAD + 1) as u32).to_be_bytes());
        assert_eq!(
            read_frame(&mut &big[..]).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }

    #[tokio::test]
    async fn the_async_reader_reads_what_the_blocking_writer_wrote() {
        let mut wire = Vec::new();
        write_frame(
            &mut wire,
            WELCOME,
            &[Container {
                stdin: true,
                tty: false,
                stdin_once: true,
            }
            .to_byte()],
        )
        .unwrap();
        write_frame(&mut wire, END, b"").unwrap();
        let mut r = &wire[..];
        let welcome = read_frame_async(&mut r).await.unwrap().unwrap();
        assert_eq!(welcome.kind, WELCOME);
        assert_eq!(
            Container::from_byte(welcome.payload[0]),
            Container {
                stdin: true,
                tty: false,
                stdin_once: true
            }
        );
        assert_eq!(read_frame_async(&mut r).await.unwrap().unwrap().kind, END);
        assert_eq!(read_frame_async(&mut r).await.unwrap(), None);
    }

    #[test]
    fn flag_bytes_round_trip() {
        for b in 0..8u8 {
            assert_eq!(Wants::from_byte(b).to_byte(), b);
            assert_eq!(Container::from_byte(b).to_byte(), b);
        }
    }
}
