//! The peers' metric names, for the dashboards and alerts users bring from Triton and TF
//! Serving: Triton's `nv_inference_*` families and TF Serving's `:tensorflow:serving:*`. They
//! are derived at scrape time from what the server counts anyway (each version's statistics,
//! the ones KServe's statistics API reports, and tensorport's own families), so a request pays
//! nothing for them. `--peer-metric-names=false` leaves them out.
//!
//! - `own`: the samples of this scrape's own exposition that TF Serving's families sum up.
//! - `text`: the classic text format (or OpenMetrics) the peers' names are written in.
//! - `triton`, `tf_serving`: the families, each with what it counts.

mod own;
mod text;
mod tf_serving;
mod triton;

pub use triton::VersionFigures;

impl super::Metrics {
    /// The peers' families for one scrape. `own` is this scrape's OpenMetrics exposition
    /// ([`super::Metrics::encode`]), `versions` the versions serving now. Empty when the
    /// peers' names are turned off.
    pub fn peer_exposition<'a>(
        &self,
        own: &str,
        versions: impl IntoIterator<Item = VersionFigures<'a>>,
        openmetrics: bool,
    ) -> String {
        if !self.peer_names {
            return String::new();
        }
        let samples = own::Samples::read(own);
        let mut out = text::Exposition::new(openmetrics);
        triton::write(&mut out, versions, &samples);
        tf_serving::write(&mut out, &samples);
        out.finish()
    }
}

#[cfg(test)]
mod tests;
