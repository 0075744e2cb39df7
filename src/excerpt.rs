//! Text cut to a length for people to read: a dashboard cell, a terminal
//! column, a chat message that has a limit.

/// `text` if it has at most `max` characters; otherwise its first
/// `max - 1` and `…`, so the result is never longer than `max` and the cut
/// shows. Counts characters, never splitting one.
pub fn excerpt(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        text.chars()
            .take(max.saturating_sub(1))
            .chain(['…'])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_keeps_whole_characters_and_shows() {
        assert_eq!(excerpt("short", 5), "short");
        assert_eq!(excerpt("longer", 5), "long…");
        assert_eq!(excerpt("ééééé é", 4), "ééé…");
        assert_eq!(excerpt("", 3), "");
    }
}
