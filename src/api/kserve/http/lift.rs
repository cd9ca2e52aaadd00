//! Large `data` arrays lifted out of a KServe JSON infer body before the envelope is parsed
//! (`api/json/lift.rs`): the lists are each `inputs[i].data` that is a large list of numbers.

use crate::api::json::lift::lift_where;
pub use crate::api::json::lift::Lifted;

/// The body with its large `inputs[i].data` number lists lifted out, or `None` when there is
/// nothing to lift or the body is not shaped as the pass expects (it then takes the general
/// route, which words any error).
pub fn lift(body: &[u8]) -> Option<Lifted<'_>> {
    lift_where(body, |cursor| {
        cursor.object(|cursor, key| {
            if key == b"inputs" && cursor.peek() == Some(b'[') {
                cursor.list(|cursor| {
                    if cursor.peek() == Some(b'{') {
                        cursor.object(|cursor, key| {
                            if key == b"data" {
                                cursor.lift_or_skip()
                            } else {
                                cursor.skip_value()
                            }
                        })
                    } else {
                        cursor.skip_value()
                    }
                })
            } else {
                cursor.skip_value()
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::json::lift::testing::{lift_never_panics, number_list as numbers};
    use serde_json::value::RawValue;

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
        lift_never_panics(bytes, |body| {
            let _ = lift(body);
        });
    }
}
