//! Attacks on the admin APIs (TF Serving's HandleReloadConfigRequest, KServe repository load
//! and unload over HTTP and gRPC), each against the real server over real sockets: the
//! attacker gets a clear error, no path of the server's machine, and the server keeps serving.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::{repo_path, TestResult, TestServer};
use serde_json::{json, Value};
use tensorport::batcher::BatchSettings;
use tensorport::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorport::proto::inference::model_repository_parameter::ParameterChoice;
use tensorport::proto::inference::{
    ModelRepositoryParameter, RepositoryModelLoadRequest, RepositoryModelUnloadRequest,
};
use tensorport::proto::tensorflow::serving::model_server_config::Config;
use tensorport::proto::tensorflow::serving::model_service_client::ModelServiceClient;
use tensorport::proto::tensorflow::serving::{
    ModelConfig, ModelConfigList, ModelServerConfig, ReloadConfigRequest,
};
use tensorport::ServerOptions;
use tonic::Code;

/// A scratch folder with a model directory (`models/`: ranker, and a broken model) and a
/// folder beside it (`outside/`: another ranker) that the server must not reach.
struct Scratch {
    base: PathBuf,
}

impl Scratch {
    fn new(tag: &str) -> Self {
        let base =
            std::env::temp_dir().join(format!("tensorport-admin-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        copy_dir(
            &repo_path("examples/models/ranker"),
            &base.join("models/ranker"),
        );
        copy_dir(
            &repo_path("tests/models/broken"),
            &base.join("models/broken"),
        );
        copy_dir(
            &repo_path("examples/models/ranker"),
            &base.join("outside/ranker"),
        );
        // A link inside the model directory that leads out of it.
        std::os::unix::fs::symlink(base.join("outside"), base.join("models/escape"))
            .expect("symlink");
        Self { base }
    }

    fn models(&self) -> PathBuf {
        self.base.join("models")
    }

    /// Whether `message` gives away where the server's files are.
    fn assert_no_paths(&self, message: &str) {
        let base = self.base.display().to_string();
        assert!(!message.contains(&base), "message shows a path: {message}");
        assert!(!message.contains("/tmp"), "message shows a path: {message}");
        assert!(
            !message.contains("/proc"),
            "message shows a path: {message}"
        );
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create folder");
    for entry in std::fs::read_dir(from).expect("read folder") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy file");
        }
    }
}

async fn start(scratch: &Scratch) -> TestServer {
    TestServer::start_with(
        &scratch.models().display().to_string(),
        BatchSettings::default(),
        ServerOptions::default(),
    )
    .await
}

/// A normal request still succeeds: the attack disturbed nothing.
async fn ranker_serves(server: &TestServer) {
    let body: Value = reqwest::Client::new()
        .post(format!("{}/v1/models/ranker:predict", server.rest_url))
        .json(&json!({ "instances": [vec![0.5f32; 16]] }))
        .send()
        .await
        .expect("predict")
        .json()
        .await
        .expect("JSON");
    assert!(body["predictions"].is_array(), "{body}");
}

/// `POST path` written byte for byte, so that no client normalises the path first; returns
/// the status code and the body.
async fn raw_post(server: &TestServer, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = server.rest_url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("read");
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn model(name: &str, base_path: &str) -> ModelConfig {
    ModelConfig {
        name: name.into(),
        base_path: base_path.into(),
        ..Default::default()
    }
}

fn reload(models: Vec<ModelConfig>) -> ReloadConfigRequest {
    ReloadConfigRequest {
        config: Some(ModelServerConfig {
            config: Some(Config::ModelConfigList(ModelConfigList { config: models })),
        }),
        metric_names: Vec::new(),
    }
}

#[tokio::test]
async fn reload_config_refuses_path_like_names() -> TestResult {
    let scratch = Scratch::new("names");
    let server = start(&scratch).await;
    let mut client = ModelServiceClient::connect(server.grpc_url.clone()).await?;
    for name in ["../outside/ranker", "/etc", "a/b", "..", ".", "x\0y", ""] {
        let status = client
            .handle_reload_config_request(reload(vec![model(name, "")]))
            .await
            .expect_err(name);
        assert_eq!(status.code(), Code::InvalidArgument, "{name:?}: {status:?}");
        assert!(status.message().contains("name"), "{}", status.message());
        scratch.assert_no_paths(status.message());
        ranker_serves(&server).await;
    }
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn reload_config_keeps_base_paths_under_the_model_directory() -> TestResult {
    let scratch = Scratch::new("base-path");
    let server = start(&scratch).await;
    let mut client = ModelServiceClient::connect(server.grpc_url.clone()).await?;
    let outside = scratch.base.join("outside/ranker").display().to_string();
    for base_path in [
        "/proc",
        "/proc/self",
        "/",
        outside.as_str(),
        "../outside/ranker",
        "ranker/../../outside/ranker",
        "escape/ranker",
        "does-not-exist",
    ] {
        let status = client
            .handle_reload_config_request(reload(vec![model("stolen", base_path)]))
            .await
            .expect_err(base_path);
        assert_eq!(
            status.code(),
            Code::PermissionDenied,
            "{base_path}: {status:?}"
        );
        assert!(status.message().contains("base_path"), "{status:?}");
        scratch.assert_no_paths(status.message());
        ranker_serves(&server).await;
    }
    // Nothing was swapped in: the original models still serve and "stolen" is unknown.
    let missing = reqwest::get(format!("{}/v1/models/stolen", server.rest_url)).await?;
    assert_eq!(missing.status(), 404);

    // A base_path inside the model directory, absolute or relative, is fine.
    let inside = scratch.models().join("ranker").display().to_string();
    for base_path in [inside.as_str(), "ranker", ""] {
        client
            .handle_reload_config_request(reload(vec![model("ranker", base_path)]))
            .await?;
        ranker_serves(&server).await;
    }
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn an_empty_config_list_is_refused_and_everything_keeps_serving() -> TestResult {
    let scratch = Scratch::new("empty");
    let server = start(&scratch).await;
    let mut client = ModelServiceClient::connect(server.grpc_url.clone()).await?;
    let status = client
        .handle_reload_config_request(reload(Vec::new()))
        .await
        .expect_err("an empty list");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("empty"), "{status:?}");
    ranker_serves(&server).await;
    let ready = reqwest::get(format!("{}/v2/health/ready", server.rest_url)).await?;
    assert_eq!(ready.status(), 200);
    let model_ready = reqwest::get(format!("{}/v2/models/ranker/ready", server.rest_url)).await?;
    assert_eq!(model_ready.status(), 200);

    let twice = client
        .handle_reload_config_request(reload(vec![model("ranker", ""), model("ranker", "")]))
        .await
        .expect_err("a model listed twice");
    assert_eq!(twice.code(), Code::InvalidArgument);
    ranker_serves(&server).await;
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn kserve_load_and_unload_refuse_path_like_names() -> TestResult {
    let scratch = Scratch::new("kserve-names");
    let server = start(&scratch).await;
    let http = reqwest::Client::new();
    // HTTP clients resolve `..` segments themselves; a raw request sends them as they are.
    for verb in ["load", "unload"] {
        for name in ["..", "%2E%2E", "."] {
            let (status, body) =
                raw_post(&server, &format!("/v2/repository/models/{name}/{verb}")).await;
            assert_eq!(status, 400, "{name} {verb}: {body}");
            assert!(body.contains("plain name"), "{body}");
        }
        for encoded in [
            "..%2Foutside%2Franker",
            "%2Fetc",
            "a%00b",
            "escape%2Franker",
        ] {
            let url = format!("{}/v2/repository/models/{encoded}/{verb}", server.rest_url);
            let response = http.post(&url).send().await?;
            assert_eq!(response.status(), 400, "{url}");
            let body: Value = response.json().await?;
            let message = body["error"].as_str().unwrap_or_default();
            assert!(message.contains("plain name"), "{url}: {body}");
            scratch.assert_no_paths(message);
            ranker_serves(&server).await;
        }
    }

    let mut grpc = GrpcInferenceServiceClient::connect(server.grpc_url.clone()).await?;
    for name in ["../outside/ranker", "/etc/passwd", "escape/ranker", ""] {
        let load = grpc
            .repository_model_load(RepositoryModelLoadRequest {
                model_name: name.into(),
                ..Default::default()
            })
            .await
            .expect_err(name);
        assert_eq!(load.code(), Code::InvalidArgument, "{name}: {load:?}");
        let unload = grpc
            .repository_model_unload(RepositoryModelUnloadRequest {
                model_name: name.into(),
                ..Default::default()
            })
            .await
            .expect_err(name);
        assert_eq!(unload.code(), Code::InvalidArgument, "{name}: {unload:?}");
        scratch.assert_no_paths(load.message());
        ranker_serves(&server).await;
    }
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn kserve_load_with_file_overrides_is_refused() -> TestResult {
    let scratch = Scratch::new("file-overrides");
    let server = start(&scratch).await;
    let url = format!("{}/v2/repository/models/ranker/load", server.rest_url);
    let http = reqwest::Client::new();
    for parameters in [
        json!({ "file:1/model.onnx": "AAAA" }),
        json!({ "config": "{\"backend\": \"onnxruntime\"}" }),
    ] {
        let response = http
            .post(&url)
            .json(&json!({ "parameters": parameters }))
            .send()
            .await?;
        assert_eq!(response.status(), 400, "{parameters}");
        let body: Value = response.json().await?;
        let message = body["error"].as_str().unwrap_or_default();
        assert!(message.contains("not supported"), "{body}");
        ranker_serves(&server).await;
    }

    let mut grpc = GrpcInferenceServiceClient::connect(server.grpc_url.clone()).await?;
    let mut parameters = HashMap::new();
    parameters.insert(
        "file:1/model.onnx".to_owned(),
        ModelRepositoryParameter {
            parameter_choice: Some(ParameterChoice::BytesParam(vec![0u8; 4].into())),
        },
    );
    let status = grpc
        .repository_model_load(RepositoryModelLoadRequest {
            model_name: "ranker".into(),
            parameters,
            ..Default::default()
        })
        .await
        .expect_err("file: override");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("file:"), "{status:?}");

    // A plain load still works.
    let ok = http.post(&url).send().await?;
    assert_eq!(ok.status(), 200);
    ranker_serves(&server).await;
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn status_and_index_messages_show_no_server_paths() -> TestResult {
    let scratch = Scratch::new("messages");
    let server = start(&scratch).await;
    let status: Value = reqwest::get(format!("{}/v1/models/broken", server.rest_url))
        .await?
        .json()
        .await?;
    let text = status.to_string();
    assert!(text.contains("<model-dir>"), "{text}");
    scratch.assert_no_paths(&text);

    let index: Value = reqwest::Client::new()
        .post(format!("{}/v2/repository/index", server.rest_url))
        .send()
        .await?
        .json()
        .await?;
    let text = index.to_string();
    assert!(text.contains("broken"), "{text}");
    scratch.assert_no_paths(&text);

    let load = reqwest::Client::new()
        .post(format!(
            "{}/v2/repository/models/broken/load",
            server.rest_url
        ))
        .send()
        .await?;
    assert!(load.status().is_client_error(), "{}", load.status());
    let text = load.text().await?;
    scratch.assert_no_paths(&text);
    ranker_serves(&server).await;
    server.stop().await;
    Ok(())
}
