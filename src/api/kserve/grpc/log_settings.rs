//! KServe gRPC `LogSettings`: Triton's logging extension, over the server's [`LogSettings`].
//! A request with no settings reads them; one with settings changes them (all or none) and
//! answers with every setting as it now is.

use crate::error::Error;
use crate::log_settings::{LogSettings, SettingValue};
use crate::proto::inference as pb;
use pb::log_settings_request::setting_value::ParameterChoice as Requested;
use pb::log_settings_response::setting_value::ParameterChoice as Answered;

pub(super) fn log_settings(
    settings: &LogSettings,
    request: pb::LogSettingsRequest,
) -> Result<pb::LogSettingsResponse, Error> {
    let current = if request.settings.is_empty() {
        settings.settings()
    } else {
        let mut changes = Vec::with_capacity(request.settings.len());
        for (name, value) in request.settings {
            let value = match value.parameter_choice {
                Some(Requested::BoolParam(on)) => SettingValue::Bool(on),
                Some(Requested::Uint32Param(n)) => SettingValue::Uint(n),
                Some(Requested::StringParam(text)) => SettingValue::Text(text),
                None => {
                    return Err(Error::invalid(format!(
                        "log setting '{name}' carries no value"
                    )))
                }
            };
            changes.push((name, value));
        }
        settings.update(changes)?
    };
    let settings = current
        .into_iter()
        .map(|(name, value)| {
            let choice = match value {
                SettingValue::Bool(on) => Answered::BoolParam(on),
                SettingValue::Uint(n) => Answered::Uint32Param(n),
                SettingValue::Text(text) => Answered::StringParam(text),
            };
            let value = pb::log_settings_response::SettingValue {
                parameter_choice: Some(choice),
            };
            (name.to_owned(), value)
        })
        .collect();
    Ok(pb::LogSettingsResponse { settings })
}
