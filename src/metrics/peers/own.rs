//! The samples of tensorport's own exposition that the peers' families are sums of, read back
//! from the scrape's text: the registry keeps no way to walk a family's series, and its text
//! is what the scrape writes anyway. Only the families named in [`WANTED`] are kept.

/// The families (by sample-name prefix) the peers' families read.
const WANTED: [&str; 3] = [
    "tensorport_requests_total",
    "tensorport_request_duration_seconds_",
    "tensorport_inference_duration_seconds_",
];

/// One sample line: its name, its labels (unescaped) and its value.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Sample<'a> {
    pub(super) name: &'a str,
    labels: Vec<(&'a str, String)>,
    pub(super) value: f64,
}

impl Sample<'_> {
    /// The value of `label`; empty when the sample has none, as PromQL reads it.
    pub(super) fn label(&self, label: &str) -> &str {
        self.labels
            .iter()
            .find(|(name, _)| *name == label)
            .map_or("", |(_, value)| value.as_str())
    }
}

/// The wanted samples of one exposition.
pub(super) struct Samples<'a> {
    samples: Vec<Sample<'a>>,
}

impl<'a> Samples<'a> {
    /// Reads the wanted samples of `text`; a line it cannot read (none, as the registry
    /// writes them) is left out rather than failing the scrape.
    pub(super) fn read(text: &'a str) -> Self {
        let samples = text
            .lines()
            .filter(|line| WANTED.iter().any(|prefix| line.starts_with(prefix)))
            .filter_map(sample)
            .collect();
        Self { samples }
    }

    /// The samples named `name`.
    pub(super) fn named<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s Sample<'a>> {
        self.samples.iter().filter(move |s| s.name == name)
    }
}

/// `name{label="value",...} value [timestamp]`, or `name value`.
fn sample(line: &str) -> Option<Sample<'_>> {
    let name_end = line.find(['{', ' '])?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inside) = rest.strip_prefix('{') {
        rest = inside;
        loop {
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let (label, after) = rest.split_once("=\"")?;
            let (value, after) = quoted(after)?;
            labels.push((label, value));
            rest = after.strip_prefix(',').unwrap_or(after);
        }
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// A label value up to its closing quote, unescaped, and the text after the quote.
fn quoted(text: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Some((value, &text[at + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => value.push('\n'),
                escaped => value.push(escaped),
            },
            c => value.push(c),
        }
    }
    None
}
