use super::*;
use crate::backend::TensorSpec;
use crate::tensor::Tensor;

fn sigs() -> Vec<Signature> {
    vec![Signature {
        name: "serving_default".into(),
        inputs: vec![TensorSpec::new("x", DataType::F32, vec![-1, 2])],
        outputs: vec![
            TensorSpec::new("y", DataType::F32, vec![-1]),
            TensorSpec::new("z", DataType::F32, vec![-1]),
        ],
    }]
}

fn input(name: &str, shape: Vec<usize>) -> NamedTensor {
    let count = shape.iter().product();
    let tensor = Tensor::from_vec(shape, vec![0f32; count]).expect("valid tensor");
    (name.to_owned(), tensor)
}

fn check(inputs: Vec<NamedTensor>, filter: &[&str]) -> Result<ValidRequest, RequestError> {
    let filter = filter.iter().map(|name| (*name).to_owned()).collect();
    ValidRequest::new(&sigs(), 0, inputs, filter, Vec::new())
}

#[test]
fn a_matching_request_resolves_every_output() {
    let valid = check(vec![input("x", vec![3, 2])], &[]).expect("valid");
    assert_eq!(valid.outputs(), ["y", "z"]);
    assert_eq!(valid.signature(), 0);
    assert_eq!(valid.priority(), Priority::Default);
    assert!(valid.deadline().is_none());
    let filtered = check(vec![input("x", vec![1, 2])], &["z"]).expect("valid");
    assert_eq!(filtered.outputs(), ["z"]);
}

#[test]
fn each_mismatch_is_named() {
    let message = |inputs, filter: &[&str]| match check(inputs, filter) {
        Err(err) => {
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
            err.to_string()
        }
        Ok(_) => String::new(),
    };
    assert!(message(vec![input("q", vec![1, 2])], &[]).contains("unknown input 'q'"));
    assert!(message(vec![], &[]).contains("missing input 'x'"));
    assert!(message(vec![input("x", vec![1, 3])], &[]).contains("shape [1, 3]"));
    assert!(
        message(vec![input("x", vec![1, 2]), input("x", vec![1, 2])], &[]).contains("given twice")
    );
    let ints = Tensor::from_vec(vec![1, 2], vec![0i32; 2]).expect("valid tensor");
    assert!(message(vec![("x".into(), ints)], &[]).contains("dtype"));
    assert!(message(vec![input("x", vec![1, 2])], &["nope"]).contains("unknown output"));
    assert!(message(vec![input("x", vec![1, 2])], &["y", "y"]).contains("twice"));
}

#[test]
fn server_side_mistakes_are_internal() {
    let err = ValidRequest::new(&sigs(), 3, vec![input("x", vec![1, 2])], vec![], vec![])
        .expect_err("no signature 3");
    assert_eq!(err.kind(), ErrorKind::Internal);
    let err = ValidRequest::new(
        &sigs(),
        0,
        vec![input("x", vec![1, 2])],
        vec!["y".into()],
        vec![None, None],
    )
    .expect_err("two targets for one output");
    assert_eq!(err.kind(), ErrorKind::Internal);
}

#[test]
fn a_batch_above_max_batch_size_is_refused() -> Result<(), RequestError> {
    let request = || check(vec![input("x", vec![3, 2])], &[]);
    assert!(request()?.within_batch_limit(Some(3)).is_ok());
    assert!(request()?.within_batch_limit(Some(0)).is_ok());
    assert!(request()?.within_batch_limit(None).is_ok());
    let err = request()?.within_batch_limit(Some(2)).err();
    assert_eq!(
        err.map(|e| e.to_string()),
        Some("input 'x' carries a batch of 3, more than the model's max_batch_size of 2".into())
    );
    Ok(())
}

#[test]
fn deadline_and_priority_travel_with_it() {
    let at = Instant::now();
    let valid = check(vec![input("x", vec![1, 2])], &[])
        .expect("valid")
        .with_deadline(Some(at))
        .with_priority(Priority::High);
    assert_eq!(valid.deadline(), Some(at));
    assert_eq!(valid.priority(), Priority::High);
}

#[test]
fn seen_marks_each_index_once_below_and_past_64() {
    for count in [3, 64, 200] {
        let mut seen = Seen::new(count);
        for index in [0, count / 2, count - 1] {
            assert!(!seen.contains(index));
            assert!(seen.insert(index), "{count}: {index}");
            assert!(!seen.insert(index), "{count}: {index} twice");
            assert!(seen.contains(index));
        }
        assert!(count < 4 || !seen.contains(1));
    }
}
