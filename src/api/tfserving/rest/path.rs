//! The paths under `/v1/models/`: [`crate::rest_target`] decodes and splits them (the auth
//! layer reads them there too); what is left here, shared by every REST operation, is turning
//! a path's version into the repository's selector.

use crate::error::Error;
use crate::repository::VersionSelector;
pub(super) use crate::rest_target::{RestTarget, VersionRef, VERBS};

pub(super) fn version_selector(version: VersionRef<'_>) -> Result<VersionSelector, Error> {
    Ok(match version {
        VersionRef::Latest => VersionSelector::Latest,
        VersionRef::Number(text) => VersionSelector::from_number_text(text)?,
        VersionRef::Label(label) => VersionSelector::Label(label.to_owned()),
    })
}
