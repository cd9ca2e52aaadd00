//! Installs the process's log subscriber: stderr through [`LogSink`], filtered by RUST_LOG
//! or `--log-level`, in `--log-format`, with the filter changeable while the server runs
//! through the [`LogSettings`] it returns (Triton's logging extension).

use std::io::IsTerminal;
use std::sync::Arc;

use crate::config::{LogFormat, LogLevel};
use crate::log_settings::{LogFormatName, LogSettings, LogState};
use crate::log_sink::LogSink;

/// Logs to stderr through `sink` (a line per event; lines that cannot be written are dropped
/// and counted), filtered by RUST_LOG (default `--log-level`, itself `info`;
/// `tensorport::access=debug` adds one line per request). The filter can change while the
/// server runs, through Triton's logging extension: the settings returned apply it.
pub fn install(format: LogFormat, level: LogLevel, sink: LogSink) -> Arc<LogSettings> {
    use tracing_subscriber::filter::{filter_fn, EnvFilter, FilterExt};
    use tracing_subscriber::layer::{Layer, SubscriberExt};
    use tracing_subscriber::util::SubscriberInitExt;

    let base = std::env::var("RUST_LOG")
        .ok()
        .filter(|directives| EnvFilter::try_new(directives).is_ok())
        .unwrap_or_else(|| level.directive().to_owned());
    let (directives, reload) = tracing_subscriber::reload::Layer::new(EnvFilter::new(&base));
    let initial = LogState {
        format: match format {
            LogFormat::Text => LogFormatName::Text,
            LogFormat::Json => LogFormatName::Json,
        },
        ..LogState::default()
    };
    // The severity switches, read for every callsite whose interest is rebuilt (which the
    // reload below does on each change).
    let switches = Arc::new(std::sync::RwLock::new(initial));
    let severities = {
        let switches = switches.clone();
        filter_fn(move |meta| {
            switches
                .read()
                .map_or(true, |state| state.passes(*meta.level()))
        })
    };
    let lines = tracing_subscriber::fmt::layer()
        // Its report of a failed write is an eprintln! to the same broken stderr: a panic.
        .log_internal_errors(false)
        .with_writer(sink);
    let lines = match format {
        LogFormat::Text => lines.with_ansi(std::io::stderr().is_terminal()).boxed(),
        // One object per line; the request's span (id, protocol, path) rides along.
        LogFormat::Json => lines
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(lines.with_filter(directives.and(severities)))
        .init();
    Arc::new(LogSettings::new(
        initial,
        Box::new(move |state| {
            if let Ok(mut switches) = switches.write() {
                *switches = *state;
            }
            let filter = EnvFilter::try_new(state.directive(&base)).map_err(|e| e.to_string())?;
            // Replacing the filter rebuilds every callsite's interest, the switches' too.
            reload.reload(filter).map_err(|e| e.to_string())
        }),
    ))
}
