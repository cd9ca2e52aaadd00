//! Large `data` arrays lifted out of a KServe JSON infer body before the envelope is parsed.
//!
//! serde_json checks every byte of a value it is asked to keep as raw text, which for a
//! megabyte of numbers costs as much as reading them. So a structural pass first finds each
//! `inputs[i].data` that is a large list of numbers, and the envelope is parsed from a copy
//! of the body in which each such list is `[]`. The lists go straight to the number scanner
//! (`api/json_scan.rs`), which checks their grammar as it reads them.
//!
//! This is only a faster route to the same answer: the caller takes it when the envelope
//! parses, every placeholder is claimed by an input's `data`, and every lifted list scans;
//! on anything else it decodes the original body the general way, which accepts it or words
//! the error exactly as it would have.

use serde_json::value::RawValue;

/// Lists shorter than this stay in the envelope: lifting them saves less than it costs.
const MIN_LIFTED_BYTES: usize = 4096;

/// What the placeholder for a lifted list reads as.
const PLACEHOLDER: &[u8] = b"[]";

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

/// The body with its large `inputs[i].data` number lists lifted out, or `None` when there is
/// nothing to lift or the body is not shaped as the pass expects (it then takes the general
/// route, which words any error).
pub fn lift(body: &[u8]) -> Option<Lifted<'_>> {
    // A body shorter than one liftable list has none: most requests stop here.
    if body.len() < MIN_LIFTED_BYTES {
        return None;
    }
    let text = std::str::from_utf8(body).ok()?;
    let mut spans = Vec::new();
    let mut cursor = Cursor { bytes: body, at: 0 };
    cursor.object(|cursor, key| {
        if key == b"inputs" && cursor.peek() == Some(b'[') {
            cursor.list(|cursor| {
                if cursor.peek() == Some(b'{') {
                    cursor.object(|cursor, key| {
                        if key == b"data" {
                            if let Some(end) = number_list_end(body, cursor.at) {
                                spans.push((cursor.at, end));
                                cursor.at = end;
                                return Some(());
                            }
                        }
                        cursor.skip_value()
                    })
                } else {
                    cursor.skip_value()
                }
            })
        } else {
            cursor.skip_value()
        }
    })?;
    cursor.skip_whitespace();
    if cursor.at != body.len() || spans.is_empty() {
        return None;
    }
    let mut envelope = Vec::new();
    let mut lists = Vec::with_capacity(spans.len());
    let mut copied = 0;
    for (start, end) in spans {
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
struct Cursor<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.skip_whitespace();
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// An object, with `member` called on each key with the cursor at its value.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &[u8]) -> Option<()>) -> Option<()> {
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
    fn list(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
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
    fn skip_string(&mut self) -> Option<()> {
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
    fn skip_value(&mut self) -> Option<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(count: usize) -> String {
        let values: Vec<String> = (0..count).map(|i| format!("{}.25", i % 1000)).collect();
        format!("[{}]", values.join(", "))
    }

    #[test]
    fn large_number_lists_in_inputs_are_lifted_and_nothing_else() {
        let list = numbers(2000);
        let nested = format!("[{list}, {list}]");
        let body = format!(
            r#"{{"id": "a\"]", "parameters": {{"data": {list}}}, "inputs": [
                {{"name": "x", "data": {list}, "shape": [2000]}},
                {{"name": "s", "data": ["a", "b"]}},
                {{"data": {nested}, "parameters": {{"k": [1, {{"data": {list}}}]}}}}
            ], "outputs": [{{"name": "y"}}]}}"#
        );
        let lifted = lift(body.as_bytes()).expect("lifted");
        assert_eq!(lifted.len(), 2);
        let envelope = std::str::from_utf8(lifted.envelope()).expect("text");
        assert!(
            envelope.contains(r#""name": "x", "data": [], "shape": [2000]"#),
            "{envelope}"
        );
        assert!(
            envelope.contains(r#"{"data": [], "parameters""#),
            "{envelope}"
        );
        // The request's own parameters and the input's are not inputs' data.
        assert_eq!(envelope.matches(&list).count(), 2);
        let parsed: serde_json::Value = serde_json::from_slice(lifted.envelope()).expect("json");
        let inputs = parsed["inputs"].as_array().expect("inputs");
        assert_eq!(inputs.len(), 3);
        assert_eq!(inputs[1]["data"][0], "a");
    }

    #[test]
    fn placeholders_map_back_to_their_lists() {
        let (first, second) = (numbers(1500), numbers(3000));
        let body = format!(
            r#"{{"inputs": [{{"name": "a", "data": {first}}}, {{"name": "b", "data": {second}}}]}}"#
        );
        let lifted = lift(body.as_bytes()).expect("lifted");
        #[derive(serde::Deserialize)]
        struct Input<'a> {
            #[serde(borrow)]
            data: &'a RawValue,
        }
        #[derive(serde::Deserialize)]
        struct Body<'a> {
            #[serde(borrow)]
            inputs: Vec<Input<'a>>,
        }
        let parsed: Body = serde_json::from_slice(lifted.envelope()).expect("json");
        let lists: Vec<_> = parsed.inputs.iter().map(|i| lifted.list(i.data)).collect();
        assert_eq!(lists, [Some(first.as_str()), Some(second.as_str())]);
        // A `[]` the client wrote is not a placeholder.
        let own: &RawValue = serde_json::from_str("[]").expect("json");
        assert_eq!(lifted.list(own), None);
    }

    #[test]
    fn small_lists_and_lists_with_anything_else_stay() {
        let big = numbers(2000);
        for body in [
            r#"{"inputs": [{"data": [1, 2, 3]}]}"#.to_owned(),
            format!(
                r#"{{"inputs": [{{"data": {}, "x": 1]}}]}}"#,
                &big[..big.len() - 1]
            ),
            format!(
                r#"{{"inputs": [{{"data": [{}, "1"]}}]}}"#,
                &big[1..big.len() - 1]
            ),
            format!(
                r#"{{"inputs": [{{"data": [{}, NaN]}}]}}"#,
                &big[1..big.len() - 1]
            ),
            format!(r#"{{"inputs": {{"data": {big}}}}}"#),
            format!(r#"{{"inputs": [{{"data": {big}}}]}} trailing"#),
            format!(r#"[{{"inputs": [{{"data": {big}}}]}}]"#),
            format!(r#"{{"inputs": [{{"data": {big}}}]"#),
        ] {
            assert!(lift(body.as_bytes()).is_none(), "{body:.80}");
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let big = numbers(1200);
        let body = format!(r#"{{"id": "x\\y", "inputs": [{{"name": "x", "data": {big}}}]}}"#);
        let bytes = body.as_bytes();
        assert!(lift(bytes).is_some());
        // Every prefix, and the body with each of a few bytes overwritten at many places.
        for end in (0..bytes.len()).step_by(7) {
            let _ = lift(&bytes[..end]);
        }
        for at in (0..bytes.len()).step_by(13) {
            for byte in [b'"', b'\\', b'[', b']', b'{', b'}', b',', b':', 0xff] {
                let mut copy = bytes.to_vec();
                copy[at] = byte;
                let _ = lift(&copy);
            }
        }
    }
}
