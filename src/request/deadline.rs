//! The deadline headers a client may send: gRPC's `grpc-timeout` and the HTTP port's
//! millisecond header, parsed strictly (a malformed one is refused, not ignored).

use std::time::Duration;

use http::HeaderMap;

/// gRPC's deadline header: up to 8 digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`).
pub const GRPC_TIMEOUT_HEADER: &str = "grpc-timeout";
/// The HTTP equivalent: how long the client will wait, in milliseconds.
pub const HTTP_TIMEOUT_HEADER: &str = "x-request-timeout-ms";

/// Why a deadline header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeadlineError {
    #[error("grpc-timeout '{0}' is not 1 to 8 digits followed by H, M, S, m, u or n")]
    GrpcTimeout(String),
    #[error("{HTTP_TIMEOUT_HEADER} '{0}' is not a whole number of milliseconds")]
    HttpTimeout(String),
}

/// Parses gRPC's `grpc-timeout` value.
pub fn parse_grpc_timeout(text: &str) -> Result<Duration, DeadlineError> {
    let bad = || DeadlineError::GrpcTimeout(text.to_owned());
    let split = text.len().checked_sub(1).ok_or_else(bad)?;
    let (digits, unit) = (text.get(..split), text.get(split..));
    let (Some(digits), Some(unit)) = (digits, unit) else {
        return Err(bad());
    };
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    // At most 8 digits, so this cannot overflow, nor can the multiplications below.
    let value: u64 = digits.parse().map_err(|_| bad())?;
    Ok(match unit {
        "H" => Duration::from_secs(value * 3600),
        "M" => Duration::from_secs(value * 60),
        "S" => Duration::from_secs(value),
        "m" => Duration::from_millis(value),
        "u" => Duration::from_micros(value),
        "n" => Duration::from_nanos(value),
        _ => return Err(bad()),
    })
}

/// Parses the HTTP timeout header: milliseconds as a decimal integer.
pub fn parse_http_timeout(text: &str) -> Result<Duration, DeadlineError> {
    text.trim()
        .parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|_| DeadlineError::HttpTimeout(text.to_owned()))
}

/// How long the client of `headers` will wait, if it said: `grpc-timeout` on the gRPC port,
/// the HTTP header on the REST port.
pub fn client_timeout(headers: &HeaderMap, grpc: bool) -> Result<Option<Duration>, DeadlineError> {
    let name = if grpc {
        GRPC_TIMEOUT_HEADER
    } else {
        HTTP_TIMEOUT_HEADER
    };
    let Some(value) = headers.get(name) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("<not text>");
    let parsed = if grpc {
        parse_grpc_timeout(text)
    } else {
        parse_http_timeout(text)
    };
    parsed.map(Some)
}

#[cfg(test)]
mod tests {
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
}
