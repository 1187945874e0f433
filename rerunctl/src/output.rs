//! What the commands print: JSON documents, aligned columns, and text made safe for a terminal.

use std::borrow::Cow;
use std::io::Write as _;
use std::time::Duration;

use rerun_core::holder::Liveness;
use rerun_core::{CorruptKind, Holder, RecordView, Status};
use serde::Serialize;
use unicode_width::UnicodeWidthStr as _;

use crate::failure::Failure;

/// `text` with control, line-separating and bidirectional-formatting characters escaped
/// (`\n`, `\u{202e}`), so that nothing a store holds can move the cursor, clear the screen or
/// reorder a line (see [`rerun_core::printable::escaped`]).
pub use rerun_core::printable::escaped as terminal_safe;

/// Writes one JSON document (pretty-printed, with a final newline) on stdout.
pub fn print_json<T: Serialize + ?Sized>(doc: &T) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, doc).map_err(|e| match e.io_error_kind() {
        Some(kind) => Failure::from(std::io::Error::from(kind)),
        None => Failure::usage(format!("writing the JSON document failed: {e}")),
    })?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

/// Writes text on stdout as it is.
pub fn print_text(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Writes a note for people on stderr (never for scripts: no JSON there).
pub fn note(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{}", terminal_safe(text));
}

/// A scope as printed: as itself (a valid scope has no control character, so it can be typed
/// back), escaped where a store holds one that is not valid.
pub fn scope(scope: &str) -> Cow<'_, str> {
    terminal_safe(scope)
}

/// `word` as one shell word: as itself when it holds nothing a shell reads specially,
/// otherwise in single quotes.
pub fn shell_word(word: &str) -> Cow<'_, str> {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.:@/+=,-%".contains(c));
    if plain {
        Cow::Borrowed(word)
    } else {
        Cow::Owned(format!("'{}'", word.replace('\'', r"'\''")))
    }
}

/// `text` cut after `max` characters, with `…` marking the cut.
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => Cow::Borrowed(text),
        Some((at, _)) => Cow::Owned(format!("{}…", &text[..at])),
    }
}

/// A duration as people read it: `250ms`, `1.5s`, `42s`, `2m 5s`, `3h 10m`, `7d 2h`.
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    if ms < 10_000 {
        let tenths = (ms + 50) / 100;
        return if tenths % 10 == 0 {
            format!("{}s", tenths / 10)
        } else {
            format!("{}.{}s", tenths / 10, tenths % 10)
        };
    }
    let s = (ms + 500) / 1_000;
    let (d, h, m, s) = (s / 86_400, (s % 86_400) / 3_600, (s % 3_600) / 60, s % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) if s == 0 => format!("{m}m"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, 0) => format!("{h}h"),
        (0, _, _) => format!("{h}h {m}m"),
        (_, 0, _) => format!("{d}d"),
        _ => format!("{d}d {h}h"),
    }
}

/// Milliseconds, for JSON.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A holder as one short phrase: `pid 4242 on web-1`.
pub fn holder_short(h: &Holder) -> String {
    format!("pid {} on {}", h.pid, terminal_safe(&h.host))
}

/// The word for a liveness: `alive`, `dead`, `unknown`.
pub fn liveness_word(l: Liveness) -> &'static str {
    match l {
        Liveness::Alive => "alive",
        Liveness::Dead => "dead",
        Liveness::Unknown => "unknown",
    }
}

/// A status as rerunctl prints it, in the spelling `--status` takes: `in-progress`,
/// `completed`, `unknown` or `released` (`--status` also takes `in_progress`).
pub fn status_word(status: Status) -> &'static str {
    match status {
        Status::InProgress => "in-progress",
        Status::Completed => "completed",
        Status::Unknown => "unknown",
        Status::Released => "released",
    }
}

/// Whether a record is a live claim: in progress, its lease running, its holder not provably
/// dead. Such a claim is never recovered, and is forgotten only with `--force`.
pub fn is_live_claim(r: &RecordView) -> bool {
    r.status == Status::InProgress
        && r.lease_remaining.is_some()
        && r.holder.as_ref().map(Holder::liveness) != Some(Liveness::Dead)
}

/// A holder in JSON.
#[derive(Debug, Serialize)]
pub struct HolderJson {
    /// Host name (proves nothing about liveness).
    pub host: String,
    /// Process id, in the holder's PID namespace.
    pub pid: u32,
    /// The kernel's boot id.
    pub boot_id: String,
    /// Inode of the holder's PID namespace.
    pub pid_ns: u64,
    /// Process start time in clock ticks since boot.
    pub start_time: u64,
    /// The attempt id within the process.
    pub attempt: u64,
}

impl From<&Holder> for HolderJson {
    fn from(h: &Holder) -> HolderJson {
        HolderJson {
            host: h.host.to_string(),
            pid: h.pid,
            boot_id: h.boot_id.to_string(),
            pid_ns: h.pid_ns,
            start_time: h.start_time,
            attempt: h.attempt,
        }
    }
}

/// A record in JSON: the fields `ls`, `show` and `stats` share.
#[derive(Debug, Serialize)]
pub struct RecordJson {
    /// The scope.
    pub scope: String,
    /// The key, in the form the commands take back.
    pub key: String,
    /// `in-progress`, `completed`, `released` or `unknown` ([`status_word`]).
    pub status: &'static str,
    /// The fencing token of the latest claim.
    pub fence: u64,
    /// Whether the latest claim was of an at-most-once function.
    pub once: bool,
    /// Milliseconds since the record last changed state; `null` where the store does not know.
    pub age_ms: Option<u64>,
    /// The holder of the latest claim (in progress and unknown records).
    pub holder: Option<HolderJson>,
    /// `alive`, `dead` or `unknown` (not provable from here); `null` without a holder.
    pub holder_alive: Option<&'static str>,
    /// Whether this is a live claim: in progress, lease running, holder not provably dead.
    pub live: bool,
    /// In progress: milliseconds the lease still runs; `null` once it ran out.
    pub lease_remaining_ms: Option<u64>,
    /// Completed: milliseconds until it expires; `null` once it expired.
    pub expires_in_ms: Option<u64>,
}

impl From<&RecordView> for RecordJson {
    fn from(r: &RecordView) -> RecordJson {
        RecordJson {
            scope: r.key.scope().to_owned(),
            key: r.key.readable_id(),
            status: status_word(r.status),
            fence: r.fence,
            once: r.once,
            age_ms: r.age.map(millis),
            holder: r.holder.as_ref().map(HolderJson::from),
            holder_alive: r.holder.as_ref().map(|h| liveness_word(h.liveness())),
            live: is_live_claim(r),
            lease_remaining_ms: r.lease_remaining.map(millis),
            expires_in_ms: r.expires_in.map(millis),
        }
    }
}

/// Why a result cannot be read back, in JSON.
#[derive(Debug, Serialize)]
pub struct CorruptJson {
    /// `truncated`, `checksum`, `unknown_version` (written by a newer rerun), `decode`,
    /// `record`, `foreign_key` (a key rerun did not write), or `other`.
    pub kind: &'static str,
    /// What is wrong, in words.
    pub message: String,
}

impl From<&CorruptKind> for CorruptJson {
    fn from(kind: &CorruptKind) -> CorruptJson {
        CorruptJson {
            kind: match kind {
                CorruptKind::Truncated => "truncated",
                CorruptKind::Checksum => "checksum",
                CorruptKind::UnknownVersion { .. } => "unknown_version",
                CorruptKind::Decode(_) => "decode",
                CorruptKind::Record(_) => "record",
                CorruptKind::ForeignKey(_) => "foreign_key",
                _ => "other",
            },
            message: kind.to_string(),
        }
    }
}

/// A recorded result in JSON.
#[derive(Debug, Serialize)]
pub struct ResultJson {
    /// Its size as stored, in bytes.
    pub bytes: usize,
    /// Rendered readably (`Receipt { id: "ch_1", cents: 500 }`); `null` when corrupt.
    pub rendered: Option<String>,
    /// Whether `rendered` was cut short (ending in `…`): `ls` cuts, `show` never does.
    pub cut: bool,
    /// Why it cannot be read back; `null` when it can.
    pub corrupt: Option<CorruptJson>,
}

impl ResultJson {
    /// Renders `bytes` whole, or cut after `max` characters.
    pub fn render(bytes: &[u8], max: Option<usize>) -> (ResultJson, Option<CorruptKind>) {
        let rendered = match max {
            Some(max) => rerun_core::codec::render_limited(bytes, max),
            None => rerun_core::codec::render(bytes),
        };
        match rendered {
            Ok(text) => {
                let cut = max.is_some_and(|max| text.ends_with('…') && text.chars().count() > max);
                let json = ResultJson {
                    bytes: bytes.len(),
                    rendered: Some(text),
                    cut,
                    corrupt: None,
                };
                (json, None)
            }
            Err(kind) => {
                let json = ResultJson {
                    bytes: bytes.len(),
                    rendered: None,
                    cut: false,
                    corrupt: Some(CorruptJson::from(&kind)),
                };
                (json, Some(kind))
            }
        }
    }

    /// The result as one terminal-safe line of text.
    pub fn human(&self) -> String {
        match (&self.rendered, &self.corrupt) {
            (Some(text), _) => terminal_safe(text).into_owned(),
            (None, Some(c)) => format!("<corrupt: {}>", terminal_safe(&c.message)),
            (None, None) => "-".to_owned(),
        }
    }
}

/// Aligned columns, two spaces apart, one row a line: greppable, and a key is never wrapped,
/// so it can be copied back into a command.
#[derive(Debug)]
pub struct Table {
    headers: Vec<&'static str>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns; `right` aligns numbers.
    pub fn new(columns: &[(&'static str, bool)]) -> Table {
        Table {
            headers: columns.iter().map(|(h, _)| *h).collect(),
            right: columns.iter().map(|(_, r)| *r).collect(),
            rows: Vec::new(),
        }
    }
    /// Adds a row (its cells already terminal-safe).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }
    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
    /// The table as text, a newline after each line.
    pub fn render(&self) -> String {
        let n = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.width()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.width());
            }
        }
        let mut out = String::new();
        let header: Vec<String> = self.headers.iter().map(|h| (*h).to_owned()).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate().take(n) {
                let pad = widths[i].saturating_sub(cell.width());
                let last = i + 1 == n;
                if i > 0 {
                    line.push_str("  ");
                }
                if self.right[i] {
                    line.extend(std::iter::repeat_n(' ', pad));
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    if !last {
                        line.extend(std::iter::repeat_n(' ', pad));
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_raw_reaches_the_terminal() {
        assert_eq!(terminal_safe("billing.charge"), "billing.charge");
        assert_eq!(terminal_safe("a\nb\u{1b}[2J"), r"a\nb\u{1b}[2J");
        assert_eq!(terminal_safe("x\u{202e}y"), r"x\u{202e}y");
    }

    #[test]
    fn shell_words_are_quoted_when_needed() {
        assert_eq!(shell_word("evt_42"), "evt_42");
        assert_eq!(shell_word("\"42\""), "'\"42\"'");
        assert_eq!(shell_word("(a, 1)"), "'(a, 1)'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn statuses_are_spelled_as_the_status_flag_takes_them() {
        assert_eq!(status_word(Status::InProgress), "in-progress");
        assert_eq!(status_word(Status::Completed), "completed");
        assert_eq!(status_word(Status::Unknown), "unknown");
        assert_eq!(status_word(Status::Released), "released");
    }

    #[test]
    fn cuts_are_marked() {
        assert_eq!(cut("abcdef", 3), "abc…");
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("ééé", 2), "éé…");
    }

    #[test]
    fn durations_read_rounded() {
        let cases = [
            (Duration::from_millis(250), "250ms"),
            (Duration::from_millis(1_460), "1.5s"),
            (Duration::from_secs(42), "42s"),
            (Duration::from_secs(125), "2m 5s"),
            (Duration::from_secs(600), "10m"),
            (Duration::from_secs(3_600), "1h"),
            (Duration::from_secs(3 * 3_600 + 620), "3h 10m"),
            (Duration::from_secs(7 * 86_400), "7d"),
            (Duration::from_secs(7 * 86_400 + 7_300), "7d 2h"),
            (Duration::MAX, "213503982334601d 7h"),
        ];
        for (d, want) in cases {
            assert_eq!(duration(d), want, "{d:?}");
        }
    }

    #[test]
    fn columns_align_by_display_width() {
        let mut t = Table::new(&[("SCOPE", false), ("N", true), ("KEY", false)]);
        t.row(vec!["a".into(), "7".into(), "k".into()]);
        t.row(vec!["日本".into(), "123".into(), "long_key".into()]);
        assert_eq!(
            t.render(),
            "SCOPE    N  KEY\na        7  k\n日本   123  long_key\n"
        );
    }
}
