//! The client against the real server binary ($TENSORPORT_BIN, else `tensorport` in the cargo
//! target directory this test was built into, wherever CARGO_TARGET_DIR or build.target-dir
//! put it), started on free loopback ports with `examples/models`. Build it first:
//! `cargo build --bins`.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tensorport_client::{
    DataType, KserveClient, ShmInput, ShmOutput, ShmRegion, Tensor, TfServingClient,
};

struct Server {
    child: Child,
    grpc: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `<target>/<profile>/tensorport`: this test runs as `<target>/<profile>/deps/<test>`, and
/// `cargo build --bins` of the same profile puts the server binary two levels up.
fn built_beside_this_test() -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    exe.parent()
        .and_then(Path::parent)
        .map(|profile| profile.join("tensorport"))
        .expect("the test runs from <target>/<profile>/deps")
}

fn start_server() -> Server {
    let binary = std::env::var_os("TENSORPORT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(built_beside_this_test);
    let binary = if binary.is_relative() {
        repo().join(binary)
    } else {
        binary
    };
    assert!(
        binary.exists(),
        "{} not found: build the server first (cargo build --bins) or set TENSORPORT_BIN",
        binary.display()
    );
    let mut child = Command::new(&binary)
        .args([
            "serve",
            "--model-dir",
            "examples/models",
            "--host",
            "127.0.0.1",
        ])
        .args(["--grpc-port", "0", "--rest-port", "0"])
        .current_dir(repo())
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("server starts");
    let stderr = child.stderr.take().expect("stderr is piped");
    let (tx, rx) = mpsc::channel();
    // Reads the log until the process ends, so the pipe never fills and blocks the server.
    // The server listens first and loads its models after; it is ready for these tests once
    // it says the load at start-up has settled.
    std::thread::spawn(move || {
        let mut addr = None;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("listening grpc=").nth(1) {
                addr = rest.split_whitespace().next().map(str::to_owned);
            }
            let settled = line.contains("initial load settled");
            let _ = tx.send((line, addr.clone().filter(|_| settled)));
        }
    });
    let mut log = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok((_, Some(addr))) => {
                return Server {
                    child,
                    grpc: format!("http://{addr}"),
                }
            }
            Ok((line, None)) => log.push(line),
            Err(_) => panic!("the server did not start:\n{}", log.join("\n")),
        }
    }
}

fn features(rows: usize) -> Vec<f32> {
    (0..rows * 16).map(|i| (i as f32 * 0.37).sin()).collect()
}

#[tokio::test]
async fn tf_serving_predict_and_kserve_infer_agree() {
    let server = start_server();
    let x = Tensor::new([3, 16], &features(3)).unwrap();
    let mut tf = TfServingClient::connect(server.grpc.clone()).await.unwrap();
    let predicted = tf
        .predict("ranker", None, &[("features", &x)])
        .await
        .unwrap();
    let mut kserve = KserveClient::connect(server.grpc.clone()).await.unwrap();
    let inferred = kserve
        .infer("ranker", Some(2), &[("features", &x)])
        .await
        .unwrap();

    assert_eq!(predicted.len(), 1);
    assert_eq!(inferred.len(), 1);
    let (name, scores) = &predicted[0];
    assert_eq!(name, "score");
    assert_eq!(scores.shape(), [3, 1]);
    assert_eq!(scores.datatype(), DataType::F32);
    let values = scores.to_vec::<f32>().unwrap();
    assert!(values.iter().all(|v| (0.0..=1.0).contains(v)), "{values:?}");
    assert_eq!(inferred[0].1.to_vec::<f32>().unwrap(), values);
}

#[tokio::test]
async fn every_dtype_of_multi_dtype_round_trips() {
    let server = start_server();
    let mut kserve = KserveClient::connect(server.grpc.clone()).await.unwrap();
    let x_double = Tensor::new([2, 3], &[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let x_int32 = Tensor::new([2, 3], &[1i32, 2, 3, -1, -2, -3]).unwrap();
    let flag = Tensor::from_bools([2, 3], &[true, false, true, true, true, false]).unwrap();
    let label = Tensor::from_strings([2], &["first", "second"]).unwrap();
    let inputs = [
        ("x_double", &x_double),
        ("x_int32", &x_int32),
        ("flag", &flag),
        ("label", &label),
    ];
    for outputs in [
        kserve.infer("multi_dtype", None, &inputs).await.unwrap(),
        TfServingClient::connect(server.grpc.clone())
            .await
            .unwrap()
            .predict("multi_dtype", None, &inputs)
            .await
            .unwrap(),
    ] {
        let get = |name: &str| &outputs.iter().find(|(n, _)| n == name).unwrap().1;
        assert_eq!(
            get("weighted").to_vec::<f64>().unwrap(),
            vec![1.0, 0.0, 9.0, -4.0, -10.0, 0.0]
        );
        assert_eq!(get("count").to_vec::<i64>().unwrap(), vec![2, 2]);
        let tags = get("tag").to_strings().unwrap();
        assert_eq!(tags, vec!["first", "second"]);
    }
}

#[tokio::test]
async fn status_and_metadata() {
    let server = start_server();
    let mut tf = TfServingClient::connect(server.grpc.clone()).await.unwrap();
    let status = tf.model_status("ranker", None).await.unwrap();
    assert_eq!(status.len(), 1);
    assert_eq!(
        (status[0].version, status[0].state.as_str()),
        (2, "AVAILABLE")
    );

    let mut kserve = KserveClient::connect(server.grpc.clone()).await.unwrap();
    assert!(kserve.server_ready().await.unwrap());
    let metadata = kserve.model_metadata("two_tower", None).await.unwrap();
    assert_eq!(metadata.versions, ["1"]);
    let inputs: Vec<(&str, &str)> = metadata
        .inputs
        .iter()
        .map(|t| (t.name.as_str(), t.datatype.as_str()))
        .collect();
    assert_eq!(inputs, [("user_id", "INT64"), ("item_id", "INT64")]);
}

#[tokio::test]
async fn refusals_carry_the_grpc_code() {
    let server = start_server();
    let mut kserve = KserveClient::connect(server.grpc.clone()).await.unwrap();
    let x = Tensor::new([1, 3], &[0f32; 3]).unwrap();
    let missing = kserve.infer("nope", None, &[("features", &x)]).await;
    assert_eq!(missing.unwrap_err().code(), Some(tonic::Code::NotFound));
    let wrong_shape = kserve.infer("ranker", None, &[("features", &x)]).await;
    assert_eq!(
        wrong_shape.unwrap_err().code(),
        Some(tonic::Code::InvalidArgument)
    );
}

#[tokio::test]
async fn shared_memory_inputs_and_outputs_are_used_in_place() {
    let server = start_server();
    let mut kserve = KserveClient::connect(server.grpc.clone()).await.unwrap();
    let rows = 4;
    let values = features(rows);
    let inline = kserve
        .infer(
            "ranker",
            None,
            &[(
                "features",
                &Tensor::new([rows as i64, 16], &values).unwrap(),
            )],
        )
        .await
        .unwrap();

    let name = format!("tensorport_rust_client_{}", std::process::id());
    let output_offset = 512;
    let mut region = ShmRegion::create(&name, 4096).unwrap();
    let input_bytes = region.write(0, &values).unwrap();
    kserve.register_region(&region).await.unwrap();
    assert!(kserve.registered_regions().await.unwrap().contains(&name));

    let described = kserve
        .infer_in_region(
            "ranker",
            None,
            &mut region,
            &[ShmInput {
                name: "features",
                datatype: DataType::F32,
                shape: vec![rows as i64, 16],
                offset: 0,
                byte_size: input_bytes,
            }],
            &[ShmOutput {
                name: "score",
                offset: output_offset,
                byte_size: rows * 4,
            }],
        )
        .await
        .unwrap();
    assert_eq!(described.len(), 1);
    assert_eq!(described[0].shape, [rows as i64, 1]);
    // Read where the server wrote, without copying out of the region.
    let in_place: &[f32] = region.read(output_offset, rows).unwrap();
    assert_eq!(in_place, inline[0].1.to_vec::<f32>().unwrap().as_slice());

    kserve.unregister_region(&name).await.unwrap();
    assert!(!kserve.registered_regions().await.unwrap().contains(&name));
    drop(region);
    assert!(!Path::new("/dev/shm").join(&name).exists());
}
