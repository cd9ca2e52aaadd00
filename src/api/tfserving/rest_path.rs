//! The paths under `/v1/models/`: axum cannot route `{name}:predict` (one parameter per
//! segment), so the REST dispatcher receives the rest of the path and [`RestTarget::parse`]
//! splits it here.

use crate::error::Error;
use crate::repository::VersionSelector;

/// The path templates [`dispatch`] answers, spelled as the OpenAPI document spells them.
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
pub(super) const VERBS: [&str; 3] = ["predict", "classify", "regress"];

/// What a `/v1/models/...` path names.
#[derive(Debug, PartialEq)]
pub(super) enum RestTarget<'p> {
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

#[derive(Debug, PartialEq, Clone, Copy)]
pub(super) enum VersionRef<'p> {
    Latest,
    Number(&'p str),
    Label(&'p str),
}

impl<'p> RestTarget<'p> {
    pub(super) fn parse(path: &'p str) -> Option<Self> {
        // A verb ends the path; a ':' followed by more segments belongs to a name.
        let (resource, verb) = match path.rsplit_once(':') {
            Some((resource, verb)) if !verb.contains('/') => (resource, Some(verb)),
            _ => (path, None),
        };
        let segments: Vec<&str> = resource.split('/').collect();
        let (model, version, rest) = match segments.as_slice() {
            [model, rest @ ..] if !model.is_empty() => match rest {
                ["versions", v, tail @ ..] => (*model, VersionRef::Number(v), tail),
                ["labels", l, tail @ ..] => (*model, VersionRef::Label(l), tail),
                tail => (*model, VersionRef::Latest, tail),
            },
            _ => return None,
        };
        match (rest, verb) {
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

pub(super) fn version_selector(version: VersionRef<'_>) -> Result<VersionSelector, Error> {
    Ok(match version {
        VersionRef::Latest => VersionSelector::Latest,
        VersionRef::Number(text) => VersionSelector::from_number_text(text)?,
        VersionRef::Label(label) => VersionSelector::Label(label.to_owned()),
    })
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
                .trim_start_matches("/v1/models/")
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
