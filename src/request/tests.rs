use super::*;

#[test]
fn protocols_follow_the_path() {
    assert_eq!(
        Protocol::of_grpc_path("/tensorflow.serving.PredictionService/Predict"),
        Protocol::TfServingGrpc
    );
    assert_eq!(
        Protocol::of_grpc_path("/inference.GRPCInferenceService/ModelInfer"),
        Protocol::KserveGrpc
    );
    assert_eq!(
        Protocol::of_http_path("/v1/models/m:predict"),
        Protocol::TfServingRest
    );
    assert_eq!(
        Protocol::of_http_path("/v2/models/m/infer"),
        Protocol::KserveHttp
    );
    assert_eq!(Protocol::of_http_path("/metrics"), Protocol::Other);
    assert!(is_probe("/grpc.health.v1.Health/Check"));
    assert!(is_probe("/v2/health/ready"));
    assert!(!is_probe("/v2/models/m/ready"));
}

#[test]
fn client_ids_are_kept_when_sane_and_replaced_otherwise() {
    let ids = RequestIds::new();
    let mut headers = HeaderMap::new();
    headers.insert(REQUEST_ID_HEADER, "abc-123".parse().unwrap());
    assert_eq!(ids.for_request(&headers), "abc-123");
    headers.insert(REQUEST_ID_HEADER, "has space".parse().unwrap());
    let generated = ids.for_request(&headers);
    assert_ne!(generated, "has space");
    assert_ne!(ids.for_request(&HeaderMap::new()), generated);
}

#[tokio::test(start_paused = true)]
async fn the_earlier_deadline_wins() {
    let now = Instant::now();
    let context = RequestContext::new(
        HeaderValue::from_static("x"),
        Protocol::KserveHttp,
        Some(now + Duration::from_secs(1)),
    );
    assert_eq!(
        context.deadline_within(Some(Duration::from_millis(10))),
        Some(now + Duration::from_millis(10))
    );
    assert_eq!(
        context.deadline_within(Some(Duration::from_secs(5))),
        Some(now + Duration::from_secs(1))
    );
    assert_eq!(context.deadline_within(None), context.deadline());
}
