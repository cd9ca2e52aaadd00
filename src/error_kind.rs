//! The failure classes both protocols distinguish, and the one table that spells each on the
//! wire: an HTTP status, a gRPC code and a stable `error_type` label, used by both protocols
//! and by the overload layers. This sits at the bottom of the crate, so that every layer's
//! error enum can name its kind, and every layer that answers a refusal can read the table,
//! without importing the layers above.

/// The failure classes both protocols distinguish. One row each in [`ErrorKind::table`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    NotFound,
    InvalidArgument,
    AlreadyExists,
    /// No credentials, or credentials the server does not know.
    Unauthenticated,
    PermissionDenied,
    Unavailable,
    ResourceExhausted,
    DeadlineExceeded,
    Unimplemented,
    Internal,
}

/// One row of the mapping table.
pub struct ErrorRow {
    pub http_status: u16,
    pub grpc_code: tonic::Code,
    /// Stable, lower-case label: part of the API and of metric label values.
    pub error_type: &'static str,
}

impl ErrorKind {
    /// Every kind, for reading the table backwards (from a status to its kind).
    pub const ALL: [ErrorKind; 10] = [
        Self::NotFound,
        Self::InvalidArgument,
        Self::AlreadyExists,
        Self::Unauthenticated,
        Self::PermissionDenied,
        Self::Unavailable,
        Self::ResourceExhausted,
        Self::DeadlineExceeded,
        Self::Unimplemented,
        Self::Internal,
    ];

    /// The single source of truth for status codes.
    pub const fn table(self) -> ErrorRow {
        use tonic::Code;
        let (http_status, grpc_code, error_type) = match self {
            Self::NotFound => (404, Code::NotFound, "not_found"),
            Self::InvalidArgument => (400, Code::InvalidArgument, "invalid_argument"),
            Self::AlreadyExists => (409, Code::AlreadyExists, "already_exists"),
            Self::Unauthenticated => (401, Code::Unauthenticated, "unauthenticated"),
            Self::PermissionDenied => (403, Code::PermissionDenied, "permission_denied"),
            Self::Unavailable => (503, Code::Unavailable, "unavailable"),
            Self::ResourceExhausted => (429, Code::ResourceExhausted, "resource_exhausted"),
            Self::DeadlineExceeded => (504, Code::DeadlineExceeded, "deadline_exceeded"),
            Self::Unimplemented => (501, Code::Unimplemented, "unimplemented"),
            Self::Internal => (500, Code::Internal, "internal"),
        };
        ErrorRow {
            http_status,
            grpc_code,
            error_type,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_maps_to_matching_http_and_grpc_codes() {
        let pairs = [
            (ErrorKind::NotFound, 404, tonic::Code::NotFound),
            (
                ErrorKind::InvalidArgument,
                400,
                tonic::Code::InvalidArgument,
            ),
            (
                ErrorKind::Unauthenticated,
                401,
                tonic::Code::Unauthenticated,
            ),
            (
                ErrorKind::PermissionDenied,
                403,
                tonic::Code::PermissionDenied,
            ),
            (ErrorKind::Unavailable, 503, tonic::Code::Unavailable),
            (
                ErrorKind::ResourceExhausted,
                429,
                tonic::Code::ResourceExhausted,
            ),
            (
                ErrorKind::DeadlineExceeded,
                504,
                tonic::Code::DeadlineExceeded,
            ),
            (ErrorKind::Unimplemented, 501, tonic::Code::Unimplemented),
            (ErrorKind::Internal, 500, tonic::Code::Internal),
        ];
        for (kind, http, grpc) in pairs {
            let row = kind.table();
            assert_eq!(row.http_status, http, "{kind:?}");
            assert_eq!(row.grpc_code, grpc, "{kind:?}");
        }
    }
}
