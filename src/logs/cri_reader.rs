//! Reading CRI log files back: one record per line, partial chunks joined into whole lines.
//!
//! Parsing follows the kubelet's reader (`pkg/kubelet/kuberuntime/logs/logs.go`): single-space
//! delimiters, an RFC3339 timestamp with any fraction and offset, `stdout`/`stderr`, then tags
//! joined by `:` whose first tag is `P` for a partial chunk (anything else means a full line).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use chrono::{DateTime, FixedOffset};

use super::LogStream;

/// One record of a CRI log file. `content` excludes the record's newline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriLogRecord<'a> {
    pub timestamp: DateTime<FixedOffset>,
    pub stream: LogStream,
    /// `P`: the line continues in the next record of the same stream.
    pub partial: bool,
    pub content: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CriLogParseError {
    #[error("CRI log record has no timestamp")]
    MissingTimestamp,
    #[error(
        "CRI log record has timestamp {0:?}, expected RFC3339 like 2006-01-02T15:04:05.999999999Z"
    )]
    BadTimestamp(String),
    #[error("CRI log record has no stream after its timestamp")]
    MissingStream,
    #[error("CRI log record has stream {0:?}, expected stdout or stderr")]
    BadStream(String),
    #[error("CRI log record has no tag after its stream")]
    MissingTag,
}

fn split_field(rest: &[u8]) -> Option<(&[u8], &[u8])> {
    let space = rest.iter().position(|&b| b == b' ')?;
    Some((&rest[..space], &rest[space + 1..]))
}

/// Parses one record; a trailing `\n` (and nothing else) is dropped from the content.
pub fn parse_cri_line(line: &[u8]) -> Result<CriLogRecord<'_>, CriLogParseError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let (time, rest) = split_field(line).ok_or(CriLogParseError::MissingTimestamp)?;
    let time = std::str::from_utf8(time)
        .ok()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .ok_or_else(|| CriLogParseError::BadTimestamp(String::from_utf8_lossy(time).into()))?;
    let (stream, rest) = split_field(rest).ok_or(CriLogParseError::MissingStream)?;
    let stream = match stream {
        b"stdout" => LogStream::Stdout,
        b"stderr" => LogStream::Stderr,
        other => {
            return Err(CriLogParseError::BadStream(
                String::from_utf8_lossy(other).into(),
            ))
        }
    };
    let (tags, content) = split_field(rest).ok_or(CriLogParseError::MissingTag)?;
    let first_tag = tags.split(|&b| b == b':').next().unwrap_or_default();
    Ok(CriLogRecord {
        timestamp: time,
        stream,
        partial: first_tag == b"P",
        content,
    })
}

/// A line of container output rebuilt from its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriLogLine {
    /// The first chunk's time, which is what the kubelet prints with `timestamps=true`.
    pub timestamp: DateTime<FixedOffset>,
    pub stream: LogStream,
    /// Without the newline.
    pub content: Vec<u8>,
    /// False when the last chunk was partial: the stream ended without a newline, or the file
    /// ends while the writer is still in the middle of the line.
    pub complete: bool,
}

/// A log file's lines, plus how many records could not be parsed (they are skipped, as the
/// kubelet skips them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogFileLines {
    pub lines: Vec<CriLogLine>,
    pub malformed: usize,
}

#[derive(Debug, thiserror::Error)]
#[error("reading container log file {path}: {source}")]
pub struct CriLogReadError {
    pub path: PathBuf,
    pub source: io::Error,
}

/// Joins records into lines. Partial chunks are joined per stream, since stdout and stderr
/// records interleave; a line takes its place in the output where its final chunk appears.
pub fn parse_log_bytes(data: &[u8]) -> LogFileLines {
    let mut out = LogFileLines::default();
    // Per stream: the line being assembled and the record index where it started.
    let mut open: [Option<(usize, CriLogLine)>; 2] = [None, None];
    let slot = |stream: LogStream| match stream {
        LogStream::Stdout => 0,
        LogStream::Stderr => 1,
    };
    let records = data.split_inclusive(|&b| b == b'\n');
    for (index, raw) in records.enumerate() {
        let record = match parse_cri_line(raw) {
            Ok(r) => r,
            Err(_) => {
                out.malformed += 1;
                continue;
            }
        };
        let (_, line) = open[slot(record.stream)].get_or_insert_with(|| {
            (
                index,
                CriLogLine {
                    timestamp: record.timestamp,
                    stream: record.stream,
                    content: Vec::new(),
                    complete: false,
                },
            )
        });
        line.content.extend_from_slice(record.content);
        if !record.partial {
            if let Some((_, mut line)) = open[slot(record.stream)].take() {
                line.complete = true;
                out.lines.push(line);
            }
        }
    }
    let mut unfinished: Vec<(usize, CriLogLine)> = open.into_iter().flatten().collect();
    unfinished.sort_by_key(|(start, _)| *start);
    out.lines
        .extend(unfinished.into_iter().map(|(_, line)| line));
    out
}

/// Reads a whole CRI log file into lines (see [`parse_log_bytes`]).
pub fn read_log_file(path: &Path) -> Result<LogFileLines, CriLogReadError> {
    let data = fs::read(path).map_err(|source| CriLogReadError {
        path: path.to_owned(),
        source,
    })?;
    Ok(parse_log_bytes(&data))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(text: &str) -> DateTime<FixedOffset> {
        DateTime::parse_from_rfc3339(text).unwrap()
    }

    #[test]
    fn parses_a_full_record() {
        let r = parse_cri_line(b"2016-10-06T00:17:09.669794203Z stderr F log content 2\n").unwrap();
        assert_eq!(r.timestamp, ts("2016-10-06T00:17:09.669794203Z"));
        assert_eq!(r.stream, LogStream::Stderr);
        assert!(!r.partial);
        assert_eq!(r.content, b"log content 2");
    }

    #[test]
    fn parses_partial_records_trimmed_timestamps_offsets_and_extra_tags() {
        let r = parse_cri_line(b"2006-01-02T15:04:05Z stdout P chunk").unwrap();
        assert!(r.partial);
        assert_eq!(r.content, b"chunk");
        assert_eq!(r.timestamp, ts("2006-01-02T15:04:05Z"));

        let r = parse_cri_line(b"2006-01-02T17:04:05.1+02:00 stdout P:x:y  two spaces\n").unwrap();
        assert!(r.partial);
        assert_eq!(r.content, b" two spaces");
        assert_eq!(r.timestamp, ts("2006-01-02T15:04:05.1Z"));

        // Unknown first tags count as full, as in the kubelet.
        let r = parse_cri_line(b"2006-01-02T15:04:05Z stdout X \n").unwrap();
        assert!(!r.partial);
        assert_eq!(r.content, b"");
    }

    #[test]
    fn rejects_malformed_records() {
        use CriLogParseError::*;
        assert_eq!(parse_cri_line(b"no-spaces"), Err(MissingTimestamp));
        assert_eq!(
            parse_cri_line(b"yesterday stdout F x"),
            Err(BadTimestamp("yesterday".into()))
        );
        assert_eq!(
            parse_cri_line(b"2006-01-02T15:04:05Z stdout"),
            Err(MissingStream)
        );
        assert_eq!(
            parse_cri_line(b"2006-01-02T15:04:05Z stdin F x"),
            Err(BadStream("stdin".into()))
        );
        assert_eq!(
            parse_cri_line(b"2006-01-02T15:04:05Z stdout F"),
            Err(MissingTag)
        );
    }

    #[test]
    fn joins_partial_chunks_per_stream() {
        let data = b"\
2006-01-02T15:04:05.1Z stdout P hel
2006-01-02T15:04:05.2Z stderr F oops
2006-01-02T15:04:05.3Z stdout P lo wor
garbage
2006-01-02T15:04:05.4Z stdout F ld
2006-01-02T15:04:05.5Z stderr P unfinished
";
        let parsed = parse_log_bytes(data);
        assert_eq!(parsed.malformed, 1);
        assert_eq!(
            parsed.lines,
            vec![
                CriLogLine {
                    timestamp: ts("2006-01-02T15:04:05.2Z"),
                    stream: LogStream::Stderr,
                    content: b"oops".to_vec(),
                    complete: true,
                },
                CriLogLine {
                    timestamp: ts("2006-01-02T15:04:05.1Z"),
                    stream: LogStream::Stdout,
                    content: b"hello world".to_vec(),
                    complete: true,
                },
                CriLogLine {
                    timestamp: ts("2006-01-02T15:04:05.5Z"),
                    stream: LogStream::Stderr,
                    content: b"unfinished".to_vec(),
                    complete: false,
                },
            ]
        );
    }

    #[test]
    fn a_record_still_being_written_is_parsed() {
        let parsed =
            parse_log_bytes(b"2006-01-02T15:04:05Z stdout F a\n2006-01-02T15:04:05Z stdout F b");
        let contents: Vec<&[u8]> = parsed.lines.iter().map(|l| &l.content[..]).collect();
        assert_eq!(contents, [&b"a"[..], &b"b"[..]]);
    }

    #[test]
    fn read_log_file_names_the_missing_file() {
        let err = read_log_file(Path::new("/nonexistent/0.log")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/0.log"), "{err}");
    }

    #[test]
    fn writer_output_reads_back_as_the_original_lines() {
        use crate::logs::cri_writer::{copy_stream, RecordWriter};
        let writer = RecordWriter::new(Vec::new());
        let long = "z".repeat(40_000);
        let input = format!("first\n{long}\n\nlast without newline");
        copy_stream(input.as_bytes(), LogStream::Stdout, 16_384, &writer).unwrap();
        let parsed = parse_log_bytes(&writer.into_sink());
        assert_eq!(parsed.malformed, 0);
        let lines: Vec<(String, bool)> = parsed
            .lines
            .iter()
            .map(|l| (String::from_utf8(l.content.clone()).unwrap(), l.complete))
            .collect();
        assert_eq!(
            lines,
            [
                ("first".to_string(), true),
                (long, true),
                (String::new(), true),
                ("last without newline".to_string(), false),
            ]
        );
    }

    mod properties {
        use super::*;
        use crate::logs::cri_writer::{copy_stream, RecordWriter};
        use proptest::prelude::*;
        use std::cell::Cell;
        use std::io::Read;
        use std::time::{Duration, SystemTime, UNIX_EPOCH};

        thread_local! {
            /// The writer takes its clock as a plain fn: the property hands it the time here.
            static NOW: Cell<SystemTime> = const { Cell::new(UNIX_EPOCH) };
        }

        fn now() -> SystemTime {
            NOW.with(Cell::get)
        }

        /// Up to 9999-12-31T23:59:59.999999999Z, the last time the writer prints in full.
        fn time() -> impl Strategy<Value = SystemTime> {
            (0u64..253_402_300_800, 0u32..1_000_000_000)
                .prop_map(|(s, n)| UNIX_EPOCH + Duration::new(s, n))
        }

        fn stream() -> impl Strategy<Value = LogStream> {
            prop_oneof![Just(LogStream::Stdout), Just(LogStream::Stderr)]
        }

        /// Hands out its data in the given read sizes, so lines cross read boundaries.
        struct Chunked<'a> {
            data: &'a [u8],
            sizes: Vec<usize>,
        }

        impl Read for Chunked<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let step = self.sizes.pop().unwrap_or(usize::MAX).max(1);
                let n = step.min(self.data.len()).min(buf.len());
                buf[..n].copy_from_slice(&self.data[..n]);
                self.data = &self.data[n..];
                Ok(n)
            }
        }

        /// The container's output, with newlines, carriage returns and the record's own
        /// separators over-represented.
        fn output() -> impl Strategy<Value = Vec<u8>> {
            prop::collection::vec(
                prop_oneof![
                    3 => any::<u8>(),
                    1 => prop::sample::select(vec![b'\n', b'\r', b' ', b'P', b'F']),
                ],
                0..200,
            )
        }

        proptest! {
            #![proptest_config(crate::test_support::proptest_config(512))]

            #[test]
            fn any_bytes_parse_or_err(data in prop::collection::vec(any::<u8>(), 0..300)) {
                let _ = parse_cri_line(&data);
                let parsed = parse_log_bytes(&data);
                let records = data.split_inclusive(|&b| b == b'\n').count();
                prop_assert!(parsed.lines.len() + parsed.malformed <= records);
            }

            #[test]
            fn record_shaped_lines_parse_or_err(
                time in "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,12})?(Z|[+-][0-9]{2}:[0-9]{2})",
                stream in "stdout|stderr|stdin|",
                tags in "[PF:x]{0,4}",
                content in ".{0,20}",
            ) {
                let line = format!("{time} {stream} {tags} {content}");
                if let Ok(r) = parse_cri_line(line.as_bytes()) {
                    prop_assert_eq!(r.partial, tags.split(':').next() == Some("P"));
                    prop_assert_eq!(r.content, content.as_bytes());
                }
            }

            /// What the writer writes, the reader reads back: time, stream, tag and content.
            #[test]
            fn a_written_record_reads_back(
                at in time(),
                stream in stream(),
                partial in any::<bool>(),
                content in prop::collection::vec(any::<u8>().prop_filter("no newline", |b| *b != b'\n'), 0..100),
            ) {
                NOW.with(|n| n.set(at));
                let writer = RecordWriter::with_clock(Vec::new(), now);
                writer.write_record(stream, partial, &[&content]).unwrap();
                let written = writer.into_sink();
                let r = parse_cri_line(&written).unwrap();
                prop_assert_eq!(SystemTime::from(r.timestamp), at);
                prop_assert_eq!(r.stream, stream);
                prop_assert_eq!(r.partial, partial);
                prop_assert_eq!(r.content, &content[..]);
            }

            /// Any output copied into records, split at any line limit and read in any
            /// sizes, is read back as its lines: newline-ended ones complete (a CR before
            /// the newline dropped), an unended rest incomplete.
            #[test]
            fn copied_output_reads_back_as_its_lines(
                data in output(),
                max_line in prop_oneof![Just(0usize), 1usize..12],
                sizes in prop::collection::vec(1usize..40, 0..20),
            ) {
                let writer = RecordWriter::with_clock(Vec::new(), now);
                let input = Chunked { data: &data, sizes };
                copy_stream(input, LogStream::Stderr, max_line, &writer).unwrap();
                let parsed = parse_log_bytes(&writer.into_sink());
                prop_assert_eq!(parsed.malformed, 0);
                let mut want: Vec<(Vec<u8>, bool)> = Vec::new();
                let mut segments: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
                let rest = segments.pop().unwrap_or_default();
                for line in segments {
                    want.push((line.strip_suffix(b"\r").unwrap_or(line).to_vec(), true));
                }
                if !rest.is_empty() {
                    want.push((rest.to_vec(), false));
                }
                let got: Vec<(Vec<u8>, bool)> =
                    parsed.lines.into_iter().map(|l| (l.content, l.complete)).collect();
                prop_assert_eq!(got, want);
            }
        }
    }
}
