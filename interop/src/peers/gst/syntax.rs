//! A recursive-descent reader for caps text. It works on bytes (every piece of caps syntax
//! is ASCII), never indexes past the end, and bounds its recursion by [`MAX_NESTING`].

use super::caps::{Caps, CapsStructure, Field, Value, ValueBody};
use super::{GstError, MAX_CAPS_LEN, MAX_CAPS_STRUCTURES, MAX_LIST_LEN, MAX_NESTING};

pub(super) struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

/// Characters GStreamer allows in an unquoted string (`GST_ASCII_IS_STRING`).
fn is_bare(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'+' | b'/' | b':' | b'.')
}

/// Characters of structure and field names. `:` is left out so that the gst-inspect form's
/// `name: value` can be told apart; no real field or media type uses it.
fn is_name(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'+' | b'/' | b'.')
}

fn is_feature(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b':' | b'.')
}

fn closer(open: u8) -> u8 {
    match open {
        b'{' => b'}',
        b'[' => b']',
        b'<' => b'>',
        _ => b')',
    }
}

impl<'a> Parser<'a> {
    pub(super) fn new(text: &'a str) -> Result<Self, GstError> {
        if text.len() > MAX_CAPS_LEN {
            return Err(GstError::TooLong { len: text.len(), max: MAX_CAPS_LEN });
        }
        Ok(Parser { text, bytes: text.as_bytes(), pos: 0 })
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<u8> {
        self.bytes.get(self.pos.checked_add(ahead)?).copied()
    }

    /// The character at the cursor, for messages (whole UTF-8 characters, not bytes).
    fn char_here(&self) -> char {
        self.text.get(self.pos..).and_then(|s| s.chars().next()).unwrap_or('?')
    }

    fn unexpected(&self, expected: &'static str) -> GstError {
        match self.peek() {
            None => GstError::UnexpectedEnd { at: self.pos, expected },
            Some(b @ (b'}' | b']' | b'>' | b')')) => GstError::UnmatchedClose { at: self.pos, found: b as char },
            Some(_) => GstError::UnexpectedChar { at: self.pos, found: self.char_here(), expected },
        }
    }

    /// Skips blanks and `\`-blank line continuations; says whether it skipped anything.
    fn blanks(&mut self) -> bool {
        let start = self.pos;
        loop {
            match self.peek() {
                Some(b) if b.is_ascii_whitespace() => self.pos += 1,
                Some(b'\\') if self.peek_at(1).is_some_and(|b| b.is_ascii_whitespace()) => self.pos += 2,
                _ => break,
            }
        }
        self.pos != start
    }

    fn take_while(&mut self, keep: impl Fn(u8) -> bool) -> &'a str {
        let start = self.pos;
        while self.peek().is_some_and(&keep) {
            self.pos += 1;
        }
        // Only ASCII bytes were taken, so both ends are character boundaries.
        self.text.get(start..self.pos).unwrap_or("")
    }

    fn name(&mut self, expected: &'static str) -> Result<String, GstError> {
        if !self.peek().is_some_and(|b| b.is_ascii_alphabetic()) {
            return Err(self.unexpected(expected));
        }
        Ok(self.take_while(is_name).to_owned())
    }

    /// One value and nothing after it.
    pub(super) fn lone_value(mut self) -> Result<Value, GstError> {
        let v = self.value(0)?;
        self.blanks();
        match self.peek() {
            None => Ok(v),
            Some(_) => Err(self.unexpected("the end of the value")),
        }
    }

    pub(super) fn caps(mut self) -> Result<Caps, GstError> {
        self.blanks();
        let rest = self.text.get(self.pos..).unwrap_or("").trim_end();
        match rest {
            "" => return Err(GstError::EmptyCaps),
            "ANY" => return Ok(Caps::any()),
            "EMPTY" | "NONE" => return Ok(Caps::from_parts(false, Vec::new())),
            _ => {}
        }
        let mut structures = Vec::new();
        loop {
            if structures.len() >= MAX_CAPS_STRUCTURES {
                return Err(GstError::TooManyStructures { max: MAX_CAPS_STRUCTURES });
            }
            structures.push(self.structure()?);
            self.blanks();
            match self.peek() {
                None => break,
                Some(b';') => {
                    self.pos += 1;
                    self.blanks();
                    if self.peek().is_none() {
                        break;
                    }
                }
                // gst-inspect puts structures on their own lines with nothing in between.
                Some(b) if b.is_ascii_alphabetic() => {}
                Some(_) => return Err(self.unexpected("`;` or the end of the caps")),
            }
        }
        Ok(Caps::from_parts(false, structures))
    }

    fn structure(&mut self) -> Result<CapsStructure, GstError> {
        let name = self.name("a media type such as video/x-raw")?;
        // `ANY` alone is the ANY caps; as a structure name it would not print back as one.
        if matches!(name.as_str(), "ANY" | "EMPTY" | "NONE") {
            return Err(GstError::ReservedStructureName { name });
        }
        let features = if self.peek() == Some(b'(') { Some(self.features()?) } else { None };
        let mut fields = Vec::new();
        self.blanks();
        match self.peek() {
            Some(b',') => {
                while self.peek() == Some(b',') {
                    self.pos += 1;
                    self.blanks();
                    let field = self.name("a field name")?;
                    self.blanks();
                    if self.peek() != Some(b'=') {
                        return Err(self.unexpected("`=` after the field name"));
                    }
                    self.pos += 1;
                    let value = self.value(0)?;
                    fields.push(Field { name: field, value });
                    self.blanks();
                }
            }
            Some(b) if b.is_ascii_alphabetic() => {
                // gst-inspect form: `name: value` separated by blanks, until something that
                // is not `name:` + blank (the next structure) or the end.
                while self.inspect_field_ahead() {
                    let field = self.name("a field name")?;
                    self.pos += 1; // the ':'
                    let value = self.value(0)?;
                    fields.push(Field { name: field, value });
                    self.blanks();
                }
            }
            _ => {}
        }
        CapsStructure::new(name, features, fields)
    }

    fn inspect_field_ahead(&self) -> bool {
        if !self.peek().is_some_and(|b| b.is_ascii_alphabetic()) {
            return false;
        }
        let mut i = self.pos;
        while self.bytes.get(i).is_some_and(|&b| is_name(b)) {
            i += 1;
        }
        self.bytes.get(i) == Some(&b':') && self.bytes.get(i + 1).is_some_and(|b| b.is_ascii_whitespace())
    }

    fn features(&mut self) -> Result<Vec<String>, GstError> {
        let open_at = self.pos;
        self.pos += 1;
        let mut features = Vec::new();
        loop {
            self.blanks();
            let f = self.take_while(is_feature);
            if f.is_empty() {
                return Err(match self.peek() {
                    None => GstError::Unclosed { at: open_at, open: '(' },
                    _ => self.unexpected("a caps feature such as memory:DMABuf"),
                });
            }
            features.push(f.to_owned());
            self.blanks();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b')') => {
                    self.pos += 1;
                    return Ok(features);
                }
                None => return Err(GstError::Unclosed { at: open_at, open: '(' }),
                Some(_) => return Err(self.unexpected("`,` or `)` in the caps features")),
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, GstError> {
        if depth > MAX_NESTING {
            return Err(GstError::TooDeep { at: self.pos, max: MAX_NESTING });
        }
        self.blanks();
        let tag = if self.peek() == Some(b'(') { Some(self.tag()?) } else { None };
        self.blanks();
        let body = match self.peek() {
            Some(open @ (b'{' | b'[' | b'<')) => {
                let at = self.pos;
                let items = self.sequence(open, depth)?;
                match open {
                    b'{' => ValueBody::List(items),
                    b'<' => ValueBody::Array(items),
                    _ if items.len() == 2 || items.len() == 3 => ValueBody::Range(items),
                    _ => return Err(GstError::RangeArity { at, count: items.len() }),
                }
            }
            Some(b'"') => ValueBody::Scalar { text: self.quoted()?, quoted: true },
            Some(b) if is_bare(b) => ValueBody::Scalar { text: self.take_while(is_bare).to_owned(), quoted: false },
            _ => return Err(self.unexpected("a value")),
        };
        Ok(Value { tag, body })
    }

    fn tag(&mut self) -> Result<String, GstError> {
        let open_at = self.pos;
        self.pos += 1;
        self.blanks();
        let tag = self.take_while(|b| b.is_ascii_alphanumeric() || b == b'_').to_owned();
        if tag.is_empty() {
            return Err(self.unexpected("a type name such as string or int"));
        }
        self.blanks();
        match self.peek() {
            Some(b')') => {
                self.pos += 1;
                Ok(tag)
            }
            None => Err(GstError::Unclosed { at: open_at, open: '(' }),
            Some(_) => Err(self.unexpected("`)` after the type name")),
        }
    }

    fn sequence(&mut self, open: u8, depth: usize) -> Result<Vec<Value>, GstError> {
        let open_at = self.pos;
        let close = closer(open);
        self.pos += 1;
        let mut items = Vec::new();
        self.blanks();
        if self.peek() == Some(close) {
            self.pos += 1;
            return Ok(items);
        }
        loop {
            if self.peek().is_none() {
                return Err(GstError::Unclosed { at: open_at, open: open as char });
            }
            if items.len() >= MAX_LIST_LEN {
                return Err(GstError::ListTooLong { at: open_at, max: MAX_LIST_LEN });
            }
            items.push(self.value(depth + 1)?);
            self.blanks();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b) if b == close => {
                    self.pos += 1;
                    return Ok(items);
                }
                None => return Err(GstError::Unclosed { at: open_at, open: open as char }),
                Some(b @ (b'}' | b']' | b'>' | b')')) => {
                    return Err(GstError::MismatchedClose {
                        open_at,
                        open: open as char,
                        at: self.pos,
                        found: b as char,
                    })
                }
                Some(_) => return Err(self.unexpected("`,` or the end of the list")),
            }
        }
    }

    /// A `"..."` string; a backslash takes the next character literally.
    fn quoted(&mut self) -> Result<String, GstError> {
        let open_at = self.pos;
        self.pos += 1;
        let start = self.pos;
        let mut out = String::new();
        let mut chunk_start = start;
        loop {
            match self.peek() {
                None => return Err(GstError::UnterminatedString { at: open_at }),
                Some(b'"') => {
                    out.push_str(self.text.get(chunk_start..self.pos).unwrap_or(""));
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    out.push_str(self.text.get(chunk_start..self.pos).unwrap_or(""));
                    self.pos += 1;
                    let Some(c) = self.text.get(self.pos..).and_then(|s| s.chars().next()) else {
                        return Err(GstError::UnterminatedString { at: open_at });
                    };
                    out.push(c);
                    self.pos += c.len_utf8();
                    chunk_start = self.pos;
                }
                // Multi-byte characters pass through; the cursor only stops on ASCII bytes,
                // which are always character boundaries.
                Some(_) => self.pos += 1,
            }
        }
    }
}

impl Caps {
    /// Parses a caps string in either of GStreamer's two spellings: the serialized form
    /// (`video/x-raw(memory:DMABuf), drm-format=(string){ ... }, width=(int)[ 1, 10 ]`,
    /// structures separated by `;`) or the `gst-inspect-1.0` form the seed's templates use
    /// (`video/x-raw(memory:DMABuf) width: [ 16, 16384 ] drm-format: { (string)NV12, ... }`).
    /// A backslash followed by a blank is a line continuation and counts as a blank, because
    /// that is how the seed (and shell-quoted pipelines) write long caps.
    pub fn parse(text: &str) -> Result<Caps, GstError> {
        Parser::new(text)?.caps()
    }
}

