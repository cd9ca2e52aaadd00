//! `--auth-token-file` on both ports, against the real server over real sockets: requests
//! without a token, with an unknown one, and with one that lacks the route's group are refused
//! (401 / UNAUTHENTICATED, 403 / PERMISSION_DENIED), and an authorised request still succeeds
//! after each.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use common::{TestResult, TestServer};
use serde_json::{json, Value};
use tensorport::auth::Access;
use tensorport::batcher::BatchSettings;
use tensorport::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorport::proto::inference::{
    ModelInferRequest, RepositoryModelLoadRequest, ServerLiveRequest,
    SystemSharedMemoryStatusRequest,
};
use tensorport::proto::tensorflow::serving::model_service_client::ModelServiceClient;
use tensorport::proto::tensorflow::serving::{GetModelStatusRequest, ModelSpec};
use tensorport::ServerOptions;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Request};

const ADMIN: &str = "admin-token-0123456789abcdef";
const CLIENT: &str = "client-token-0123456789abcdef";
const SCRAPER: &str = "scraper-token-0123456789abcdef";
const READER: &str = "reader-token-0123456789abcdef";
const WRONG: &str = "wrong-token-0123456789abcdefg";

const TOKENS: &str = "\
# TOKEN                          GROUPS               NAME
admin-token-0123456789abcdef     *                    operator
client-token-0123456789abcdef    inference,metadata   ranking-service
scraper-token-0123456789abcdef   metrics              prometheus
reader-token-0123456789abcdef    metadata             dashboard
";

async fn start() -> TestServer {
    let options = ServerOptions {
        auth: Access::parse(TOKENS).expect("valid token file"),
        ..ServerOptions::default()
    };
    TestServer::start_with("examples/models", BatchSettings::default(), options).await
}

fn ranker_body() -> Value {
    json!({
        "inputs": [{
            "name": "features", "shape": [1, 16], "datatype": "FP32", "data": vec![0.5f32; 16],
        }]
    })
}

/// An authorised KServe HTTP inference succeeds: the server keeps serving.
async fn authorised_inference_works(server: &TestServer) {
    let response = reqwest::Client::new()
        .post(format!("{}/v2/models/ranker/infer", server.rest_url))
        .bearer_auth(CLIENT)
        .json(&ranker_body())
        .send()
        .await
        .expect("infer");
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn http_requests_need_a_token_with_the_route_s_group() -> TestResult {
    let server = start().await;
    let http = reqwest::Client::new();
    let infer = format!("{}/v2/models/ranker/infer", server.rest_url);
    let predict = format!("{}/v1/models/ranker:predict", server.rest_url);
    let load = format!("{}/v2/repository/models/ranker/load", server.rest_url);
    let shm = format!("{}/v2/systemsharedmemory/status", server.rest_url);
    let metrics = format!("{}/metrics", server.rest_url);

    // No token, or an unknown one: 401 with the scheme to use.
    for request in [
        http.post(&infer).json(&ranker_body()),
        http.post(&infer).bearer_auth(WRONG).json(&ranker_body()),
        http.post(&infer)
            .header("authorization", format!("Basic {CLIENT}"))
            .json(&ranker_body()),
        http.post(&infer).bearer_auth("").json(&ranker_body()),
        http.post(&load),
        http.get(&shm).bearer_auth(&CLIENT[..CLIENT.len() - 1]),
        http.get(&metrics),
    ] {
        let response = request.send().await?;
        assert_eq!(response.status(), 401);
        assert_eq!(
            response
                .headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok()),
            Some("Bearer")
        );
        let body: Value = response.json().await?;
        assert!(body["error"].as_str().is_some_and(|e| e.contains("token")));
        assert!(!body.to_string().contains(CLIENT), "{body}");
        authorised_inference_works(&server).await;
    }

    // A known token without the group: 403, naming the group.
    for (request, group) in [
        (http.post(&load).bearer_auth(CLIENT), "model-repository"),
        (http.get(&shm).bearer_auth(CLIENT), "shared-memory"),
        (http.get(&metrics).bearer_auth(CLIENT), "metrics"),
        (
            http.post(&infer).bearer_auth(SCRAPER).json(&ranker_body()),
            "inference",
        ),
        (
            http.post(&predict)
                .bearer_auth(SCRAPER)
                .json(&json!({ "instances": [vec![0.5f32; 16]] })),
            "inference",
        ),
    ] {
        let response = request.send().await?;
        assert_eq!(response.status(), 403);
        let body: Value = response.json().await?;
        let message = body["error"].as_str().unwrap_or_default();
        assert!(message.contains(group), "{body}");
        authorised_inference_works(&server).await;
    }

    // The grants themselves.
    let ok = [
        http.post(&predict)
            .bearer_auth(CLIENT)
            .json(&json!({ "instances": [vec![0.5f32; 16]] })),
        http.get(format!("{}/v1/models/ranker", server.rest_url))
            .bearer_auth(CLIENT),
        http.get(&metrics).bearer_auth(SCRAPER),
        http.post(&load).bearer_auth(ADMIN),
        http.get(&shm).bearer_auth(ADMIN),
        // Probes are open without a token.
        http.get(format!("{}/v2/health/ready", server.rest_url)),
        http.get(format!("{}/livez", server.rest_url)),
        http.get(format!("{}/v2/models/ranker/ready", server.rest_url)),
    ];
    for request in ok {
        let response = request.send().await?;
        assert_eq!(response.status(), 200, "{}", response.url());
    }

    // A path no route serves: 401 without a token, the router's 404 with one.
    let nowhere = format!("{}/v2/nowhere", server.rest_url);
    assert_eq!(http.get(&nowhere).send().await?.status(), 401);
    assert_eq!(
        http.get(&nowhere)
            .bearer_auth(SCRAPER)
            .send()
            .await?
            .status(),
        404
    );
    server.stop().await;
    Ok(())
}

/// A verb spelled with a percent-escape is still the verb: the auth layer decodes the path
/// as the TF Serving dispatcher does, so `m%3Apredict` needs the inference group exactly as
/// `m:predict` does (it once passed as metadata and ran the model).
#[tokio::test]
async fn escaped_tf_serving_verbs_need_the_inference_group() -> TestResult {
    let server = start().await;
    let http = reqwest::Client::new();
    let instances = json!({ "instances": [vec![0.5f32; 16]] });
    let examples = json!({ "examples": [{ "x": 1.0 }] });
    for (path, body) in [
        ("ranker:predict", &instances),
        ("ranker%3Apredict", &instances),
        ("ranker%3apredict", &instances),
        ("ranker/versions/1%3Apredict", &instances),
        ("ranker%2Fversions%2F1%3Apredict", &instances),
        ("ranker%3Aclassify", &examples),
        ("ranker%3Aregress", &examples),
    ] {
        let url = format!("{}/v1/models/{path}", server.rest_url);
        for token in [Some(READER), Some(SCRAPER), None] {
            let mut request = http.post(&url).json(body);
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let response = request.send().await?;
            let status = response.status();
            let text = response.text().await?;
            let want = if token.is_some() { 403 } else { 401 };
            assert_eq!(status, want, "{path} with {token:?}: {text}");
            assert!(!text.contains("predictions"), "{path}: {text}");
        }
    }
    // The reader's own group still works, escaped or not, and the client's grant runs the
    // escaped verb as the plain one.
    for path in ["ranker", "ranker/metadata", "ranker%2Fmetadata"] {
        let response = http
            .get(format!("{}/v1/models/{path}", server.rest_url))
            .bearer_auth(READER)
            .send()
            .await?;
        assert_eq!(response.status(), 200, "{path}");
    }
    let response = http
        .post(format!("{}/v1/models/ranker%3Apredict", server.rest_url))
        .bearer_auth(CLIENT)
        .json(&instances)
        .send()
        .await?;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await?;
    assert!(body["predictions"].is_array(), "{body}");
    server.stop().await;
    Ok(())
}

fn with_token<T>(message: T, token: Option<&str>) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(token) = token {
        let value: MetadataValue<_> = format!("Bearer {token}").parse().expect("metadata");
        request.metadata_mut().insert("authorization", value);
    }
    request
}

fn ranker_infer() -> ModelInferRequest {
    use tensorport::proto::inference::model_infer_request::InferInputTensor;
    let bytes: Vec<u8> = [0.5f32; 16].iter().flat_map(|v| v.to_le_bytes()).collect();
    ModelInferRequest {
        model_name: "ranker".into(),
        inputs: vec![InferInputTensor {
            name: "features".into(),
            datatype: "FP32".into(),
            shape: vec![1, 16],
            ..Default::default()
        }],
        raw_input_contents: vec![bytes.into()],
        ..Default::default()
    }
}

async fn authorised_grpc_inference_works(kserve: &mut GrpcInferenceServiceClient<Channel>) {
    kserve
        .model_infer(with_token(ranker_infer(), Some(CLIENT)))
        .await
        .expect("an authorised inference");
}

#[tokio::test]
async fn grpc_methods_need_a_token_with_the_method_s_group() -> TestResult {
    let server = start().await;
    let mut kserve = GrpcInferenceServiceClient::connect(server.grpc_url.clone()).await?;
    let mut tf = ModelServiceClient::connect(server.grpc_url.clone()).await?;

    for token in [None, Some(WRONG), Some("")] {
        let status = kserve
            .model_infer(with_token(ranker_infer(), token))
            .await
            .expect_err("no known token");
        assert_eq!(
            status.code(),
            Code::Unauthenticated,
            "{token:?}: {status:?}"
        );
        assert!(status.message().contains("token"), "{status:?}");
        authorised_grpc_inference_works(&mut kserve).await;
    }

    let load = kserve
        .repository_model_load(with_token(
            RepositoryModelLoadRequest {
                model_name: "ranker".into(),
                ..Default::default()
            },
            Some(CLIENT),
        ))
        .await
        .expect_err("client may not load");
    assert_eq!(load.code(), Code::PermissionDenied);
    assert!(load.message().contains("model-repository"), "{load:?}");
    authorised_grpc_inference_works(&mut kserve).await;

    let shm = kserve
        .system_shared_memory_status(with_token(
            SystemSharedMemoryStatusRequest::default(),
            Some(SCRAPER),
        ))
        .await
        .expect_err("scraper may not list regions");
    assert_eq!(shm.code(), Code::PermissionDenied);
    authorised_grpc_inference_works(&mut kserve).await;

    let status_request = || GetModelStatusRequest {
        model_spec: Some(ModelSpec {
            name: "ranker".into(),
            ..Default::default()
        }),
    };
    let denied = tf
        .get_model_status(with_token(status_request(), Some(SCRAPER)))
        .await
        .expect_err("scraper may not read metadata");
    assert_eq!(denied.code(), Code::PermissionDenied);
    tf.get_model_status(with_token(status_request(), Some(CLIENT)))
        .await?;

    // The administrator may load; probes need no token.
    kserve
        .repository_model_load(with_token(
            RepositoryModelLoadRequest {
                model_name: "ranker".into(),
                ..Default::default()
            },
            Some(ADMIN),
        ))
        .await?;
    kserve
        .server_live(with_token(ServerLiveRequest {}, None))
        .await?;
    authorised_grpc_inference_works(&mut kserve).await;
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn health_can_be_closed_too() -> TestResult {
    let options = ServerOptions {
        auth: Access::parse(&format!("{TOKENS}- none\n"))?,
        ..ServerOptions::default()
    };
    let server = TestServer::start_with("examples/models", BatchSettings::default(), options).await;
    let http = reqwest::Client::new();
    let ready = format!("{}/v2/health/ready", server.rest_url);
    assert_eq!(http.get(&ready).send().await?.status(), 401);
    assert_eq!(
        http.get(&ready).bearer_auth(CLIENT).send().await?.status(),
        403
    );
    assert_eq!(
        http.get(&ready).bearer_auth(ADMIN).send().await?.status(),
        200
    );
    let mut kserve = GrpcInferenceServiceClient::connect(server.grpc_url.clone()).await?;
    let live = kserve
        .server_live(with_token(ServerLiveRequest {}, None))
        .await
        .expect_err("probes closed");
    assert_eq!(live.code(), Code::Unauthenticated);
    authorised_grpc_inference_works(&mut kserve).await;
    server.stop().await;
    Ok(())
}
