//! Text cut to a length: for people to read ([`chars`]: a dashboard cell, a
//! terminal column, a chat message that has a limit), or for an error
//! column ([`bytes()`]: a response body or a command's stderr, in at most
//! [`BYTES_MAX`] bytes).

/// `text` if it has at most `max` characters; otherwise its first
/// `max - 1` and `…`, so the result is never longer than `max` and the cut
/// shows. Counts characters, never splitting one.
pub fn chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        text.chars()
            .take(max.saturating_sub(1))
            .chain(['…'])
            .collect()
    }
}

/// The most bytes an error excerpt keeps (response body, stderr).
pub const BYTES_MAX: usize = 1024;

/// `bytes` as text for an error column: invalid UTF-8 replaced, and cut on a
/// character boundary with `…` so the result is at most [`BYTES_MAX`]
/// bytes long.
pub fn bytes(bytes: &[u8]) -> String {
    const ELLIPSIS: &str = "…";
    // Enough input to fill the excerpt; a character split at this cut turns
    // into U+FFFD past BYTES_MAX, where it is cut off below.
    let head = &bytes[..bytes.len().min(BYTES_MAX + 4)];
    let mut text = String::from_utf8_lossy(head).into_owned();
    if text.len() > BYTES_MAX || bytes.len() > head.len() {
        let mut cut = BYTES_MAX - ELLIPSIS.len();
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str(ELLIPSIS);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_keeps_whole_characters_and_shows() {
        assert_eq!(chars("short", 5), "short");
        assert_eq!(chars("longer", 5), "long…");
        assert_eq!(chars("ééééé é", 4), "ééé…");
        assert_eq!(chars("", 3), "");
    }

    #[test]
    fn short_text_is_kept_as_is_and_invalid_utf8_replaced() {
        assert_eq!(bytes(b"boom"), "boom");
        assert_eq!(bytes(b""), "");
        assert_eq!(bytes(b"a\xffb"), "a\u{fffd}b");
        let exact = "x".repeat(BYTES_MAX);
        assert_eq!(bytes(exact.as_bytes()), exact);
    }

    #[test]
    fn long_text_is_cut_on_a_char_boundary_within_the_bound() {
        let long = "é".repeat(BYTES_MAX);
        let e = bytes(long.as_bytes());
        assert!(e.len() <= BYTES_MAX, "{}", e.len());
        assert!(e.ends_with('…'));
        assert!(e.trim_end_matches('…').chars().all(|c| c == 'é'));

        let big = vec![b'z'; 1 << 20];
        let e = bytes(&big);
        assert!(e.len() <= BYTES_MAX && e.len() > BYTES_MAX - 8);
        // Invalid bytes grow threefold when replaced; still bounded.
        let e = bytes(&vec![0xff; BYTES_MAX]);
        assert!(e.len() <= BYTES_MAX && e.ends_with('…'));
    }
}
