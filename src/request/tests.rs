use super::*;

#[test]
fn grpc_timeouts_parse_every_unit() {
    let cases = [
        ("1H", Duration::from_secs(3600)),
        ("2M", Duration::from_secs(120)),
        ("3S", Duration::from_secs(3)),
        ("250m", Duration::from_millis(250)),
        ("99999999u", Duration::from_micros(99_999_999)),
        ("7n", Duration::from_nanos(7)),
    ];
    for (text, expected) in cases {
        assert_eq!(parse_grpc_timeout(text), Ok(expected), "{text}");
    }
    for bad in ["", "S", "123456789S", "10", "10x", "-1S", "1.5S", " 1S"] {
        assert!(parse_grpc_timeout(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn http_timeouts_are_milliseconds() {
    assert_eq!(parse_http_timeout("1500"), Ok(Duration::from_millis(1500)));
    assert!(parse_http_timeout("1.5").is_err());
    assert!(parse_http_timeout("-3").is_err());
}

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
