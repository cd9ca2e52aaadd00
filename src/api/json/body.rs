//! Parsing request bodies as JSON, with the non-finite number literals TF Serving accepts.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::wire_error::BodyError;

/// A JSON object whose members are kept as unparsed text, so that large tensor data is decoded
/// once, straight into its buffer, when the signature says what it should be.
pub type RawObject<'a> = BTreeMap<String, &'a RawValue>;

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

/// Parses `body` as `T`, which may borrow from it, with the same fallback for non-finite
/// literals as [`parse`]: the quoted copy is kept in `rewritten`.
pub fn parse_borrowed<'a, T: Deserialize<'a>>(
    body: &'a [u8],
    rewritten: &'a mut Vec<u8>,
) -> Result<T, serde_json::Error> {
    match serde_json::from_slice(body) {
        Ok(value) => Ok(value),
        Err(err) => match quote_non_finite(body) {
            Some(copy) => {
                *rewritten = copy;
                let rewritten: &'a Vec<u8> = rewritten;
                serde_json::from_slice(rewritten).map_err(|_| err)
            }
            None => Err(err),
        },
    }
}

/// Why a body that should be a JSON object is not; `None` when it starts like an object.
/// serde's derived structs also accept a JSON array (their fields in order), so request
/// envelopes check this first.
pub fn not_an_object(body: &[u8]) -> Option<BodyError> {
    if body.trim_ascii_start().starts_with(b"{") {
        return None;
    }
    Some(match parse(body) {
        Ok(_) => BodyError::NotObject,
        Err(err) => BodyError::NotJson(err.to_string()),
    })
}

/// A member of a raw object as a `Value`: for the small fields of an envelope, never for
/// tensor data.
pub fn member(object: &RawObject<'_>, key: &str) -> Option<Value> {
    object
        .get(key)
        .and_then(|raw| serde_json::from_str(raw.get()).ok())
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
    fn raw_objects_borrow_their_members() -> Result<(), serde_json::Error> {
        let mut storage = Vec::new();
        let object: RawObject = parse_borrowed(br#"{"a": [1, NaN], "b": "x"}"#, &mut storage)?;
        assert_eq!(object.get("a").map(|raw| raw.get()), Some(r#"[1, "NaN"]"#));
        assert_eq!(member(&object, "b"), Some(Value::from("x")));
        Ok(())
    }

    #[test]
    fn only_objects_pass_as_envelopes() {
        assert_eq!(not_an_object(b"  {\"a\": 1}"), None);
        let array = not_an_object(b"[[1, 2]]").map(|e| e.to_string());
        assert_eq!(
            array.as_deref(),
            Some("the request body must be a JSON object")
        );
        let broken = not_an_object(b"[1,").map(|e| e.to_string());
        assert!(
            broken
                .as_deref()
                .is_some_and(|b| b.starts_with("the request body is not valid JSON: ")),
            "{broken:?}"
        );
    }

    #[test]
    fn other_errors_stay_errors() {
        assert!(parse(b"{not json").is_err());
        assert!(parse(b"[NaN").is_err());
    }
}
