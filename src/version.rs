//! [`VersionSelector`]: which version of a model a request asks for, parsed once from however
//! its protocol spells it.

/// Which version a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionSelector {
    /// The newest available version.
    Latest,
    Specific(u64),
    /// A name the model's configuration maps to a version (`stable`, `canary`, ...).
    Label(String),
}

/// A version field that names no version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error("'{0}' is not a model version (a positive integer)")]
    NotAVersion(String),
    #[error("model versions are positive integers, got {0}")]
    NotPositive(i64),
}

impl VersionSelector {
    /// KServe's version field (and Triton's): empty means the newest available version, a
    /// number names a version, anything else is a version label.
    pub fn from_kserve(text: &str) -> Result<Self, VersionError> {
        if text.is_empty() {
            return Ok(Self::Latest);
        }
        if !text.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(Self::Label(text.to_owned()));
        }
        Self::from_number_text(text)
    }

    /// A version number written out, as in TF Serving's `/versions/{version}` path: a
    /// positive integer and nothing else.
    pub fn from_number_text(text: &str) -> Result<Self, VersionError> {
        text.parse::<u64>()
            .ok()
            .filter(|&v| v > 0)
            .map(Self::Specific)
            .ok_or_else(|| VersionError::NotAVersion(text.to_owned()))
    }

    /// TF Serving's model spec: a version number wins over a label; neither means latest.
    pub fn from_tfserving(version: Option<i64>, label: Option<&str>) -> Result<Self, VersionError> {
        match (version, label) {
            (Some(v), _) => u64::try_from(v)
                .ok()
                .filter(|&v| v > 0)
                .map(Self::Specific)
                .ok_or(VersionError::NotPositive(v)),
            (None, Some(label)) => Ok(Self::Label(label.to_owned())),
            (None, None) => Ok(Self::Latest),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kserve_versions_are_empty_numbers_or_labels() {
        assert_eq!(
            VersionSelector::from_kserve(""),
            Ok(VersionSelector::Latest)
        );
        assert_eq!(
            VersionSelector::from_kserve("3"),
            Ok(VersionSelector::Specific(3))
        );
        assert_eq!(
            VersionSelector::from_kserve("stable"),
            Ok(VersionSelector::Label("stable".into()))
        );
        // Digits that are no version are refused, not taken for a label.
        for bad in ["0", "00", "99999999999999999999999"] {
            let err = VersionSelector::from_kserve(bad).err();
            assert_eq!(err, Some(VersionError::NotAVersion(bad.into())), "{bad}");
        }
    }

    #[test]
    fn path_versions_are_positive_integers_only() {
        assert_eq!(
            VersionSelector::from_number_text("12"),
            Ok(VersionSelector::Specific(12))
        );
        for bad in ["", "0", "-1", "1.5", "stable", " 1"] {
            assert!(VersionSelector::from_number_text(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tfserving_specs_prefer_the_number() {
        assert_eq!(
            VersionSelector::from_tfserving(Some(2), Some("canary")),
            Ok(VersionSelector::Specific(2))
        );
        assert_eq!(
            VersionSelector::from_tfserving(None, Some("canary")),
            Ok(VersionSelector::Label("canary".into()))
        );
        assert_eq!(
            VersionSelector::from_tfserving(None, None),
            Ok(VersionSelector::Latest)
        );
        let err = VersionSelector::from_tfserving(Some(-4), None).err();
        assert_eq!(err, Some(VersionError::NotPositive(-4)));
        assert!(err.is_some_and(|err| err.to_string().contains("positive integers, got -4")));
    }
}
