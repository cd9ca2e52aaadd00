"""The one exception the client raises for a refused request, over either transport."""

from __future__ import annotations

# HTTP status -> the server's stable error type (its error table, shared by both protocols).
_HTTP_KINDS = {
    400: "invalid_argument",
    403: "permission_denied",
    404: "not_found",
    405: "invalid_argument",
    409: "already_exists",
    413: "invalid_argument",
    429: "resource_exhausted",
    500: "internal",
    501: "unimplemented",
    503: "unavailable",
    504: "deadline_exceeded",
}


class TensorportError(Exception):
    """The server refused or failed a request.

    `kind` is the server's stable error type ("not_found", "invalid_argument",
    "resource_exhausted", ...), the same whichever protocol carried the request; `status` is
    the HTTP status or the gRPC status code name.
    """

    def __init__(self, kind: str, status: int | str, message: str):
        super().__init__(f"{kind} ({status}): {message}")
        self.kind = kind
        self.status = status
        self.message = message

    @classmethod
    def from_http(cls, status: int, message: str) -> TensorportError:
        return cls(_HTTP_KINDS.get(status, "internal" if status >= 500 else "invalid_argument"), status, message)

    @classmethod
    def from_grpc(cls, code_name: str, message: str) -> TensorportError:
        return cls(code_name.lower(), code_name, message)
