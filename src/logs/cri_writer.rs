//! Turning a container's output stream into CRI log records.
//!
//! A record is `<timestamp> <stream> <tag> <content>\n`. Lines end at `\n` (a `\r` before it is
//! dropped, as containerd does). A line longer than the limit becomes `P` (partial) records of
//! exactly the limit, closed by an `F` record with the rest; an unterminated chunk left at end of
//! stream is written as a `P` record, which is what containerd's CRI logger does
//! (`pkg/cri/io/logger.go`), so readers can tell that no newline followed.

use std::io::{self, Read};
use std::sync::Mutex;
use std::time::SystemTime;

use super::timestamp::{write_rfc3339_nano, MAX_RFC3339_NANO_LEN};
use super::LogStream;

/// containerd's default `max_container_log_line_size`.
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024;

/// Large enough to drain a full pipe (64 KiB by default) in two reads.
const READ_BUFFER_BYTES: usize = 32 * 1024;

/// Where finished records go. Each call carries exactly one whole record, newline included, so a
/// file sink can hand it to a single `write(2)`.
pub trait LogSink {
    fn write_record(&mut self, record: &[u8]) -> io::Result<()>;
}

impl LogSink for Vec<u8> {
    fn write_record(&mut self, record: &[u8]) -> io::Result<()> {
        self.extend_from_slice(record);
        Ok(())
    }
}

struct Shared<S> {
    sink: S,
    record: Vec<u8>,
}

/// Formats records and writes them to a sink under one lock, so the stdout and stderr copiers
/// never interleave inside a record. The timestamp is taken while holding the lock, which keeps
/// timestamps in file order (readers filtering by `sinceTime` rely on that).
pub struct RecordWriter<S> {
    shared: Mutex<Shared<S>>,
    clock: fn() -> SystemTime,
}

impl<S: LogSink> RecordWriter<S> {
    pub fn new(sink: S) -> Self {
        Self::with_clock(sink, SystemTime::now)
    }

    /// Tests pass a fixed clock to get reproducible records.
    pub fn with_clock(sink: S, clock: fn() -> SystemTime) -> Self {
        RecordWriter {
            shared: Mutex::new(Shared {
                sink,
                record: Vec::with_capacity(DEFAULT_MAX_LINE_BYTES + 64),
            }),
            clock,
        }
    }

    /// Writes one record whose content is the concatenation of `parts`.
    pub fn write_record(
        &self,
        stream: LogStream,
        partial: bool,
        parts: &[&[u8]],
    ) -> io::Result<()> {
        // A copier that panicked mid-record leaves at worst a half-built buffer, which is
        // cleared below; the other stream should keep logging.
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let Shared { sink, record } = &mut *shared;
        record.clear();
        let mut time = [0u8; MAX_RFC3339_NANO_LEN];
        let time_len = write_rfc3339_nano((self.clock)(), &mut time);
        record.extend_from_slice(&time[..time_len]);
        record.push(b' ');
        record.extend_from_slice(stream.as_str().as_bytes());
        record.extend_from_slice(if partial { b" P " } else { b" F " });
        for part in parts {
            record.extend_from_slice(part);
        }
        record.push(b'\n');
        sink.write_record(record)
    }

    pub fn into_sink(self) -> S {
        self.shared
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .sink
    }
}

/// What one stream's copy did; write errors are counted, not fatal (see [`copy_stream`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CopyStats {
    pub bytes_read: u64,
    pub records: u64,
    pub write_errors: u64,
    pub first_write_error: Option<io::ErrorKind>,
}

/// Copies `input` to `writer` as CRI records until end of stream. `max_line` of 0 means lines
/// are never split.
///
/// Write errors do not stop the copy: a logger that stops reading fills the pipe and blocks the
/// container on its next write, so like containerd we keep draining and lose records instead.
/// A read error ends the copy (after writing what was buffered) and is returned.
pub fn copy_stream<R: Read, S: LogSink>(
    mut input: R,
    stream: LogStream,
    max_line: usize,
    writer: &RecordWriter<S>,
) -> io::Result<CopyStats> {
    let mut splitter = LineSplitter {
        stream,
        max_line,
        pending: Vec::new(),
        writer,
        stats: CopyStats::default(),
    };
    let mut buf = vec![0u8; READ_BUFFER_BYTES];
    let result = loop {
        match input.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(n) => {
                splitter.stats.bytes_read += n as u64;
                splitter.push(&buf[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => break Err(e),
        }
    };
    splitter.finish();
    result.map(|()| splitter.stats)
}

struct LineSplitter<'w, S> {
    stream: LogStream,
    max_line: usize,
    /// Bytes of the current line not yet written. Holds at most `max_line` bytes, plus one when
    /// the last byte is a `\r` that may turn out to precede `\n`.
    pending: Vec<u8>,
    writer: &'w RecordWriter<S>,
    stats: CopyStats,
}

impl<S: LogSink> LineSplitter<'_, S> {
    fn emit(&mut self, partial: bool, parts: &[&[u8]]) {
        self.stats.records += 1;
        if let Err(e) = self.writer.write_record(self.stream, partial, parts) {
            self.stats.write_errors += 1;
            self.stats.first_write_error.get_or_insert(e.kind());
        }
    }

    fn push(&mut self, mut data: &[u8]) {
        while let Some(newline) = data.iter().position(|&b| b == b'\n') {
            self.end_line(&data[..newline]);
            data = &data[newline + 1..];
        }
        self.continue_line(data);
    }

    fn over_limit(&self, len: usize) -> bool {
        self.max_line != 0 && len > self.max_line
    }

    /// Writes `P` records of exactly `max_line` bytes from `pending` followed by `tail` for as
    /// long as `keep_going(remaining length, last byte)` says so; returns the unwritten tail.
    fn split_while<'d>(
        &mut self,
        mut tail: &'d [u8],
        keep_going: impl Fn(&Self, usize, Option<u8>) -> bool,
    ) -> &'d [u8] {
        loop {
            let total = self.pending.len() + tail.len();
            let last = tail.last().or(self.pending.last()).copied();
            if !keep_going(self, total, last) {
                return tail;
            }
            let max = self.max_line;
            if self.pending.len() >= max {
                let chunk: Vec<u8> = self.pending.drain(..max).collect();
                self.emit(true, &[&chunk]);
            } else {
                let take = max - self.pending.len();
                let pending = std::mem::take(&mut self.pending);
                self.emit(true, &[&pending, &tail[..take]]);
                self.pending = pending;
                self.pending.clear();
                tail = &tail[take..];
            }
        }
    }

    fn end_line(&mut self, mut segment: &[u8]) {
        if let Some(stripped) = segment.strip_suffix(b"\r") {
            segment = stripped;
        } else if segment.is_empty() && self.pending.last() == Some(&b'\r') {
            self.pending.pop();
        }
        let rest = self.split_while(segment, |s, total, _| s.over_limit(total));
        let pending = std::mem::take(&mut self.pending);
        self.emit(false, &[&pending, rest]);
        self.pending = pending;
        self.pending.clear();
    }

    fn continue_line(&mut self, segment: &[u8]) {
        let rest = self.split_while(segment, |s, total, last| {
            // Hold back a lone trailing '\r' one byte over the limit: if '\n' follows, it is
            // not content, and splitting before it would leave an empty `F` record.
            s.over_limit(total) && !(total == s.max_line + 1 && last == Some(b'\r'))
        });
        self.pending.extend_from_slice(rest);
    }

    fn finish(&mut self) {
        if !self.pending.is_empty() {
            let pending = std::mem::take(&mut self.pending);
            self.emit(true, &[&pending]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::time::{Duration, UNIX_EPOCH};

    fn fixed_clock() -> SystemTime {
        UNIX_EPOCH + Duration::new(1_136_214_245, 100_000_000)
    }
    const TS: &str = "2006-01-02T15:04:05.1Z";

    fn copy_all(input: &[u8], max_line: usize) -> (String, CopyStats) {
        let writer = RecordWriter::with_clock(Vec::new(), fixed_clock);
        let stats = copy_stream(input, LogStream::Stdout, max_line, &writer).unwrap();
        (String::from_utf8(writer.into_sink()).unwrap(), stats)
    }

    /// Delivers its data a few bytes per read, to exercise lines crossing read boundaries.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }
    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(self.data.len()).min(buf.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn full_lines_become_f_records() {
        let (out, stats) = copy_all(b"hello\nworld\n", DEFAULT_MAX_LINE_BYTES);
        assert_eq!(out, format!("{TS} stdout F hello\n{TS} stdout F world\n"));
        assert_eq!(stats.records, 2);
        assert_eq!(stats.bytes_read, 12);
    }

    #[test]
    fn empty_lines_are_kept_and_crlf_is_stripped() {
        let (out, _) = copy_all(b"\na\r\n\r\n", DEFAULT_MAX_LINE_BYTES);
        assert_eq!(
            out,
            format!("{TS} stdout F \n{TS} stdout F a\n{TS} stdout F \n")
        );
    }

    #[test]
    fn unterminated_chunk_at_eof_is_a_partial_record() {
        let (out, _) = copy_all(b"done\nno newline", DEFAULT_MAX_LINE_BYTES);
        assert_eq!(
            out,
            format!("{TS} stdout F done\n{TS} stdout P no newline\n")
        );
        let (out, stats) = copy_all(b"", DEFAULT_MAX_LINE_BYTES);
        assert_eq!(out, "");
        assert_eq!(stats.records, 0);
    }

    #[test]
    fn long_lines_split_into_p_chunks_closed_by_f() {
        let (out, _) = copy_all(b"abcdefghij\nxyz\n", 4);
        assert_eq!(
            out,
            format!(
                "{TS} stdout P abcd\n{TS} stdout P efgh\n{TS} stdout F ij\n{TS} stdout F xyz\n"
            )
        );
        // A line of exactly the limit is one F record; an exact multiple ends with a full F.
        let (out, _) = copy_all(b"abcd\nabcdefgh\n", 4);
        assert_eq!(
            out,
            format!("{TS} stdout F abcd\n{TS} stdout P abcd\n{TS} stdout F efgh\n")
        );
    }

    #[test]
    fn splitting_does_not_depend_on_read_sizes() {
        let input = b"abcdefghij\nxy\r\n\nlonger line here\ntail-without-newline";
        let (expected, _) = copy_all(input, 5);
        for step in 1..=input.len() {
            let writer = RecordWriter::with_clock(Vec::new(), fixed_clock);
            copy_stream(Trickle { data: input, step }, LogStream::Stdout, 5, &writer).unwrap();
            assert_eq!(
                String::from_utf8(writer.into_sink()).unwrap(),
                expected,
                "step {step}"
            );
        }
    }

    #[test]
    fn carriage_return_at_the_limit_does_not_leave_an_empty_f() {
        for step in 1..=7 {
            let writer = RecordWriter::with_clock(Vec::new(), fixed_clock);
            copy_stream(
                Trickle {
                    data: b"abcd\r\n",
                    step,
                },
                LogStream::Stdout,
                4,
                &writer,
            )
            .unwrap();
            assert_eq!(
                String::from_utf8(writer.into_sink()).unwrap(),
                format!("{TS} stdout F abcd\n"),
                "step {step}"
            );
        }
    }

    #[test]
    fn unlimited_line_length_when_max_is_zero() {
        let line = "x".repeat(100_000);
        let (out, stats) = copy_all(format!("{line}\n").as_bytes(), 0);
        assert_eq!(out, format!("{TS} stdout F {line}\n"));
        assert_eq!(stats.records, 1);
    }

    #[test]
    fn the_real_limit_splits_a_40k_line_into_16k_chunks() {
        let line: Vec<u8> = (0..40_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let mut input = line.clone();
        input.push(b'\n');
        let (out, _) = copy_all(&input, DEFAULT_MAX_LINE_BYTES);
        let records: Vec<&str> = out.lines().collect();
        assert_eq!(records.len(), 3);
        let prefix_len = TS.len() + " stdout P ".len();
        assert_eq!(records[0].len(), prefix_len + 16_384);
        assert_eq!(records[1].len(), prefix_len + 16_384);
        assert!(records[0].contains(" stdout P "));
        assert!(records[2].contains(" stdout F "));
        let joined: String = records.iter().map(|r| &r[prefix_len..]).collect();
        assert_eq!(joined.as_bytes(), &line[..]);
    }

    struct FailingSink;
    impl LogSink for FailingSink {
        fn write_record(&mut self, _: &[u8]) -> io::Result<()> {
            Err(io::Error::from(io::ErrorKind::StorageFull))
        }
    }

    #[test]
    fn write_errors_are_counted_and_the_stream_still_drains() {
        let writer = RecordWriter::new(FailingSink);
        let input = b"a\nb\nc\n";
        let stats = copy_stream(&input[..], LogStream::Stderr, 16, &writer).unwrap();
        assert_eq!(stats.bytes_read, 6);
        assert_eq!(stats.write_errors, 3);
        assert_eq!(stats.first_write_error, Some(io::ErrorKind::StorageFull));
    }

    /// A reader that waits at a barrier between chunks, so two copiers alternate.
    struct Lockstep<'a> {
        chunks: Vec<&'a [u8]>,
        barrier: &'a Barrier,
    }
    impl Read for Lockstep<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.barrier.wait();
            if self.chunks.is_empty() {
                return Ok(0);
            }
            let chunk = self.chunks.remove(0);
            buf[..chunk.len()].copy_from_slice(chunk);
            Ok(chunk.len())
        }
    }

    #[test]
    fn two_streams_interleave_only_between_records() {
        let writer = RecordWriter::with_clock(Vec::new(), fixed_clock);
        let barrier = Barrier::new(2);
        let out_chunks: Vec<&[u8]> = vec![b"out-1\nout-", b"2\n", b"out-3 tail"];
        let err_chunks: Vec<&[u8]> = vec![b"err-", b"1\nerr-2\n", b"err-3\n"];
        std::thread::scope(|s| {
            let out = s.spawn(|| {
                copy_stream(
                    Lockstep {
                        chunks: out_chunks,
                        barrier: &barrier,
                    },
                    LogStream::Stdout,
                    DEFAULT_MAX_LINE_BYTES,
                    &writer,
                )
            });
            let err = copy_stream(
                Lockstep {
                    chunks: err_chunks,
                    barrier: &barrier,
                },
                LogStream::Stderr,
                DEFAULT_MAX_LINE_BYTES,
                &writer,
            );
            assert_eq!(err.unwrap().records, 3);
            assert_eq!(out.join().unwrap().unwrap().records, 3);
        });
        let out = String::from_utf8(writer.into_sink()).unwrap();
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        for record in out.lines() {
            let rest = record.strip_prefix(TS).unwrap();
            if let Some(content) = rest.strip_prefix(" stdout ") {
                stdout.push(content.to_string());
            } else if let Some(content) = rest.strip_prefix(" stderr ") {
                stderr.push(content.to_string());
            } else {
                panic!("malformed record {record:?}");
            }
        }
        assert_eq!(stdout, ["F out-1", "F out-2", "P out-3 tail"]);
        assert_eq!(stderr, ["F err-1", "F err-2", "F err-3"]);
    }
}
