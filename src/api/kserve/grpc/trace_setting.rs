//! KServe gRPC `TraceSetting`: Triton's trace extension, over the server's [`TraceSettings`]
//! that the HTTP port shares. A request with no settings reads them (the model's, when it
//! names one); one with settings changes them, all or none; a setting with no values is
//! cleared. Both answer with every setting now in force there.

use crate::error::Error;
use crate::proto::inference as pb;
use crate::trace::TraceSettings;

pub(super) fn trace_setting(
    settings: &TraceSettings,
    request: pb::TraceSettingRequest,
) -> Result<pb::TraceSettingResponse, Error> {
    let model = Some(request.model_name.as_str()).filter(|name| !name.is_empty());
    let current = if request.settings.is_empty() {
        settings.settings(model)
    } else {
        let changes = request.settings.into_iter().map(|(name, value)| {
            let value = Some(value.value).filter(|values| !values.is_empty());
            (name, value)
        });
        settings.update(model, changes)?
    };
    let settings = current
        .into_iter()
        .map(|(name, value)| {
            let value = pb::trace_setting_response::SettingValue { value };
            (name.to_owned(), value)
        })
        .collect();
    Ok(pb::TraceSettingResponse { settings })
}
