//! Parsing request bodies as JSON, with the non-finite number literals TF Serving accepts.

use serde_json::Value;

/// Parses `body`. Standard JSON takes the fast path; a body that fails only because it uses
/// the bare literals `NaN`, `Infinity` or `-Infinity` (as TF Serving's clients may send) is
/// parsed again with those literals quoted, which the tensor decoder reads as floats.
pub fn parse(body: &[u8]) -> Result<Value, serde_json::Error> {
    match serde_json::from_slice(body) {
        Ok(value) => Ok(value),
        Err(err) => match quote_non_finite(body) {
            Some(rewritten) => serde_json::from_slice(&rewritten).map_err(|_| err),
            None => Err(err),
        },
    }
}

/// A copy of `body` with bare non-finite literals outside strings quoted, or `None` if it has
/// none.
fn quote_non_finite(body: &[u8]) -> Option<Vec<u8>> {
    const LITERALS: [&[u8]; 3] = [b"-Infinity", b"Infinity", b"NaN"];
    let mut out = Vec::with_capacity(body.len() + 16);
    let mut found = false;
    let mut in_string = false;
    let mut escaped = false;
    let mut i = 0;
    while let Some(&byte) = body.get(i) {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else if byte == b'"' {
            in_string = true;
        } else if let Some(literal) = LITERALS.iter().find(|lit| body[i..].starts_with(lit)) {
            out.push(b'"');
            out.extend_from_slice(literal);
            out.push(b'"');
            i += literal.len();
            found = true;
            continue;
        }
        out.push(byte);
        i += 1;
    }
    found.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_json_parses() {
        assert!(parse(br#"{"a": [1, 2]}"#).is_ok());
    }

    #[test]
    fn non_finite_literals_are_accepted_outside_strings() {
        let value = parse(br#"{"a": [NaN, Infinity, -Infinity], "s": "NaN \" Infinity"}"#);
        let value = value.expect("parses");
        assert_eq!(value["a"][0], "NaN");
        assert_eq!(value["a"][2], "-Infinity");
        assert_eq!(value["s"], "NaN \" Infinity");
    }

    #[test]
    fn other_errors_stay_errors() {
        assert!(parse(b"{not json").is_err());
        assert!(parse(b"[NaN").is_err());
    }
}
