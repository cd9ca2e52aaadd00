//! Which API group every route of the HTTP port and every gRPC method belongs to: the one
//! table [`ROUTES`]. The tests hold it to `crate::server::rest_route_paths` and to the
//! services in `proto/`, so a new route or method without a group fails them.

use std::fmt;

use crate::rest_target::{split_verb, tf_serving_rest};

/// The API groups a token may be granted (Triton's restricted-protocol categories, folded into
/// the ones this server has).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Group {
    /// Running models: predict, classify, regress, infer.
    Inference,
    /// Reading what the server serves: server and model metadata, model status and config.
    Metadata,
    /// Changing what the server serves: load, unload, reload config, and the repository index.
    ModelRepository,
    /// Registering, listing and unregistering shared-memory regions.
    SharedMemory,
    /// `/metrics` and per-model statistics.
    Metrics,
    /// Liveness and readiness, of the server and of a model.
    Health,
}

impl Group {
    pub const ALL: [Group; 6] = [
        Self::Inference,
        Self::Metadata,
        Self::ModelRepository,
        Self::SharedMemory,
        Self::Metrics,
        Self::Health,
    ];

    /// The name used in the token file and in messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Inference => "inference",
            Self::Metadata => "metadata",
            Self::ModelRepository => "model-repository",
            Self::SharedMemory => "shared-memory",
            Self::Metrics => "metrics",
            Self::Health => "health",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|group| group.name() == name)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of groups, one bit each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Groups(u8);

impl Groups {
    pub const NONE: Self = Self(0);

    pub fn all() -> Self {
        Group::ALL.into_iter().collect()
    }

    pub fn contains(self, group: Group) -> bool {
        self.0 & group.bit() != 0
    }

    pub fn insert(&mut self, group: Group) {
        self.0 |= group.bit();
    }
}

impl FromIterator<Group> for Groups {
    fn from_iter<I: IntoIterator<Item = Group>>(iter: I) -> Self {
        let mut set = Self::NONE;
        for group in iter {
            set.insert(group);
        }
        set
    }
}

use Group::{Health, Inference, Metadata, Metrics, ModelRepository, SharedMemory};

/// Every HTTP route (axum path templates, `{param}` one segment) and every gRPC method
/// (`/package.Service/Method`) with its group. Under `/v1/models/`, a path ending in
/// `:<verb>` is inference and any other is metadata, as the TF Serving dispatcher reads it;
/// its templates are listed for completeness.
pub const ROUTES: &[(&str, Group)] = &[
    // TF Serving REST.
    ("/v1/models/{name}", Metadata),
    ("/v1/models/{name}/versions/{version}", Metadata),
    ("/v1/models/{name}/labels/{label}", Metadata),
    ("/v1/models/{name}/metadata", Metadata),
    ("/v1/models/{name}/versions/{version}/metadata", Metadata),
    ("/v1/models/{name}/labels/{label}/metadata", Metadata),
    ("/v1/models/{name}:predict", Inference),
    ("/v1/models/{name}/versions/{version}:predict", Inference),
    ("/v1/models/{name}/labels/{label}:predict", Inference),
    ("/v1/models/{name}:classify", Inference),
    ("/v1/models/{name}/versions/{version}:classify", Inference),
    ("/v1/models/{name}/labels/{label}:classify", Inference),
    ("/v1/models/{name}:regress", Inference),
    ("/v1/models/{name}/versions/{version}:regress", Inference),
    ("/v1/models/{name}/labels/{label}:regress", Inference),
    // KServe v2 HTTP.
    ("/v2", Metadata),
    ("/v2/models/stats", Metrics),
    ("/v2/models/{name}", Metadata),
    ("/v2/models/{name}/ready", Health),
    ("/v2/models/{name}/config", Metadata),
    ("/v2/models/{name}/stats", Metrics),
    ("/v2/models/{name}/infer", Inference),
    ("/v2/models/{name}/versions/{version}", Metadata),
    ("/v2/models/{name}/versions/{version}/ready", Health),
    ("/v2/models/{name}/versions/{version}/config", Metadata),
    ("/v2/models/{name}/versions/{version}/stats", Metrics),
    ("/v2/models/{name}/versions/{version}/infer", Inference),
    // Logging and trace settings change the server's behaviour: administrators only.
    ("/v2/logging", ModelRepository),
    ("/v2/trace/setting", ModelRepository),
    ("/v2/models/{name}/trace/setting", ModelRepository),
    ("/v2/repository/index", ModelRepository),
    ("/v2/repository/models/{name}/load", ModelRepository),
    ("/v2/repository/models/{name}/unload", ModelRepository),
    ("/v2/systemsharedmemory/status", SharedMemory),
    (
        "/v2/systemsharedmemory/region/{region}/status",
        SharedMemory,
    ),
    (
        "/v2/systemsharedmemory/region/{region}/register",
        SharedMemory,
    ),
    (
        "/v2/systemsharedmemory/region/{region}/unregister",
        SharedMemory,
    ),
    ("/v2/systemsharedmemory/unregister", SharedMemory),
    ("/v2/cudasharedmemory/status", SharedMemory),
    ("/v2/cudasharedmemory/region/{region}/status", SharedMemory),
    (
        "/v2/cudasharedmemory/region/{region}/register",
        SharedMemory,
    ),
    (
        "/v2/cudasharedmemory/region/{region}/unregister",
        SharedMemory,
    ),
    ("/v2/cudasharedmemory/unregister", SharedMemory),
    // Probes and scrapes.
    ("/v2/health/live", Health),
    ("/v2/health/ready", Health),
    ("/livez", Health),
    ("/readyz", Health),
    ("/metrics", Metrics),
    ("/monitoring/prometheus/metrics", Metrics),
    // gRPC: TF Serving.
    ("/tensorflow.serving.PredictionService/Classify", Inference),
    ("/tensorflow.serving.PredictionService/Regress", Inference),
    ("/tensorflow.serving.PredictionService/Predict", Inference),
    (
        "/tensorflow.serving.PredictionService/MultiInference",
        Inference,
    ),
    (
        "/tensorflow.serving.PredictionService/GetModelMetadata",
        Metadata,
    ),
    ("/tensorflow.serving.ModelService/GetModelStatus", Metadata),
    (
        "/tensorflow.serving.ModelService/HandleReloadConfigRequest",
        ModelRepository,
    ),
    // gRPC: KServe v2.
    ("/inference.GRPCInferenceService/ServerLive", Health),
    ("/inference.GRPCInferenceService/ServerReady", Health),
    ("/inference.GRPCInferenceService/ModelReady", Health),
    ("/inference.GRPCInferenceService/ServerMetadata", Metadata),
    ("/inference.GRPCInferenceService/ModelMetadata", Metadata),
    ("/inference.GRPCInferenceService/ModelConfig", Metadata),
    ("/inference.GRPCInferenceService/ModelInfer", Inference),
    (
        "/inference.GRPCInferenceService/ModelStreamInfer",
        Inference,
    ),
    ("/inference.GRPCInferenceService/ModelStatistics", Metrics),
    (
        "/inference.GRPCInferenceService/RepositoryIndex",
        ModelRepository,
    ),
    (
        "/inference.GRPCInferenceService/RepositoryModelLoad",
        ModelRepository,
    ),
    (
        "/inference.GRPCInferenceService/RepositoryModelUnload",
        ModelRepository,
    ),
    (
        "/inference.GRPCInferenceService/SystemSharedMemoryStatus",
        SharedMemory,
    ),
    (
        "/inference.GRPCInferenceService/SystemSharedMemoryRegister",
        SharedMemory,
    ),
    (
        "/inference.GRPCInferenceService/SystemSharedMemoryUnregister",
        SharedMemory,
    ),
    (
        "/inference.GRPCInferenceService/CudaSharedMemoryStatus",
        SharedMemory,
    ),
    (
        "/inference.GRPCInferenceService/CudaSharedMemoryRegister",
        SharedMemory,
    ),
    (
        "/inference.GRPCInferenceService/CudaSharedMemoryUnregister",
        SharedMemory,
    ),
    // Tracing and logging settings change the server's behaviour: administrators only.
    (
        "/inference.GRPCInferenceService/TraceSetting",
        ModelRepository,
    ),
    (
        "/inference.GRPCInferenceService/LogSettings",
        ModelRepository,
    ),
    // gRPC: the standard health service.
    ("/grpc.health.v1.Health/Check", Health),
    ("/grpc.health.v1.Health/Watch", Health),
];

/// The group of a request path; `None` for a path that no route serves.
pub fn group_of(path: &str) -> Option<Group> {
    if let Some(rest) = tf_serving_rest(path) {
        // Read as the dispatcher reads it: decoded, then split. A path that does not decode
        // is refused by the dispatcher before any operation; it is metadata like any other
        // path without a verb.
        let verb = rest.is_ok_and(|rest| split_verb(&rest).1.is_some());
        return Some(if verb { Inference } else { Metadata });
    }
    ROUTES
        .iter()
        .find(|(template, _)| matches(template, path))
        .map(|(_, group)| *group)
}

/// Whether `path` fits `template`, where `{param}` stands for any one segment, as in axum.
/// The first fitting row wins, so the table lists a literal route (`/v2/models/stats`) before
/// the parameter route it would also fit (`/v2/models/{name}`), as axum prefers it.
fn matches(template: &str, path: &str) -> bool {
    let mut want = template.split('/');
    let mut have = path.split('/');
    loop {
        match (want.next(), have.next()) {
            (None, None) => return true,
            (Some(w), Some(_)) if w.starts_with('{') && w.ends_with('}') => {}
            (Some(w), Some(h)) if w == h => {}
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A concrete path for a template: every `{param}` becomes `p`.
    fn instance(template: &str) -> String {
        template
            .split('/')
            .map(|segment| {
                if let Some(rest) = segment.strip_prefix('{') {
                    match rest.split_once('}') {
                        Some((_, tail)) => format!("p{tail}"),
                        None => segment.to_owned(),
                    }
                } else {
                    segment.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join("/")
    }

    #[test]
    fn every_http_route_has_a_group() {
        for path in crate::server::rest_route_paths() {
            assert!(
                ROUTES.iter().any(|(template, _)| *template == path),
                "route {path} is missing from auth::groups::ROUTES"
            );
        }
    }

    #[test]
    fn every_grpc_method_has_a_group() {
        let protos = [
            "proto/kserve/grpc_service.proto",
            "proto/tensorflow_serving/apis/prediction_service.proto",
            "proto/tensorflow_serving/apis/model_service.proto",
        ];
        let mut methods = vec![
            // tonic-health's service, not compiled from proto/.
            "/grpc.health.v1.Health/Check".to_owned(),
            "/grpc.health.v1.Health/Watch".to_owned(),
        ];
        for file in protos {
            let text = std::fs::read_to_string(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file),
            )
            .unwrap_or_else(|err| panic!("{file}: {err}"));
            methods.extend(proto_methods(&text));
        }
        assert!(methods.len() > 25, "too few methods found: {methods:?}");
        for method in methods {
            assert!(
                ROUTES.iter().any(|(template, _)| *template == method),
                "gRPC method {method} is missing from auth::groups::ROUTES"
            );
        }
    }

    /// `/package.Service/Method` for every `rpc` of every `service` in a proto file.
    fn proto_methods(text: &str) -> Vec<String> {
        let mut package = "";
        let mut service = "";
        let mut out = Vec::new();
        for line in text.lines().map(str::trim) {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["package", name, ..] => package = name.trim_end_matches(';'),
                ["service", name, ..] => service = name,
                ["rpc", call, ..] => {
                    let method = call.split('(').next().unwrap_or(call);
                    out.push(format!("/{package}.{service}/{method}"));
                }
                _ => {}
            }
        }
        out
    }

    #[test]
    fn concrete_paths_find_their_template_s_group() {
        for (template, group) in ROUTES {
            let path = instance(template);
            assert_eq!(group_of(&path), Some(*group), "{path} (from {template})");
        }
        assert_eq!(
            group_of("/v1/models/a:b/versions/1:predict"),
            Some(Inference)
        );
        assert_eq!(group_of("/v1/models/a:b/metadata"), Some(Metadata));
        assert_eq!(group_of("/v1/models/%FF"), Some(Metadata));
        assert_eq!(group_of("/v2/models/stats"), Some(Metrics));
        assert_eq!(group_of("/v2/models/m%2F..%2Fx/infer"), Some(Inference));
        assert_eq!(group_of("/v2/models/m/infer/"), None);
        assert_eq!(group_of("/elsewhere"), None);
    }

    /// The dispatcher decodes `%3A` to `:`; so must the group, or an escaped verb passes as
    /// metadata.
    #[test]
    fn escaped_verbs_are_inference() {
        for path in [
            "/v1/models/m%3Apredict",
            "/v1/models/m%3apredict",
            "/v1/models/m/versions/1%3Apredict",
            "/v1/models/m/labels/stable%3Apredict",
            "/v1/models/m%3Aclassify",
            "/v1/models/m%3Aregress",
            "/v1/models/m%2Fversions%2F1%3Apredict",
            "/v1/models/m%253Apredict:predict",
        ] {
            assert_eq!(group_of(path), Some(Inference), "{path}");
        }
        assert_eq!(group_of("/v1/models/m%253Apredict"), Some(Metadata));
    }

    #[test]
    fn group_names_round_trip() {
        for group in Group::ALL {
            assert_eq!(Group::from_name(group.name()), Some(group));
        }
    }
}
