//! Text from outside the program (a store, a broker, a request) made safe to print on one line
//! of a log or a terminal.

use std::borrow::Cow;

/// Whether `c` would change how a printed line reads rather than show as itself: a control
/// character (CR, LF, tab, NUL, DEL, the C1 range with NEL), the Unicode line and paragraph
/// separators, a bidirectional formatting character, which reorders the text around it on
/// a terminal, or a character a terminal draws as nothing (a zero-width space or joiner, a
/// soft hyphen, a variation selector, a tag character: Unicode's default-ignorable code
/// points), with which two different keys would print alike.
///
/// ```
/// use rerun_core::printable::hides_text;
/// assert!(hides_text('\n') && hides_text('\u{202e}') && hides_text('\u{2028}'));
/// assert!(hides_text('\u{200b}') && hides_text('\u{feff}') && hides_text('\u{e0041}'));
/// assert!(!hides_text('é') && !hides_text(' '));
/// ```
pub fn hides_text(c: char) -> bool {
    c.is_control()
        || c == '\u{2028}'
        || c == '\u{2029}'
        || is_bidi_control(c)
        || is_default_ignorable(c)
}

/// Unicode's default-ignorable code points (`Default_Ignorable_Code_Point`): drawn as nothing
/// where a font or terminal does not know them, and as nothing where it does.
fn is_default_ignorable(c: char) -> bool {
    matches!(
        c,
        '\u{00ad}'
            | '\u{034f}'
            | '\u{115f}'..='\u{1160}'
            | '\u{17b4}'..='\u{17b5}'
            | '\u{180b}'..='\u{180f}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{fff0}'..='\u{fff8}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0000}'..='\u{e0fff}'
    )
}

/// The bidirectional formatting characters: the marks, embeddings, overrides and isolates.
fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

/// `text` with every character [`hides_text`] names written as its Rust escape (`\r`, `\n`,
/// `\t`, `\u{85}`, `\u{202e}`): a message id, a subject, a key or an error that quotes a body
/// cannot end a log line and forge the next one, end a header and start another, move a
/// terminal's cursor or reorder what a line says. Borrowed when there is nothing to escape.
///
/// ```
/// use rerun_core::printable::escaped;
/// assert_eq!(escaped("m-1\r\nWARN forged"), "m-1\\r\\nWARN forged");
/// assert_eq!(escaped("evil\u{202e}txt.exe"), "evil\\u{202e}txt.exe");
/// assert!(matches!(escaped("plain é id"), std::borrow::Cow::Borrowed(_)));
/// ```
pub fn escaped(text: &str) -> Cow<'_, str> {
    if !text.chars().any(hides_text) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hides_text(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_separators_and_bidi_are_escaped() {
        assert_eq!(
            escaped("tab\there\u{0}\u{7f}\u{85}\u{2028}\u{2029}"),
            "tab\\there\\u{0}\\u{7f}\\u{85}\\u{2028}\\u{2029}"
        );
        assert_eq!(
            escaped("\u{61c}\u{200e}\u{200f}\u{202a}\u{202e}\u{2066}\u{2069}"),
            "\\u{61c}\\u{200e}\\u{200f}\\u{202a}\\u{202e}\\u{2066}\\u{2069}"
        );
        assert_eq!(escaped(""), "");
        assert!(matches!(escaped("a \" ' \\ é"), Cow::Borrowed(_)));
    }

    /// Characters drawn as nothing: two keys that differ only in one would print alike.
    #[test]
    fn invisible_characters_are_escaped() {
        assert_eq!(escaped("order 42\u{200b}"), "order 42\\u{200b}");
        assert_eq!(
            escaped("\u{ad}\u{feff}\u{2060}\u{fe0f}\u{e0041}\u{3164}\u{180e}"),
            "\\u{ad}\\u{feff}\\u{2060}\\u{fe0f}\\u{e0041}\\u{3164}\\u{180e}"
        );
    }

    #[test]
    fn every_char_is_shown_or_escaped_and_nothing_else_changes() {
        for n in 0..=0x10ffffu32 {
            let Some(c) = char::from_u32(n) else { continue };
            let s = c.to_string();
            let out = escaped(&s);
            if hides_text(c) {
                assert_eq!(out, c.escape_default().to_string(), "{n:x}");
                assert!(!out.chars().any(hides_text), "{n:x}");
            } else {
                assert_eq!(out, s, "{n:x}");
            }
        }
    }
}
