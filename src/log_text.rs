//! Text that came from a request, made safe to put in a log line.
//!
//! A request can carry anything in a path segment, a header or a JSON
//! string: a newline that starts a forged log line, an ESC that recolours
//! the operator's terminal, a bidi override that reorders what is shown,
//! or 30 KB that multiplies the log's size. [`escaped`] writes such text
//! with every control character escaped and its length capped, in the text
//! log and the JSON log alike. This module imports nothing of the product.

use std::fmt::{self, Display, Formatter, Write};

/// The longest escaped text written for one field; the rest is counted.
pub const MAX_LOGGED_CHARS: usize = 256;

/// Writes `text` escaped and capped; see the module's description.
pub fn escaped(text: &str) -> Escaped<'_> {
    Escaped(text)
}

/// [`escaped`]'s `Display`: characters that could break or disguise a line
/// are written as `\u{..}` (a backslash as `\\`, so that the escape is
/// unambiguous), and past [`MAX_LOGGED_CHARS`] written characters the rest
/// becomes `…(+N bytes)`, N counting the input's bytes left out.
#[derive(Clone, Copy)]
pub struct Escaped<'a>(&'a str);

impl Display for Escaped<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        // Most fields (endpoint names, delivery ids, event types) are short
        // printable ASCII with nothing to escape: written at once rather
        // than a character at a time, which showed in every request's cost.
        if self.0.len() <= MAX_LOGGED_CHARS
            && self
                .0
                .bytes()
                .all(|b| (b' '..=b'~').contains(&b) && b != b'\\')
        {
            return f.write_str(self.0);
        }
        let mut written = 0;
        for (at, c) in self.0.char_indices() {
            let unsafe_char = is_unsafe(c);
            let width = match c {
                '\\' => 2,
                _ if unsafe_char => "\\u{}".len() + hex_digits(c),
                _ => 1,
            };
            if written + width > MAX_LOGGED_CHARS {
                return write!(f, "…(+{} bytes)", self.0.len() - at);
            }
            written += width;
            match c {
                '\\' => f.write_str("\\\\")?,
                _ if unsafe_char => write!(f, "\\u{{{:x}}}", c as u32)?,
                _ => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Escaped<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

/// C0 controls (newline, carriage return, ESC...), DEL, C1 controls, the
/// Unicode line and paragraph separators, and the bidi marks, embeddings,
/// overrides and isolates: each can end a line, or change how the rest of
/// it is shown.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' // line, paragraph separator
                | '\u{061c}' | '\u{200e}' | '\u{200f}' // bidi marks
                | '\u{202a}'..='\u{202e}' // embeddings, overrides
                | '\u{2066}'..='\u{2069}' // isolates
        )
}

/// How many hexadecimal digits `c`'s code point takes (at least one).
fn hex_digits(c: char) -> usize {
    let bits = 32 - (c as u32).leading_zeros() as usize;
    bits.div_ceil(4).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(text: &str) -> String {
        escaped(text).to_string()
    }

    #[test]
    fn plain_text_is_written_as_it_is() {
        assert_eq!(show("shop"), "shop");
        assert_eq!(show("café ünïcode 支付"), "café ünïcode 支付");
        assert_eq!(show(""), "");
    }

    #[test]
    fn a_forged_line_and_an_escape_sequence_stay_on_one_line() {
        let forged = "x\n2026-12-01T00:00:00.000000Z  INFO admin logged in\u{1b}[31m";
        assert_eq!(
            show(forged),
            "x\\u{a}2026-12-01T00:00:00.000000Z  INFO admin logged in\\u{1b}[31m"
        );
    }

    #[test]
    fn every_control_separator_and_bidi_character_is_escaped() {
        for c in [
            '\0', '\r', '\t', '\u{7f}', '\u{85}', '\u{9b}', '\u{2028}', '\u{2029}',
        ]
        .into_iter()
        .chain(['\u{202e}', '\u{2066}', '\u{2069}', '\u{200f}', '\u{61c}'])
        {
            let shown = show(&format!("a{c}b"));
            assert_eq!(shown, format!("a\\u{{{:x}}}b", c as u32));
        }
        assert_eq!(show("a\\u{a}"), "a\\\\u{a}", "a backslash is escaped too");
    }

    #[test]
    fn long_text_is_cut_with_the_count_of_bytes_left_out() {
        let long = "a".repeat(30_000);
        let shown = show(&long);
        assert_eq!(
            shown,
            format!(
                "{}…(+{} bytes)",
                "a".repeat(MAX_LOGGED_CHARS),
                30_000 - MAX_LOGGED_CHARS
            )
        );
        // Escapes count towards the cap: 30 KB of newlines stay short too.
        let newlines = show(&"\n".repeat(30_000));
        assert!(newlines.len() < MAX_LOGGED_CHARS + 20, "{}", newlines.len());
        assert!(!newlines.contains('\n'));
        assert_eq!(
            show(&"a".repeat(MAX_LOGGED_CHARS)),
            "a".repeat(MAX_LOGGED_CHARS)
        );
    }
}
