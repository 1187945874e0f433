//! Text that came off the wire, made safe for one line of a log or one header.

use std::borrow::Cow;

/// Whether `c` can end a line or hide text: every control character (CR, LF, tab, NUL, DEL,
/// the C1 range with NEL) and the Unicode line and paragraph separators.
fn breaks_lines(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// `text` with the characters that could end a line written as Rust escapes (`\r`, `\n`,
/// `\u{85}`): a message id, a subject or an error that quotes a body cannot end a log line and
/// forge the next one, or end a header and start another. Borrowed when there is nothing to
/// escape.
pub(crate) fn one_line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(breaks_lines) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if breaks_lines(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::one_line;
    use std::borrow::Cow;

    #[test]
    fn line_breaks_and_controls_are_escaped() {
        assert_eq!(
            one_line("m-1\r\n2026-12-04 WARN forged"),
            "m-1\\r\\n2026-12-04 WARN forged"
        );
        assert_eq!(
            one_line("tab\there\u{0}\u{7f}\u{85}\u{2028}\u{2029}"),
            "tab\\there\\u{0}\\u{7f}\\u{85}\\u{2028}\\u{2029}"
        );
        assert!(matches!(
            one_line("plain é id"),
            Cow::Borrowed("plain é id")
        ));
        assert_eq!(one_line(""), "");
    }
}
