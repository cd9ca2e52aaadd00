use super::*;

fn floats(name: &str, shape: Vec<usize>, values: &[f32]) -> NamedTensor {
    (
        name.to_owned(),
        Tensor::from_vec(shape, values.to_vec()).unwrap(),
    )
}

fn strings(name: &str, shape: Vec<usize>, values: &[&str]) -> NamedTensor {
    let values = values.iter().map(|v| Bytes::from(v.to_string())).collect();
    (name.to_owned(), Tensor::strings(shape, values).unwrap())
}

fn values(tensor: &Tensor) -> Vec<f32> {
    tensor.view::<f32>().unwrap().into_owned()
}

#[test]
fn keys_ignore_dim_zero_only() {
    let outputs = vec!["y".to_owned()];
    let key = |inputs: &[NamedTensor]| batch_key(0, inputs, &outputs);
    let (one, rows) = key(&[floats("x", vec![1, 2], &[0.0; 2])]).unwrap();
    let (three, rows3) = key(&[floats("x", vec![3, 2], &[0.0; 6])]).unwrap();
    assert_eq!((one.clone(), rows, rows3), (three, 1, 3));
    let (wider, _) = key(&[floats("x", vec![1, 3], &[0.0; 3])]).unwrap();
    assert_ne!(one, wider);
    let (other_sig, _) = batch_key(1, &[floats("x", vec![1, 2], &[0.0; 2])], &outputs).unwrap();
    assert_ne!(one, other_sig);
    let (other_outputs, _) = batch_key(0, &[floats("x", vec![1, 2], &[0.0; 2])], &[]).unwrap();
    assert_ne!(one, other_outputs);
    let ints = (
        "x".to_owned(),
        Tensor::from_vec(vec![1, 2], vec![0i32; 2]).unwrap(),
    );
    assert_ne!(one, key(&[ints]).unwrap().0);
}

#[test]
fn unbatchable_requests_have_no_key() {
    let outputs = [];
    // Inputs disagreeing on dimension 0, a scalar, no inputs at all.
    let mixed = [
        floats("a", vec![2, 1], &[0.0; 2]),
        floats("b", vec![3, 1], &[0.0; 3]),
    ];
    assert!(batch_key(0, &mixed, &outputs).is_none());
    assert!(batch_key(0, &[floats("a", vec![], &[0.0])], &outputs).is_none());
    assert!(batch_key(0, &[], &outputs).is_none());
}

#[test]
fn input_order_does_not_matter() {
    let ab = vec![floats("a", vec![1], &[1.0]), floats("b", vec![1], &[2.0])];
    let ba = vec![floats("b", vec![1], &[3.0]), floats("a", vec![1], &[4.0])];
    assert_eq!(batch_key(0, &ab, &[]), batch_key(0, &ba, &[]));
    let merged = gather(vec![ab, ba]).unwrap();
    assert_eq!(merged[0].0, "a");
    assert_eq!(values(&merged[0].1), vec![1.0, 4.0]);
    assert_eq!(values(&merged[1].1), vec![2.0, 3.0]);
}

#[test]
fn dense_inputs_concatenate_and_outputs_split_without_copying() {
    let merged = gather(vec![
        vec![floats("x", vec![1, 2], &[1.0, 2.0])],
        vec![floats("x", vec![2, 2], &[3.0, 4.0, 5.0, 6.0])],
    ])
    .unwrap();
    assert_eq!(merged.len(), 1);
    let (name, tensor) = &merged[0];
    assert_eq!((name.as_str(), tensor.shape()), ("x", &[3, 2][..]));
    assert_eq!(values(tensor), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);

    let output = floats("y", vec![3, 2], &[10.0, 20.0, 30.0, 40.0, 50.0, 60.0]);
    let base = output.1.bytes().unwrap().as_ptr() as usize;
    let split = scatter(vec![output], &[1, 2]).unwrap();
    assert_eq!(split.len(), 2);
    assert_eq!(split[0][0].1.shape(), &[1, 2]);
    assert_eq!(values(&split[0][0].1), vec![10.0, 20.0]);
    assert_eq!(split[1][0].1.shape(), &[2, 2]);
    assert_eq!(values(&split[1][0].1), vec![30.0, 40.0, 50.0, 60.0]);
    // The pieces are windows of the runtime's buffer.
    assert_eq!(split[0][0].1.bytes().unwrap().as_ptr() as usize, base);
    assert_eq!(split[1][0].1.bytes().unwrap().as_ptr() as usize, base + 8);
}

#[test]
fn string_inputs_concatenate_and_outputs_split() {
    let merged = gather(vec![
        vec![strings("s", vec![1, 2], &["a", "b"])],
        vec![strings("s", vec![1, 2], &["c", "d"])],
    ])
    .unwrap();
    assert_eq!(merged[0].1.shape(), &[2, 2]);
    let split = scatter(merged, &[1, 1]).unwrap();
    let second = split[1][0].1.string_elements().unwrap();
    assert_eq!(second, &[Bytes::from("c"), Bytes::from("d")]);
    assert_eq!(split[1][0].1.shape(), &[1, 2]);
}

#[test]
fn every_output_is_split_and_zero_row_requests_get_empty_pieces() {
    let outputs = vec![
        floats("y", vec![2, 1], &[1.0, 2.0]),
        floats("sum", vec![2], &[3.0, 4.0]),
    ];
    let split = scatter(outputs, &[0, 2]).unwrap();
    assert_eq!(split[0][0].1.shape(), &[0, 1]);
    assert_eq!(split[0][1].1.shape(), &[0]);
    assert_eq!(split[1][0].0, "y");
    assert_eq!(split[1][1].0, "sum");
    assert_eq!(values(&split[1][1].1), vec![3.0, 4.0]);
}

#[test]
fn outputs_without_a_batch_dimension_fail_the_batch() {
    let scalar = floats("loss", vec![], &[1.0]);
    assert!(matches!(
        scatter(vec![scalar], &[1, 1]),
        Err(BatchError::OutputNotBatched { rows: 2, .. })
    ));
    let fixed = floats("table", vec![3, 1], &[1.0, 2.0, 3.0]);
    let err = scatter(vec![fixed], &[1, 1]).unwrap_err();
    assert!(err.to_string().contains("dimension 0"), "{err}");
}

#[test]
fn mismatched_requests_are_refused_not_merged() {
    let wrong_name = gather(vec![
        vec![floats("x", vec![1], &[1.0])],
        vec![floats("z", vec![1], &[1.0])],
    ]);
    assert!(matches!(wrong_name, Err(BatchError::Incompatible { .. })));
    let wrong_shape = gather(vec![
        vec![floats("x", vec![1, 1], &[1.0])],
        vec![floats("x", vec![1, 2], &[1.0, 2.0])],
    ]);
    assert!(matches!(wrong_shape, Err(BatchError::Incompatible { .. })));
    let wrong_width = gather(vec![
        vec![floats("x", vec![1], &[1.0])],
        vec![floats("x", vec![1], &[1.0]), floats("y", vec![1], &[1.0])],
    ]);
    assert!(matches!(wrong_width, Err(BatchError::Incompatible { .. })));
}
