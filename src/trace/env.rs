//! The OpenTelemetry exporter variables tensorport reads, by name, and the readers of those
//! that say how to reach the collector rather than where it is: the headers each export
//! carries (an API key, a tenant), how long an export may take, and the TLS files for an
//! `https://` collector. Each has a general name and a `TRACES_` one; the `TRACES_` one, when
//! set, is used instead of the general one (as the OTLP exporter specification orders).
//!
//! Nothing here reads the process environment: `main` hands a reader down, so tests pass
//! their own.

use std::path::PathBuf;
use std::time::Duration;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use percent_encoding::percent_decode_str;

pub const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
pub const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
pub const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
pub const TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
pub const HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
pub const TRACES_HEADERS: &str = "OTEL_EXPORTER_OTLP_TRACES_HEADERS";
pub const TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TIMEOUT";
pub const TRACES_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT";
pub const CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_CERTIFICATE";
pub const TRACES_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE";
pub const CLIENT_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE";
pub const TRACES_CLIENT_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE";
pub const CLIENT_KEY: &str = "OTEL_EXPORTER_OTLP_CLIENT_KEY";
pub const TRACES_CLIENT_KEY: &str = "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY";
pub const SAMPLER_ARG: &str = "OTEL_TRACES_SAMPLER_ARG";
pub const SERVICE_NAME: &str = "OTEL_SERVICE_NAME";

/// Headers the exporter sets itself: a value from the environment would break the framing
/// or the content type, or name another host.
const RESERVED: [HeaderName; 6] = [
    header::HOST,
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
    header::CONNECTION,
    header::TE,
];

/// Headers sent with every export. Their values are often secrets (a collector's API key):
/// they are marked sensitive and never printed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct OtlpHeaders(HeaderMap);

impl OtlpHeaders {
    pub fn map(&self) -> &HeaderMap {
        &self.0
    }
}

/// Names only.
impl std::fmt::Debug for OtlpHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// The files for an `https://` collector: without a CA file, the system's roots are trusted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CollectorTls {
    /// PEM certificates to trust instead of the system's.
    pub ca: Option<PathBuf>,
    /// A PEM chain and key presented to a collector that asks for a client certificate.
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

/// The value of `traces` if set and not blank, else of `general`, with the name it came from.
pub fn either(
    env: &impl Fn(&str) -> Option<String>,
    traces: &'static str,
    general: &'static str,
) -> Option<(&'static str, String)> {
    let var = |name: &'static str| {
        env(name)
            .filter(|v| !v.trim().is_empty())
            .map(|v| (name, v))
    };
    var(traces).or_else(|| var(general))
}

/// `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`: `key=value` pairs joined by commas, each key and
/// value percent-decoded and trimmed. A pair that is not one, or is no valid header, stops
/// start-up with the variable named (never the value, which may be a secret).
pub fn headers(env: &impl Fn(&str) -> Option<String>) -> Result<OtlpHeaders, String> {
    let Some((name, text)) = either(env, TRACES_HEADERS, HEADERS) else {
        return Ok(OtlpHeaders::default());
    };
    let mut map = HeaderMap::new();
    for (n, pair) in text.split(',').enumerate() {
        if pair.trim().is_empty() {
            continue;
        }
        let bad = |why: &str| format!("{name}: pair {} {why}", n + 1);
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| bad("is not key=value"))?;
        let decode = |text: &str| {
            percent_decode_str(text.trim())
                .decode_utf8()
                .map(|text| text.trim().to_owned())
                .map_err(|_| bad("is not UTF-8 once percent-decoded"))
        };
        let key = HeaderName::from_bytes(decode(key)?.as_bytes())
            .map_err(|_| bad("has a key that is no HTTP header name"))?;
        if RESERVED.contains(&key) {
            return Err(bad(&format!("sets {key}, which the exporter sets itself")));
        }
        let mut value = HeaderValue::from_str(&decode(value)?)
            .map_err(|_| bad("has a value that is no HTTP header value"))?;
        value.set_sensitive(true);
        map.append(key, value);
    }
    Ok(OtlpHeaders(map))
}

/// `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT`: milliseconds an export may take, whole.
pub fn timeout(env: &impl Fn(&str) -> Option<String>) -> Result<Option<Duration>, String> {
    let Some((name, text)) = either(env, TRACES_TIMEOUT, TIMEOUT) else {
        return Ok(None);
    };
    text.trim()
        .parse::<u64>()
        .ok()
        .filter(|ms| *ms > 0)
        .map(|ms| Some(Duration::from_millis(ms)))
        .ok_or_else(|| format!("{name} '{text}' is not a number of milliseconds above 0"))
}

/// The TLS files the variables name.
pub fn tls(env: &impl Fn(&str) -> Option<String>) -> Result<CollectorTls, String> {
    let path = |traces, general| either(env, traces, general).map(|(_, p)| PathBuf::from(p));
    let tls = CollectorTls {
        ca: path(TRACES_CERTIFICATE, CERTIFICATE),
        client_cert: path(TRACES_CLIENT_CERTIFICATE, CLIENT_CERTIFICATE),
        client_key: path(TRACES_CLIENT_KEY, CLIENT_KEY),
    };
    if tls.client_cert.is_some() != tls.client_key.is_some() {
        return Err(format!(
            "a client certificate for the trace collector needs both {CLIENT_CERTIFICATE} and \
             {CLIENT_KEY} (or their TRACES_ forms)"
        ));
    }
    Ok(tls)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn headers_are_percent_decoded_and_trimmed() {
        let got = headers(&env(&[(
            HEADERS,
            " api-key = secret%20value%2C1 ,x-tenant=ranking,,",
        )]))
        .unwrap();
        assert_eq!(got.map()["api-key"], "secret value,1");
        assert_eq!(got.map()["x-tenant"], "ranking");
        assert_eq!(got.map().len(), 2);
        // Printed by name only.
        assert!(!format!("{got:?}").contains("secret"));
    }

    #[test]
    fn the_traces_variable_replaces_the_general_one() {
        let got = headers(&env(&[(HEADERS, "a=1"), (TRACES_HEADERS, "b=2")])).unwrap();
        assert!(got.map().get("a").is_none());
        assert_eq!(got.map()["b"], "2");
    }

    #[test]
    fn bad_headers_name_the_variable_and_not_the_value() {
        for text in [
            "novalue",
            "bad key=1",
            "host=elsewhere",
            "k=%FF",
            "k=a\u{7f}b",
        ] {
            let err = headers(&env(&[(TRACES_HEADERS, text)])).unwrap_err();
            assert!(err.starts_with(TRACES_HEADERS), "{text}: {err}");
        }
        let err = headers(&env(&[(HEADERS, "k=s3cret\u{7f}")])).unwrap_err();
        assert!(!err.contains("s3cret"), "{err}");
    }

    #[test]
    fn timeout_and_tls_files() {
        assert_eq!(
            timeout(&env(&[(TIMEOUT, "250")])).unwrap(),
            Some(Duration::from_millis(250))
        );
        assert!(timeout(&env(&[(TRACES_TIMEOUT, "0")])).is_err());
        assert_eq!(timeout(&env(&[])).unwrap(), None);
        let files = tls(&env(&[(CERTIFICATE, "/ca.pem")])).unwrap();
        assert_eq!(files.ca, Some(PathBuf::from("/ca.pem")));
        assert!(tls(&env(&[(CLIENT_KEY, "/k.pem")])).is_err());
    }
}
