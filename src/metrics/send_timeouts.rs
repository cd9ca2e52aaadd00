//! `tensorport_send_timeouts_total{cut}`, which the transport counts into.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// `tensorport_send_timeouts_total{cut}`: answers whose client took none of their bytes for
/// `--send-timeout-secs`, by what was cut.
pub(super) fn register_send_timeouts(registry: &mut Registry) -> SendTimeouts {
    let family = Family::<CutLabels, Counter>::default();
    let cuts = SendTimeouts {
        streams: family.get_or_create_owned(&CutLabels { cut: "stream" }),
        connections: family.get_or_create_owned(&CutLabels { cut: "connection" }),
    };
    registry.register(
        "send_timeouts",
        "Answers cut off because the client took none of their bytes for the send timeout: \
         HTTP/2 streams reset (cut=stream) and connections closed (cut=connection)",
        family,
    );
    cuts
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CutLabels {
    cut: &'static str,
}

/// Where the transport counts answers cut off for the send timeout (handles registered
/// nowhere by default, for servers run without metrics).
#[derive(Clone, Debug, Default)]
pub struct SendTimeouts {
    /// HTTP/2 streams reset.
    pub streams: Counter,
    /// Connections closed because their socket took nothing.
    pub connections: Counter,
}
