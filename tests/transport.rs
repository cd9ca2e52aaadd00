//! Connection hygiene against the real server on loopback: clients that trickle their bodies,
//! idle connections, the connection cap, and shutdown with connections open.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{TestResult, TestServer};
use tensorport::batcher::BatchSettings;
use tensorport::overload::OverloadSettings;
use tensorport::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorport::proto::inference::ModelMetadataRequest;
use tensorport::transport::TransportSettings;
use tensorport::ServerOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MODELS: &str = "examples/models";
/// Only a bound on how long a broken server may hang a test; nothing waits for it to pass.
const HANG: Duration = Duration::from_secs(60);

async fn start(transport: TransportSettings, max_concurrent_requests: usize) -> TestServer {
    let options = ServerOptions {
        overload: OverloadSettings {
            max_concurrent_requests,
            ..OverloadSettings::default()
        },
        transport,
        ..ServerOptions::default()
    };
    TestServer::start_with(MODELS, BatchSettings::default(), options).await
}

async fn start_with_request_limit(max_request_bytes: usize) -> TestServer {
    let options = ServerOptions {
        max_request_bytes,
        ..ServerOptions::default()
    };
    TestServer::start_with(MODELS, BatchSettings::default(), options).await
}

fn host(url: &str) -> &str {
    url.trim_start_matches("http://")
}

/// Reads until the end of one response head (`\r\n\r\n`), returning it.
async fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(HANG, stream.read(&mut byte))
            .await
            .expect("the server answers")
            .expect("read");
        assert_ne!(n, 0, "connection closed before a full head: {head:?}");
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Reads everything until the server closes the connection.
async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut rest = Vec::new();
    tokio::time::timeout(HANG, stream.read_to_end(&mut rest))
        .await
        .expect("the server closes the connection")
        .ok();
    String::from_utf8_lossy(&rest).into_owned()
}

/// A connection that has had one request answered, so the server has surely accepted it.
async fn open_idle_connection(rest: &str) -> TcpStream {
    let mut stream = TcpStream::connect(rest).await.expect("connect");
    stream
        .write_all(b"GET /v2/health/live HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("write");
    let head = read_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // The answer's (empty) body has no bytes to read; the connection stays open, idle.
    stream
}

async fn metadata_over_grpc(server: &TestServer) -> Result<(), tonic::Status> {
    let mut client = GrpcInferenceServiceClient::connect(server.grpc_url.clone())
        .await
        .map_err(|err| tonic::Status::unavailable(err.to_string()))?;
    client
        .model_metadata(ModelMetadataRequest {
            name: "ranker".into(),
            version: String::new(),
        })
        .await?;
    Ok(())
}

/// Many clients each send a request head and then their body one byte at a time. Before
/// the fix they held every request slot, so every other client got 429 on both ports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickling_bodies_hold_no_request_slots_and_are_cut_off() -> TestResult {
    let slots = 4;
    let server = start(
        TransportSettings {
            body_read_timeout: Duration::from_secs(1),
            ..TransportSettings::default()
        },
        slots,
    )
    .await;
    let rest = host(&server.rest_url).to_owned();
    let mut tricklers = Vec::new();
    for _ in 0..slots * 2 {
        let mut stream = TcpStream::connect(&rest).await?;
        stream
            .write_all(
                b"POST /v2/models/ranker/infer HTTP/1.1\r\nhost: x\r\n\
                  content-type: application/json\r\ncontent-length: 1000\r\n\
                  expect: 100-continue\r\n\r\n",
            )
            .await?;
        // The server sends 100 Continue when it starts reading the body: from here on the
        // request is being served, and (before the fix) held a slot.
        let head = read_head(&mut stream).await;
        assert!(head.starts_with("HTTP/1.1 100"), "{head}");
        stream.write_all(b"{").await?;
        tricklers.push(stream);
    }

    // Twice as many tricklers as slots, and others are still served on both ports.
    let client = reqwest::Client::new();
    for _ in 0..slots {
        let answer = client
            .get(format!("{}/v2/models/ranker", server.rest_url))
            .send()
            .await?;
        assert_eq!(answer.status(), 200);
        metadata_over_grpc(&server).await?;
    }

    // Once the body-read timeout passes, each trickler is answered and disconnected.
    for mut stream in tricklers {
        let rest = read_to_close(&mut stream).await;
        assert!(rest.starts_with("HTTP/1.1 408"), "{rest}");
        assert!(rest.contains("did not arrive within 1000 ms"), "{rest}");
    }
    let answer = client
        .get(format!("{}/v2/models/ranker", server.rest_url))
        .send()
        .await?;
    assert_eq!(answer.status(), 200);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_announced_over_the_limit_is_refused_without_being_waited_for() -> TestResult {
    let server = start_with_request_limit(1 << 20).await;
    let mut stream = TcpStream::connect(host(&server.rest_url)).await?;
    // 10 MiB announced, none sent: the answer cannot depend on the body arriving.
    stream
        .write_all(
            b"POST /v2/models/ranker/infer HTTP/1.1\r\nhost: x\r\n\
              content-type: application/json\r\ncontent-length: 10485760\r\n\r\n",
        )
        .await?;
    let head = read_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    server.stop().await;
    Ok(())
}

/// A chunked body announces no size: the transport reads up to the limit and the handler
/// refuses the rest, on either way a request reaches its handler (the hot KServe and TF
/// Serving routes, and the router, which a percent-escaped model name takes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_over_the_limit_is_refused_on_every_route() -> TestResult {
    let server = start_with_request_limit(64 << 10).await;
    for path in [
        "/v2/models/ranker/infer",
        "/v2/models/rank%65r/infer",
        "/v1/models/ranker:predict",
        "/v2/repository/models/ranker/load",
    ] {
        let mut stream = TcpStream::connect(host(&server.rest_url)).await?;
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             transfer-encoding: chunked\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await?;
        // 80 KiB in 8 KiB chunks, then the end: more than the 64 KiB the server takes.
        let chunk = vec![b' '; 8 << 10];
        for _ in 0..10 {
            stream.write_all(b"2000\r\n").await?;
            stream.write_all(&chunk).await?;
            stream.write_all(b"\r\n").await?;
        }
        stream.write_all(b"0\r\n\r\n").await?;
        let head = read_head(&mut stream).await;
        assert!(head.starts_with("HTTP/1.1 413"), "{path}: {head}");
    }
    // The server is unharmed: the same model answers a request of allowed size.
    let answer = reqwest::Client::new()
        .post(format!("{}/v2/models/ranker/infer", server.rest_url))
        .body(r#"{"inputs":[{"name":"features","datatype":"FP32","shape":[1,16],"data":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}]}"#)
        .send()
        .await?;
    assert_eq!(answer.status(), 200);
    server.stop().await;
    Ok(())
}

/// A body sent in one-byte chunks is charged what it holds. Charged a KiB per chunk, as it
/// once was, this 64 KiB body took 64 MiB of a 2 MiB receive budget and waited until its
/// read timed out, although a body of the largest allowed size must always fit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_in_one_byte_chunks_is_charged_its_size() -> TestResult {
    let options = ServerOptions {
        max_request_bytes: 1 << 20,
        transport: TransportSettings {
            max_receiving_bytes: 0,
            ..TransportSettings::default()
        },
        ..ServerOptions::default()
    };
    let server = TestServer::start_with(MODELS, BatchSettings::default(), options).await;
    let mut stream = TcpStream::connect(host(&server.rest_url)).await?;
    let json = br#"{"inputs": [{"name": "features", "shape": [1, 16], "datatype": "FP32",
        "data": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]}]"#;
    let mut body = json.to_vec();
    body.resize(64 * 1024 - 1, b' ');
    body.push(b'}');
    let mut wire = b"POST /v2/models/ranker/infer HTTP/1.1\r\nhost: x\r\n\
        content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
        .to_vec();
    for byte in body {
        wire.extend_from_slice(b"1\r\n");
        wire.push(byte);
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(b"0\r\n\r\n");
    stream.write_all(&wire).await?;
    let head = read_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    server.stop().await;
    Ok(())
}

/// A gRPC call with `message` as its one length-prefixed message, over a raw HTTP/2 client.
fn grpc_request(server: &TestServer, method: &str) -> http::Request<()> {
    http::Request::post(format!(
        "{}/inference.GRPCInferenceService/{method}",
        server.grpc_url
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .expect("request")
}

fn grpc_frame(message: &impl prost::Message) -> bytes::Bytes {
    let body = message.encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&u32::try_from(body.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(&body);
    frame.into()
}

/// The gRPC status of an answer: in its headers (an error), else in its trailers.
async fn grpc_status(response: h2::client::ResponseFuture) -> String {
    let response = tokio::time::timeout(HANG, response)
        .await
        .expect("answered")
        .expect("response");
    if let Some(status) = response.headers().get("grpc-status") {
        return status.to_str().unwrap().to_owned();
    }
    let mut body = response.into_body();
    while let Some(data) = body.data().await {
        let data = data.expect("data");
        body.flow_control().release_capacity(data.len()).ok();
    }
    let trailers = body.trailers().await.expect("trailers").expect("some");
    trailers["grpc-status"].to_str().unwrap().to_owned()
}

/// The same over HTTP/2: gRPC calls whose message never finishes arriving. They share the
/// connection with an ordinary call sent after them, which the server therefore takes up
/// after them; before the fix they held the slots it needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_grpc_messages_hold_no_request_slots_and_are_cut_off() -> TestResult {
    let slots = 2;
    let server = start(
        TransportSettings {
            body_read_timeout: Duration::from_secs(1),
            ..TransportSettings::default()
        },
        slots,
    )
    .await;
    let tcp = TcpStream::connect(host(&server.grpc_url)).await?;
    let (client, connection) = h2::client::handshake(tcp).await?;
    tokio::spawn(connection);
    let mut client = client.ready().await?;
    let mut trickling = Vec::new();
    for _ in 0..slots * 2 {
        let (response, mut send) =
            client.send_request(grpc_request(&server, "ModelInfer"), false)?;
        // A message header announcing 100 bytes, and then nothing.
        send.send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 100]), false)?;
        trickling.push((response, send));
        client = client.ready().await?;
    }
    let metadata = ModelMetadataRequest {
        name: "ranker".into(),
        version: String::new(),
    };
    let (response, mut send) =
        client.send_request(grpc_request(&server, "ModelMetadata"), false)?;
    send.send_data(grpc_frame(&metadata), true)?;
    assert_eq!(grpc_status(response).await, "0");

    for (response, _send) in trickling {
        // DEADLINE_EXCEEDED: the message did not arrive within the body-read timeout.
        assert_eq!(grpc_status(response).await, "4");
    }
    metadata_over_grpc(&server).await?;
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_wait_until_others_close() -> TestResult {
    let cap = 4;
    let server = start(
        TransportSettings {
            max_connections: Some(cap),
            // The idle connections must stay open for the length of the test.
            idle_timeout: Duration::from_secs(600),
            ..TransportSettings::default()
        },
        512,
    )
    .await;
    let rest = host(&server.rest_url).to_owned();
    let mut idle = Vec::new();
    for _ in 0..cap {
        idle.push(open_idle_connection(&rest).await);
    }

    // A new client (HTTP or gRPC: they share the cap) is not accepted while the cap is full.
    let url = format!("{}/v2/health/live", server.rest_url);
    let mut waiting = tokio::spawn(async move {
        let client = reqwest::Client::new();
        client.get(url).send().await.map(|answer| answer.status())
    });
    let early = tokio::time::timeout(Duration::from_millis(300), &mut waiting).await;
    assert!(
        early.is_err(),
        "a connection over the cap was served: {early:?}"
    );

    // Once the idle connections close, it is.
    drop(idle);
    let status = tokio::time::timeout(HANG, waiting).await???;
    assert_eq!(status, 200);
    metadata_over_grpc(&server).await?;
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_silent_connections_are_closed() -> TestResult {
    let server = start(
        TransportSettings {
            idle_timeout: Duration::from_secs(1),
            header_read_timeout: Duration::from_secs(1),
            ..TransportSettings::default()
        },
        512,
    )
    .await;
    let rest = host(&server.rest_url).to_owned();
    let mut after_a_request = open_idle_connection(&rest).await;
    let mut silent = TcpStream::connect(&rest).await?;
    let mut half_a_head = TcpStream::connect(&rest).await?;
    half_a_head
        .write_all(b"GET /v2/health/live HTTP/1.1\r\n")
        .await?;
    let mut silent_grpc = TcpStream::connect(host(&server.grpc_url)).await?;
    for stream in [
        &mut after_a_request,
        &mut silent,
        &mut half_a_head,
        &mut silent_grpc,
    ] {
        // Closed by the server: the read ends (with no answer, or an error status).
        read_to_close(stream).await;
    }
    server.stop().await;
    Ok(())
}

/// An idle kept-alive connection is held to the idle timeout, not to the (shorter)
/// header-read timeout, which only starts with the first byte of the next head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_outlives_the_header_timeout_while_idle() -> TestResult {
    let server = start(
        TransportSettings {
            header_read_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(600),
            ..TransportSettings::default()
        },
        512,
    )
    .await;
    let mut kept = open_idle_connection(host(&server.rest_url)).await;
    let mut body = [0u8; 13];
    kept.read_exact(&mut body).await?;
    // Longer than the header-read timeout; only a wrong server closes the connection here.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    kept.write_all(b"GET /v2/health/live HTTP/1.1\r\nhost: x\r\n\r\n")
        .await?;
    let head = read_head(&mut kept).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    server.stop().await;
    Ok(())
}

/// An HTTP/2 client that stops answering is found out by the server's pings, even while the
/// idle timeout is far off: here it speaks the preface and never acknowledges anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_peer_that_does_not_answer_pings_is_disconnected() -> TestResult {
    let server = start(
        TransportSettings {
            idle_timeout: Duration::from_secs(600),
            http2_keepalive_interval: Some(Duration::from_secs(1)),
            http2_keepalive_timeout: Duration::from_secs(1),
            ..TransportSettings::default()
        },
        512,
    )
    .await;
    let mut stream = TcpStream::connect(host(&server.grpc_url)).await?;
    // The preface and an empty SETTINGS frame.
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await?;
    stream.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await?;
    // Read frames (reading acknowledges nothing) until the server closes the connection.
    let mut pinged = false;
    loop {
        let mut header = [0u8; 9];
        match tokio::time::timeout(HANG, stream.read_exact(&mut header)).await {
            Err(_) => panic!("the server never closed the connection"),
            Ok(Err(_)) => break,
            Ok(Ok(_)) => {}
        }
        let length =
            usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
        let (kind, flags) = (header[3], header[4]);
        // PING, not an acknowledgement.
        pinged |= kind == 6 && flags & 1 == 0;
        let mut payload = vec![0u8; length];
        if stream.read_exact(&mut payload).await.is_err() {
            break;
        }
    }
    assert!(
        pinged,
        "the server closed the connection without pinging it"
    );
    metadata_over_grpc(&server).await?;
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_idle_connections_do_not_hold_up_shutdown() -> TestResult {
    let server = start(TransportSettings::default(), 512).await;
    let rest = host(&server.rest_url).to_owned();
    let mut idle = open_idle_connection(&rest).await;
    let mut client = GrpcInferenceServiceClient::connect(server.grpc_url.clone()).await?;
    client
        .model_metadata(ModelMetadataRequest {
            name: "ranker".into(),
            version: String::new(),
        })
        .await?;
    tokio::time::timeout(HANG, server.stop())
        .await
        .expect("shutdown ends with idle connections open");
    // The server closed the idle connection on its way out.
    read_to_close(&mut idle).await;
    drop(client);
    Ok(())
}
