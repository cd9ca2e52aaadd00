//! Response helpers shared by the REST protocols: JSON bodies and the `{"error": "..."}` shape
//! both TF Serving and KServe specify.

use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::error::Error;

/// An error response: status from the mapping table, body `{"error": message}`.
#[derive(Debug)]
pub struct RestError {
    status: StatusCode,
    message: String,
    /// The `Allow` header a 405 must carry (RFC 9110).
    allow: Option<&'static str>,
}

impl RestError {
    /// An error the HTTP layer itself answers, outside the protocol error table.
    pub fn with_status(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            allow: None,
        }
    }

    pub fn not_found_path(path: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: format!("no such endpoint: {path}"),
            allow: None,
        }
    }

    /// A 405 for `method` on `path`, which answers only `allow` (e.g. "GET").
    pub fn method_not_allowed(method: &Method, path: &str, allow: &'static str) -> Self {
        Self {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: format!("{method} is not allowed on {path}"),
            allow: Some(allow),
        }
    }
}

impl From<Error> for RestError {
    fn from(err: Error) -> Self {
        let status = StatusCode::from_u16(err.kind().table().http_status)
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        Self {
            status,
            message: err.to_string(),
            allow: None,
        }
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let mut response = json_response(&serde_json::json!({ "error": self.message }));
        *response.status_mut() = self.status;
        if let Some(allow) = self.allow {
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        if self.status == StatusCode::TOO_MANY_REQUESTS {
            // A full model queue drains in well under a second; HTTP counts whole seconds.
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// A 200 response with `value` as its JSON body.
pub fn json_response(value: &Value) -> Response {
    raw_json_response(serde_json::to_vec(value).unwrap_or_default())
}

/// A 200 response whose JSON body was already written.
pub fn raw_json_response(body: Vec<u8>) -> Response {
    let mut response = body.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
