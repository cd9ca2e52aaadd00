"""openapi/tensorport.yaml loaded once, and a check that a real response is one the document
describes: its status is listed for the operation, its content type is listed for that
status, and its body validates against the schema given there."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import yaml
from openapi_schema_validator import OAS30Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

SPEC_PATH = Path(__file__).resolve().parents[2] / "openapi" / "tensorport.yaml"
SPEC_URI = "urn:tensorport-openapi"
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
BINARY_HEADER = "Inference-Header-Content-Length"


@functools.cache
def spec() -> dict:
    return yaml.safe_load(SPEC_PATH.read_text())


@functools.cache
def _registry() -> Registry:
    return Registry().with_resource(SPEC_URI, Resource.from_contents(spec(), default_specification=DRAFT4))


def operations() -> set[tuple[str, str]]:
    """Every (METHOD, path template) the document names."""
    return {(method.upper(), path)
            for path, item in spec()["paths"].items()
            for method in item if method in HTTP_METHODS}


def _pointer(ref: str) -> str:
    return ref.removeprefix("#")


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _resolve(node: dict, pointer: str) -> tuple[dict, str]:
    """Follows `$ref`s of non-schema objects (responses, request bodies)."""
    while "$ref" in node:
        pointer = _pointer(node["$ref"])
        node = spec()
        for token in pointer.strip("/").split("/"):
            node = node[token.replace("~1", "/").replace("~0", "~")]
    return node, pointer


def _validate_body(schema_pointer: str, body) -> None:
    validator = OAS30Validator({"$ref": f"{SPEC_URI}#{schema_pointer}"}, registry=_registry())
    errors = sorted(validator.iter_errors(body), key=lambda e: list(e.absolute_path))
    if errors:
        details = "\n".join(f"  at {list(e.absolute_path)}: {e.message[:300]}" for e in errors[:10])
        raise AssertionError(f"body breaks {schema_pointer}:\n{details}\nbody: {str(body)[:500]}")


def check_response(method: str, template: str, response) -> None:
    """Raises AssertionError unless `response` (a requests.Response) is documented for
    `method template`."""
    item = spec()["paths"].get(template)
    assert item is not None, f"{template} is not in the document"
    operation = item.get(method.lower())
    assert operation is not None, f"{method} {template} is not in the document"
    status = str(response.status_code)
    responses = operation["responses"]
    assert status in responses, (
        f"{method} {template} answered {status}, which the document does not list "
        f"({sorted(responses)}): {response.text[:300]}")
    base = f"/paths/{_escape(template)}/{method.lower()}/responses/{status}"
    documented, pointer = _resolve(responses[status], base)
    content = documented.get("content")
    if not content:
        assert not response.content, f"{method} {template} {status} should have no body: {response.text[:300]}"
        return
    media_type = response.headers.get("content-type", "").split(";")[0].strip()
    assert media_type in content, (
        f"{method} {template} {status} has content type {media_type!r}; the document lists {sorted(content)}")
    schema_pointer = f"{pointer}/content/{_escape(media_type)}/schema"
    if media_type == "application/json":
        _validate_body(schema_pointer, json.loads(response.content))
    elif media_type == "application/octet-stream" and BINARY_HEADER.lower() in response.headers:
        # The binary tensor extension: the JSON part must still be a documented JSON body.
        length = int(response.headers[BINARY_HEADER])
        json_pointer = f"{pointer}/content/application~1json/schema"
        _validate_body(json_pointer, json.loads(response.content[:length]))
    elif media_type == "text/plain":
        _validate_body(schema_pointer, response.text)
