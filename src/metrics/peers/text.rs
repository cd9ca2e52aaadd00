//! Writing the peers' families. Their names keep the peers' spelling, which tensorport's own
//! registry cannot: Triton's and TF Serving's counters carry no `_total`, and TF Serving's
//! names start with `:`. In OpenMetrics, where a counter's samples must end in `_total`,
//! their counters are declared `unknown`, so that the sample names stay the ones dashboards
//! query.

use std::fmt::Write;

/// A family's type, as the classic text format names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// The text of the peers' families for one scrape.
pub(super) struct Exposition {
    out: String,
    openmetrics: bool,
}

impl Exposition {
    pub(super) fn new(openmetrics: bool) -> Self {
        Self {
            out: String::new(),
            openmetrics,
        }
    }

    /// Starts the family `name`: its help and type lines.
    pub(super) fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let kind = match (kind, self.openmetrics) {
            (Kind::Counter, true) => "unknown",
            (Kind::Counter, false) => "counter",
            (Kind::Gauge, _) => "gauge",
            (Kind::Histogram, _) => "histogram",
        };
        // Writing into a String cannot fail.
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    /// One sample line: `name{labels} value`.
    pub(super) fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (label, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(label);
                self.out.push_str("=\"");
                escape_into(&mut self.out, value);
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        write_number(&mut self.out, value);
        self.out.push('\n');
    }

    pub(super) fn finish(self) -> String {
        self.out
    }
}

/// A label value as both formats escape it: backslash, double quote and newline.
fn escape_into(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Whole numbers without a fraction (the peers' counters are integers), others as Rust
/// prints them, and infinity as both formats spell it.
fn write_number(out: &mut String, value: f64) {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53: every integer below is exact
    if value.is_infinite() {
        out.push_str(if value > 0.0 { "+Inf" } else { "-Inf" });
    } else if value.fract() == 0.0 && value.abs() < EXACT {
        let _ = write!(out, "{}", value as i64);
    } else {
        let _ = write!(out, "{value}");
    }
}
