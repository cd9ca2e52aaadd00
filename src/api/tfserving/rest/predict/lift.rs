//! Large lists of numbers lifted out of a TF Serving REST predict body before its envelope
//! is parsed (`api/json/lift.rs`). The lists are where the two layouts put tensor data:
//! `inputs` itself or each of its members (columnar), and each of `instances` or each
//! member of an instance (row).

pub use crate::api::json::lift::Lifted;
use crate::api::json::lift::{lift_where, Cursor};

/// A predict body with its large tensor lists lifted out.
pub struct PredictLift<'b> {
    pub lifted: Lifted<'b>,
    /// The whole of `instances`, when it is one large list of numbers (bare rows of one
    /// shape): read as one tensor, which is the rows stacked. Its placeholder reads as no
    /// instances at all, so the adapter must take it from here.
    pub instances: Option<&'b str>,
}

/// The body with its large tensor lists lifted out, or `None` when there is nothing to lift
/// or the body is not shaped as the pass expects (it then takes the general route, which
/// words any error).
pub fn lift(body: &[u8]) -> Option<PredictLift<'_>> {
    let mut whole_instances = None;
    let lifted = lift_where(body, |cursor| {
        cursor.object(|cursor, key| match key {
            b"inputs" => lift_tensor_or_members(cursor),
            b"instances" if cursor.peek() == Some(b'[') => {
                let index = cursor.lifted_count();
                if cursor.lift_number_list().is_some() {
                    whole_instances = Some(index);
                    return Some(());
                }
                cursor.list(lift_tensor_or_members)
            }
            _ => cursor.skip_value(),
        })
    })?;
    let instances = match whole_instances {
        Some(index) => Some(lifted.list_at(index)?),
        None => None,
    };
    Some(PredictLift { lifted, instances })
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
    use crate::api::json::lift::testing::{lift_never_panics, number_list as numbers};

    fn lifted_texts(body: &str) -> Option<(String, usize)> {
        let found = lift(body.as_bytes())?;
        let envelope = String::from_utf8(found.lifted.envelope().to_vec()).ok()?;
        Some((envelope, found.lifted.len()))
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
                format!(r#"{{"instances": [{list}, {{"a": {list}}}]}}"#),
                r#"{"instances": [[], {"a": []}]}"#.to_owned(),
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
    fn instances_that_are_all_numbers_are_lifted_whole() {
        let list = numbers(2000);
        let body = format!(r#"{{"instances": [{list}, {list}], "signature_name": "s"}}"#);
        let found = lift(body.as_bytes()).expect("lifted");
        assert_eq!(found.instances, Some(format!("[{list}, {list}]").as_str()));
        assert_eq!(
            found.lifted.envelope(),
            br#"{"instances": [], "signature_name": "s"}"#
        );
        // Many short rows, each too short alone, are long enough together.
        let short = numbers(16);
        let rows = vec![short.as_str(); 300].join(", ");
        let body = format!(r#"{{"instances": [{rows}]}}"#);
        let found = lift(body.as_bytes()).expect("lifted");
        assert_eq!(found.instances, Some(format!("[{rows}]").as_str()));
        // Rows of objects are not numbers: their members are lifted one by one.
        let body = format!(r#"{{"instances": [{{"a": {list}}}]}}"#);
        assert_eq!(lift(body.as_bytes()).expect("lifted").instances, None);
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
        let body = format!(r#"{{"instances": [{first}, {{"x": {second}}}]}}"#);
        let lifted = lift(body.as_bytes()).expect("lifted").lifted;
        #[derive(serde::Deserialize)]
        struct Body<'a> {
            #[serde(borrow)]
            instances: Vec<&'a serde_json::value::RawValue>,
        }
        let parsed: Body = serde_json::from_slice(lifted.envelope()).expect("json");
        let [row, object] = parsed.instances[..] else {
            panic!("two instances");
        };
        // The member borrows the envelope's text too, so its placeholder is found.
        let members: std::collections::BTreeMap<&str, &serde_json::value::RawValue> =
            serde_json::from_str(object.get()).expect("object");
        let lists = [lifted.list(row), lifted.list(members["x"])];
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
