//! Large lists of numbers lifted out of a TF Serving REST predict body before its envelope
//! is parsed (`api/json_lift.rs`). The lists are where the two layouts put tensor data:
//! `inputs` itself or each of its members (columnar), and each of `instances` or each
//! member of an instance (row).

pub use crate::api::json_lift::Lifted;
use crate::api::json_lift::{lift_where, Cursor};

/// The body with its large tensor lists lifted out, or `None` when there is nothing to lift
/// or the body is not shaped as the pass expects (it then takes the general route, which
/// words any error).
pub fn lift(body: &[u8]) -> Option<Lifted<'_>> {
    lift_where(body, |cursor| {
        cursor.object(|cursor, key| match key {
            b"inputs" => lift_tensor_or_members(cursor),
            b"instances" if cursor.peek() == Some(b'[') => cursor.list(lift_tensor_or_members),
            _ => cursor.skip_value(),
        })
    })
}

/// A tensor at the cursor (lifted when it is a large list of numbers), or an object of named
/// tensors (each lifted when it is one).
fn lift_tensor_or_members(cursor: &mut Cursor<'_>) -> Option<()> {
    if cursor.peek() == Some(b'{') {
        cursor.object(|cursor, _| cursor.lift_or_skip())
    } else {
        cursor.lift_or_skip()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::json_lift::testing::{lift_never_panics, number_list as numbers};

    fn lifted_texts(body: &str) -> Option<(String, usize)> {
        let lifted = lift(body.as_bytes())?;
        let envelope = String::from_utf8(lifted.envelope().to_vec()).ok()?;
        Some((envelope, lifted.len()))
    }

    #[test]
    fn both_layouts_lift_their_tensors_and_nothing_else() {
        let list = numbers(2000);
        let nested = format!("[{list}, {list}]");
        for (body, envelope, count) in [
            (
                format!(r#"{{"inputs": {nested}}}"#),
                r#"{"inputs": []}"#.to_owned(),
                1,
            ),
            (
                format!(
                    r#"{{"signature_name": "s", "inputs": {{"a": {list}, "b": [1, 2], "c": {nested}}}}}"#
                ),
                r#"{"signature_name": "s", "inputs": {"a": [], "b": [1, 2], "c": []}}"#.to_owned(),
                2,
            ),
            (
                format!(r#"{{"instances": [{list}, {list}]}}"#),
                r#"{"instances": [[], []]}"#.to_owned(),
                2,
            ),
            (
                format!(
                    r#"{{"instances": [{{"a": {list}, "k": "x"}}, {{"a": {list}, "k": "y"}}]}}"#
                ),
                r#"{"instances": [{"a": [], "k": "x"}, {"a": [], "k": "y"}]}"#.to_owned(),
                2,
            ),
        ] {
            assert_eq!(lifted_texts(&body), Some((envelope, count)), "{body:.60}");
        }
    }

    #[test]
    fn lists_elsewhere_or_not_of_numbers_stay() {
        let list = numbers(2000);
        for body in [
            format!(r#"{{"other": {list}, "inputs": [1]}}"#),
            format!(
                r#"{{"inputs": {{"a": {{"b64": "{}"}}}}}}"#,
                "A".repeat(5000)
            ),
            format!(r#"{{"instances": [[{list}, "x"]]}}"#),
            format!(r#"{{"inputs": {list}}} trailing"#),
            format!(r#"[{{"inputs": {list}}}]"#),
        ] {
            assert_eq!(lifted_texts(&body), None, "{body:.60}");
        }
    }

    #[test]
    fn placeholders_map_back_to_their_lists() {
        let (first, second) = (numbers(1500), numbers(3000));
        let body = format!(r#"{{"instances": [{first}, {second}]}}"#);
        let lifted = lift(body.as_bytes()).expect("lifted");
        #[derive(serde::Deserialize)]
        struct Body<'a> {
            #[serde(borrow)]
            instances: Vec<&'a serde_json::value::RawValue>,
        }
        let parsed: Body = serde_json::from_slice(lifted.envelope()).expect("json");
        let lists: Vec<_> = parsed
            .instances
            .iter()
            .map(|row| lifted.list(row))
            .collect();
        assert_eq!(lists, [Some(first.as_str()), Some(second.as_str())]);
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let body = format!(r#"{{"inputs": {{"x": {}}}}}"#, numbers(1200));
        let bytes = body.as_bytes();
        assert!(lift(bytes).is_some());
        lift_never_panics(bytes, |body| {
            let _ = lift(body);
        });
    }
}
