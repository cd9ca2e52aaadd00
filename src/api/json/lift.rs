//! Large lists of numbers lifted out of a JSON body before its envelope is parsed.
//!
//! serde_json checks every byte of a value it is asked to keep as raw text, which for a
//! megabyte of numbers costs as much as reading them. So a structural pass first finds the
//! large lists of numbers where a protocol puts tensor data, and the envelope is parsed from
//! a copy of the body in which each such list is `[]`. The lists go straight to the number
//! scanner (`api/json/scan.rs`), which checks their grammar as it reads them. Which places
//! hold tensor data is each protocol's to say (`kserve/http/lift.rs`,
//! `tfserving/rest/predict/lift.rs`); this module walks the body and keeps the lists.
//!
//! This is only a faster route to the same answer: a caller takes it when the envelope
//! parses, every placeholder is claimed and every lifted list scans; on anything else it
//! decodes the original body the general way, which accepts it or words the error exactly as
//! it would have.

use serde_json::value::RawValue;

/// Lists shorter than this stay in the envelope: lifting them saves less than it costs.
pub const MIN_LIFTED_BYTES: usize = 4096;

/// What the placeholder for a lifted list reads as.
pub const PLACEHOLDER: &[u8] = b"[]";

/// A body with its large number lists replaced by placeholders.
pub struct Lifted<'a> {
    envelope: Vec<u8>,
    /// Each placeholder's offset in `envelope`, and the list it stands for in the body.
    lists: Vec<(usize, &'a str)>,
}

impl<'a> Lifted<'a> {
    /// The body with placeholders, to parse as the envelope.
    pub fn envelope(&self) -> &[u8] {
        &self.envelope
    }

    /// How many lists were lifted.
    pub fn len(&self) -> usize {
        self.lists.len()
    }

    /// The `index`th lifted list, in the body's order.
    pub fn list_at(&self, index: usize) -> Option<&'a str> {
        self.lists.get(index).map(|&(_, list)| list)
    }

    pub fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }

    /// The lifted list that `data` (a value parsed from [`Lifted::envelope`]) stands for, if
    /// it is a placeholder.
    pub fn list(&self, data: &RawValue) -> Option<&'a str> {
        let text = data.get();
        if text.as_bytes() != PLACEHOLDER {
            return None;
        }
        let offset = (text.as_ptr() as usize).checked_sub(self.envelope.as_ptr() as usize)?;
        let at = self
            .lists
            .binary_search_by_key(&offset, |&(at, _)| at)
            .ok()?;
        self.lists.get(at).map(|&(_, list)| list)
    }
}

/// Lifts the lists that `walk` marks (with [`Cursor::lift_number_list`]) as it walks `body`
/// from its start, or `None` when `walk` finds the body not shaped as it expects, something
/// follows the value it walked, or nothing was lifted.
pub fn lift_where<'b>(
    body: &'b [u8],
    walk: impl FnOnce(&mut Cursor<'b>) -> Option<()>,
) -> Option<Lifted<'b>> {
    // A body shorter than one liftable list has none: most requests stop here.
    if body.len() < MIN_LIFTED_BYTES {
        return None;
    }
    let text = std::str::from_utf8(body).ok()?;
    let mut cursor = Cursor {
        bytes: body,
        at: 0,
        spans: Vec::new(),
    };
    walk(&mut cursor)?;
    cursor.skip_whitespace();
    if cursor.at != body.len() || cursor.spans.is_empty() {
        return None;
    }
    let mut envelope = Vec::new();
    let mut lists = Vec::with_capacity(cursor.spans.len());
    let mut copied = 0;
    for (start, end) in cursor.spans {
        envelope.extend_from_slice(body.get(copied..start)?);
        lists.push((envelope.len(), text.get(start..end)?));
        envelope.extend_from_slice(PLACEHOLDER);
        copied = end;
    }
    envelope.extend_from_slice(body.get(copied..)?);
    Some(Lifted { envelope, lists })
}

/// Where the list of numbers starting at `start` ends, if it is one of at least
/// [`MIN_LIFTED_BYTES`]: brackets balanced, and nothing between them but the bytes numbers,
/// commas and whitespace are made of. Whether those bytes form valid JSON is the scanner's
/// to check; this only has to find where the list ends, which such bytes cannot hide.
fn number_list_end(bytes: &[u8], start: usize) -> Option<usize> {
    if bytes.get(start) != Some(&b'[') {
        return None;
    }
    let mut depth = 0usize;
    let mut at = start;
    loop {
        // Inside the list, whole blocks with no bracket and nothing foreign are stepped over
        // at once; the check is branch-free so that it vectorises.
        if depth > 0 {
            while let Some(block) = bytes.get(at..at + BLOCK) {
                if !block
                    .iter()
                    .fold(true, |plain, &b| plain & is_number_byte(b))
                {
                    break;
                }
                at += BLOCK;
            }
        }
        // The next block byte by byte.
        for _ in 0..BLOCK {
            match *bytes.get(at)? {
                b'[' => depth += 1,
                b']' => {
                    depth = depth.checked_sub(1)?;
                    if depth == 0 {
                        let end = at + 1;
                        return (end - start >= MIN_LIFTED_BYTES).then_some(end);
                    }
                }
                byte if is_number_byte(byte) => {}
                _ => return None,
            }
            at += 1;
        }
    }
}

const BLOCK: usize = 64;

/// A byte a number, a comma or whitespace may contain.
#[inline]
fn is_number_byte(b: u8) -> bool {
    b.is_ascii_digit()
        | matches!(
            b,
            b',' | b'.' | b'-' | b'+' | b'e' | b'E' | b' ' | b'\n' | b'\r' | b'\t'
        )
}

/// A position in a body walked structurally: strings, objects and lists are followed, other
/// values are skipped to their delimiter without being checked (the parser that reads the
/// envelope afterwards checks them).
pub struct Cursor<'b> {
    bytes: &'b [u8],
    at: usize,
    /// The lists lifted so far, as byte ranges of the body, in order.
    spans: Vec<(usize, usize)>,
}

impl Cursor<'_> {
    /// Lifts the value at the cursor if it is a large list of numbers, and steps past it;
    /// `None` (the cursor unmoved) when it is anything else.
    pub fn lift_number_list(&mut self) -> Option<()> {
        let end = number_list_end(self.bytes, self.at)?;
        self.spans.push((self.at, end));
        self.at = end;
        Some(())
    }

    /// How many lists have been lifted so far.
    pub fn lifted_count(&self) -> usize {
        self.spans.len()
    }

    /// Lifts the value at the cursor if it is a large list of numbers, and otherwise steps
    /// over it whatever it is.
    pub fn lift_or_skip(&mut self) -> Option<()> {
        self.lift_number_list().or_else(|| self.skip_value())
    }

    pub fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    pub fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
        }
    }

    pub fn expect(&mut self, byte: u8) -> Option<()> {
        self.skip_whitespace();
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// An object, with `member` called on each key with the cursor at its value.
    pub fn object(&mut self, mut member: impl FnMut(&mut Self, &[u8]) -> Option<()>) -> Option<()> {
        self.expect(b'{')?;
        self.skip_whitespace();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            self.skip_whitespace();
            let key_start = self.at + 1;
            self.skip_string()?;
            let key = self.bytes.get(key_start..self.at - 1)?;
            self.expect(b':')?;
            self.skip_whitespace();
            member(self, key)?;
            self.skip_whitespace();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A list, with `element` called with the cursor at each element.
    pub fn list(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.expect(b'[')?;
        self.skip_whitespace();
        if self.peek()? == b']' {
            self.at += 1;
            return Some(());
        }
        loop {
            self.skip_whitespace();
            element(self)?;
            self.skip_whitespace();
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// The string at the cursor, up to and past its closing quote.
    pub fn skip_string(&mut self) -> Option<()> {
        if self.peek()? != b'"' {
            return None;
        }
        self.at += 1;
        loop {
            let rest = self.bytes.get(self.at..)?;
            let found = memchr::memchr2(b'"', b'\\', rest)?;
            self.at += found;
            if self.peek()? == b'\\' {
                // The escaped byte, whatever it is, cannot end the string.
                self.at += 2;
            } else {
                self.at += 1;
                return Some(());
            }
        }
    }

    /// Any value at the cursor: containers to their matching close, strings to their closing
    /// quote, anything else to the next delimiter.
    pub fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.skip_string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth = depth.checked_sub(1)?;
                            if depth == 0 {
                                self.at += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.at += 1;
                }
            }
            _ => {
                let start = self.at;
                while !matches!(
                    self.peek(),
                    None | Some(b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t')
                ) {
                    self.at += 1;
                }
                (self.at > start).then_some(())
            }
        }
    }
}

/// Test helpers shared by the protocols' lift passes.
#[cfg(test)]
pub mod testing {
    /// A list of `count` numbers in JSON, as a client would print them.
    pub fn number_list(count: usize) -> String {
        let values: Vec<String> = (0..count).map(|i| format!("{}.25", i % 1000)).collect();
        format!("[{}]", values.join(", "))
    }

    /// Runs `lift` on every seventh prefix of `body` and on copies with structural bytes
    /// written over it at many places: whatever it finds, it must not panic.
    pub fn lift_never_panics(body: &[u8], lift: impl Fn(&[u8])) {
        for end in (0..body.len()).step_by(7) {
            lift(&body[..end]);
        }
        for at in (0..body.len()).step_by(13) {
            for byte in [b'"', b'\\', b'[', b']', b'{', b'}', b',', b':', 0xff] {
                let mut copy = body.to_vec();
                copy[at] = byte;
                lift(&copy);
            }
        }
    }
}
