//! What a TF Serving REST path (`/v1/models/...`) names, read one way for everyone who asks.
//!
//! axum cannot route `{name}:predict` (one parameter per segment), so the server splits these
//! paths itself. Two readers need the answer: the auth layer in front of the routes (is this
//! inference or metadata?) and the TF Serving dispatcher behind them (which operation?). If
//! they read the path differently, a client can pick the reading that suits it: a `:predict`
//! spelled `%3Apredict` once looked like metadata to the auth layer, which saw the raw path,
//! and like a prediction to the dispatcher, which saw it percent-decoded. So both take the
//! path through [`tf_serving_rest`] (the one decoding) and [`RestTarget::parse`] (the one
//! split), and nothing else reads it.

use std::borrow::Cow;

/// TF Serving's REST prefix.
pub const TF_SERVING_MODELS: &str = "/v1/models/";

/// The path templates the TF Serving dispatcher answers, spelled as the OpenAPI document
/// spells them.
pub const SERVED_PATHS: &[&str] = &[
    "/v1/models/{name}",
    "/v1/models/{name}/versions/{version}",
    "/v1/models/{name}/labels/{label}",
    "/v1/models/{name}/metadata",
    "/v1/models/{name}/versions/{version}/metadata",
    "/v1/models/{name}/labels/{label}/metadata",
    "/v1/models/{name}:predict",
    "/v1/models/{name}/versions/{version}:predict",
    "/v1/models/{name}/labels/{label}:predict",
    "/v1/models/{name}:classify",
    "/v1/models/{name}/versions/{version}:classify",
    "/v1/models/{name}/labels/{label}:classify",
    "/v1/models/{name}:regress",
    "/v1/models/{name}/versions/{version}:regress",
    "/v1/models/{name}/labels/{label}:regress",
];

/// The verbs of TF Serving's REST API (`/v1/models/{name}:verb`).
pub const VERBS: [&str; 3] = ["predict", "classify", "regress"];

/// A path under `/v1/models/` whose percent-escapes do not decode to UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the path's percent-escapes do not decode to UTF-8 text")]
pub struct UndecodablePath;

/// The part of `path` after `/v1/models/`, percent-decoded (as axum decodes a path
/// parameter: `%XX` escapes only, `+` stays a plus); `None` for a path elsewhere. Borrowed
/// when the path has no escape, which is every request a TF Serving client sends.
pub fn tf_serving_rest(path: &str) -> Option<Result<Cow<'_, str>, UndecodablePath>> {
    let rest = path.strip_prefix(TF_SERVING_MODELS)?;
    Some(
        percent_encoding::percent_decode_str(rest)
            .decode_utf8()
            .map_err(|_| UndecodablePath),
    )
}

/// What a (decoded) `/v1/models/...` path names.
#[derive(Debug, PartialEq)]
pub enum RestTarget<'p> {
    Status {
        model: &'p str,
        version: VersionRef<'p>,
    },
    Metadata {
        model: &'p str,
        version: VersionRef<'p>,
    },
    Verb {
        model: &'p str,
        version: VersionRef<'p>,
        verb: &'p str,
    },
}

/// Which version a path names.
#[derive(Debug, PartialEq, Clone, Copy)]
pub enum VersionRef<'p> {
    Latest,
    Number(&'p str),
    Label(&'p str),
}

/// Splits a trailing `:verb` off `rest`: a verb ends the path, so a `:` followed by more
/// segments belongs to a name. The auth layer and [`RestTarget::parse`] both decide "is this
/// a verb?" here.
pub fn split_verb(rest: &str) -> (&str, Option<&str>) {
    match rest.rsplit_once(':') {
        Some((resource, verb)) if !verb.contains('/') => (resource, Some(verb)),
        _ => (rest, None),
    }
}

impl<'p> RestTarget<'p> {
    /// Reads `rest`, the decoded path after `/v1/models/`; `None` for a path no operation has.
    pub fn parse(rest: &'p str) -> Option<Self> {
        let (resource, verb) = split_verb(rest);
        let segments: Vec<&str> = resource.split('/').collect();
        let (model, version, tail) = match segments.as_slice() {
            [model, tail @ ..] if !model.is_empty() => match tail {
                ["versions", v, tail @ ..] => (*model, VersionRef::Number(v), tail),
                ["labels", l, tail @ ..] => (*model, VersionRef::Label(l), tail),
                tail => (*model, VersionRef::Latest, tail),
            },
            _ => return None,
        };
        match (tail, verb) {
            ([], Some(verb)) => Some(Self::Verb {
                model,
                version,
                verb,
            }),
            (["metadata"], None) => Some(Self::Metadata { model, version }),
            ([], None) => Some(Self::Status { model, version }),
            _ => None,
        }
    }
}

impl<'p> RestTarget<'p> {
    /// The model the path names.
    pub fn model(&self) -> &'p str {
        match self {
            Self::Status { model, .. }
            | Self::Metadata { model, .. }
            | Self::Verb { model, .. } => model,
        }
    }
}

// Only the tests need the mapping: dispatch matches on the target itself.
#[cfg(test)]
impl RestTarget<'_> {
    /// The entry of [`SERVED_PATHS`] this target answers on; `None` for a verb TF Serving does
    /// not define, which is refused as a bad request rather than served.
    fn template(&self) -> Option<&'static str> {
        use VersionRef::{Label, Latest, Number};
        Some(match self {
            Self::Status { version, .. } => match version {
                Latest => "/v1/models/{name}",
                Number(_) => "/v1/models/{name}/versions/{version}",
                Label(_) => "/v1/models/{name}/labels/{label}",
            },
            Self::Metadata { version, .. } => match version {
                Latest => "/v1/models/{name}/metadata",
                Number(_) => "/v1/models/{name}/versions/{version}/metadata",
                Label(_) => "/v1/models/{name}/labels/{label}/metadata",
            },
            Self::Verb { version, verb, .. } => match (version, *verb) {
                (Latest, "predict") => "/v1/models/{name}:predict",
                (Number(_), "predict") => "/v1/models/{name}/versions/{version}:predict",
                (Label(_), "predict") => "/v1/models/{name}/labels/{label}:predict",
                (Latest, "classify") => "/v1/models/{name}:classify",
                (Number(_), "classify") => "/v1/models/{name}/versions/{version}:classify",
                (Label(_), "classify") => "/v1/models/{name}/labels/{label}:classify",
                (Latest, "regress") => "/v1/models/{name}:regress",
                (Number(_), "regress") => "/v1/models/{name}/versions/{version}:regress",
                (Label(_), "regress") => "/v1/models/{name}/labels/{label}:regress",
                _ => return None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_path_form() {
        use RestTarget::*;
        use VersionRef::*;
        assert_eq!(
            RestTarget::parse("m"),
            Some(Status {
                model: "m",
                version: Latest
            })
        );
        assert_eq!(
            RestTarget::parse("m/versions/3"),
            Some(Status {
                model: "m",
                version: Number("3")
            })
        );
        assert_eq!(
            RestTarget::parse("m/metadata"),
            Some(Metadata {
                model: "m",
                version: Latest
            })
        );
        assert_eq!(
            RestTarget::parse("m/versions/3/metadata"),
            Some(Metadata {
                model: "m",
                version: Number("3")
            })
        );
        assert_eq!(
            RestTarget::parse("m:predict"),
            Some(Verb {
                model: "m",
                version: Latest,
                verb: "predict"
            })
        );
        assert_eq!(
            RestTarget::parse("m/versions/2:predict"),
            Some(Verb {
                model: "m",
                version: Number("2"),
                verb: "predict"
            })
        );
        assert_eq!(
            RestTarget::parse("m/labels/stable:predict"),
            Some(Verb {
                model: "m",
                version: Label("stable"),
                verb: "predict"
            })
        );
        assert_eq!(RestTarget::parse(""), None);
        assert_eq!(RestTarget::parse("m/other"), None);
        assert_eq!(
            RestTarget::parse("a:b/metadata"),
            Some(Metadata {
                model: "a:b",
                version: Latest
            })
        );
    }

    #[test]
    fn escapes_are_decoded_before_the_path_is_split() {
        for (path, rest) in [
            ("/v1/models/m%3Apredict", "m:predict"),
            ("/v1/models/m%3apredict", "m:predict"),
            ("/v1/models/m/versions/1%3Apredict", "m/versions/1:predict"),
            (
                "/v1/models/m%2Fversions%2F1%3Aregress",
                "m/versions/1:regress",
            ),
            ("/v1/models/a+b", "a+b"),
        ] {
            let decoded = tf_serving_rest(path).and_then(Result::ok);
            assert_eq!(decoded.as_deref(), Some(rest), "{path}");
        }
        assert!(matches!(
            tf_serving_rest("/v1/models/m:predict"),
            Some(Ok(Cow::Borrowed("m:predict")))
        ));
        assert_eq!(
            tf_serving_rest("/v1/models/%FF"),
            Some(Err(UndecodablePath))
        );
        assert_eq!(tf_serving_rest("/v2/models/m"), None);
    }

    /// Every path form the parser accepts is listed in `SERVED_PATHS` (and so must be in the
    /// OpenAPI document). A new form, such as a status by label, fails here until it is listed.
    #[test]
    fn every_accepted_path_form_is_listed() {
        let bases = [
            "m",
            "m/versions/1",
            "m/labels/l",
            "m/metadata",
            "m/versions/1/metadata",
        ];
        let tails = ["", "/metadata", "/labels/l", "/versions/1", "/other"];
        let verbs = [
            "",
            ":predict",
            ":classify",
            ":regress",
            ":explain",
            ":other",
        ];
        for base in bases {
            for tail in tails {
                for verb in verbs {
                    let path = format!("{base}{tail}{verb}");
                    let Some(target) = RestTarget::parse(&path) else {
                        continue;
                    };
                    match target.template() {
                        Some(template) => assert!(
                            SERVED_PATHS.contains(&template),
                            "{path} is answered as {template}, which SERVED_PATHS lacks"
                        ),
                        None => assert!(
                            matches!(target, RestTarget::Verb { verb, .. } if !VERBS.contains(&verb)),
                            "{path} parses but has no template"
                        ),
                    }
                }
            }
        }
    }

    #[test]
    fn every_listed_path_parses_back_to_itself() {
        for template in SERVED_PATHS {
            let path = template
                .trim_start_matches(TF_SERVING_MODELS)
                .replace("{name}", "m")
                .replace("{version}", "3")
                .replace("{label}", "stable");
            let target = RestTarget::parse(&path);
            assert_eq!(
                target.as_ref().and_then(RestTarget::template),
                Some(*template),
                "{path}"
            );
        }
    }
}
