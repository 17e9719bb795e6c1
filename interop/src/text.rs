//! Text that came from outside (a peer's caps, a name on the wire, a command-line value) or
//! goes out on a bounded wire, cut to a size: one place for every module that quotes input
//! in an error or writes text into a message.

/// The most characters of outside text an error message quotes.
pub const QUOTED_CHARS: usize = 64;

/// `s` as an error message quotes it: at most [`QUOTED_CHARS`] characters, with `…` where
/// it was cut, so that a hostile megabyte of input does not become a megabyte of stderr.
pub fn quoted(s: &str) -> String {
    if s.chars().count() <= QUOTED_CHARS {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(QUOTED_CHARS).collect();
        t.push('…');
        t
    }
}

/// `s` cut to at most `max` bytes at a character boundary: for text made here (reasons,
/// details) that must fit a wire's bound.
pub fn clipped(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_and_clipped_text_stay_within_their_bounds_at_character_boundaries() {
        assert_eq!(quoted("short"), "short");
        let long = "é".repeat(100);
        assert_eq!(quoted(&long).chars().count(), QUOTED_CHARS + 1);
        assert!(quoted(&long).ends_with('…'));
        assert_eq!(clipped("abc", 8), "abc");
        assert_eq!(clipped(&long, 5), "éé", "never half a character");
    }
}
