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
}
