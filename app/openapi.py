"""The OpenAPI 3.1 document of /api/v1, generated from the route table and the schemas in code.

``python -m app.openapi`` rewrites the committed ``app/openapi.json``; a test fails when it drifts.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from app.api.params import PARAMS
from app.api.routes import ROUTES, Route
from app.api.schemas import SCHEMAS, ref

COMMITTED = Path(__file__).with_name("openapi.json")
_CONVERTER = re.compile(r"<(?:(\w+):)?(\w+)>")
_PATH_TYPES = {"int": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}, "path": {"type": "string", "minLength": 1},
               None: {"type": "string", "pattern": "^[^/]+$", "minLength": 1, "maxLength": 500}}
_ERROR_TEXT = {400: "Invalid input", 401: "Missing, invalid or revoked credentials",
               403: "The caller lacks the scope, or the CSRF check failed", 404: "Not found",
               413: "Larger than the configured limit", 415: "Unsupported content type",
               422: "The file is not a readable export", 503: "A dependency is unreachable"}


def _path(route: Route) -> tuple[str, list[dict[str, Any]]]:
    params = [{"name": name, "in": "path", "required": True,
               "schema": _PATH_TYPES[conv or None]}
              for conv, name in _CONVERTER.findall(route.path)]
    return "/api/v1" + _CONVERTER.sub(r"{\2}", route.path), params


def _body(kind: str | None) -> dict[str, Any] | None:
    if kind == "multipart":
        files = {"type": "array", "items": {"type": "string", "contentMediaType": "application/octet-stream"}}
        form = {"type": "object", "properties": {**SCHEMAS["RunMetadata"]["properties"],
                                                  "tag": {"type": "array", "items": {"type": "string"}},
                                                  "files": files}}
        return {"required": False, "content": {"multipart/form-data": {"schema": form},
                                                "application/json": {"schema": ref("RunMetadata")}}}
    if kind == "json":
        return {"required": True, "content": {"application/json": {"schema": ref("Reanalysis")}}}
    if kind == "binary":
        return {"required": True, "content": {"application/octet-stream": {
            "schema": {"type": "string", "contentMediaType": "application/octet-stream"}}}}
    return None


def _operation(route: Route) -> dict[str, Any]:
    _, path_params = _path(route)
    query = [{"name": name, "in": "query", "required": PARAMS[name].required,
              "description": PARAMS[name].description, "schema": PARAMS[name].schema(),
              **({"explode": True} if PARAMS[name].repeat else {})} for name in route.params]
    op: dict[str, Any] = {
        "operationId": route.endpoint, "summary": route.summary, "tags": [route.tag],
        "parameters": path_params + query,
        "responses": {str(route.status): {"description": "Success",
                                          "content": {"application/json": {"schema": ref(route.response)}}}},
    }
    codes = set(route.errors)
    if route.scope is None:
        op["security"] = []
    else:
        codes |= {401, 403}
    for code in sorted(codes):
        op["responses"][str(code)] = {"description": _ERROR_TEXT.get(code, "Error"),
                                      "content": {"application/json": {"schema": ref("Error")}}}
    if route.body == "binary":
        op["responses"]["200"] = {"description": "The same bytes were already in the run",
                                  "content": {"application/json": {"schema": ref(route.response)}}}
    body = _body(route.body)
    if body is not None:
        op["requestBody"] = body
    return op


def build_document() -> dict[str, Any]:
    """The whole OpenAPI 3.1 document (deterministic: same code, same bytes)."""
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        path, _ = _path(route)
        paths.setdefault(path, {})[route.method.lower()] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Goodput API", "version": "1",
                 "description": "Where does your GPU time go? Upload Nsight exports, read ranked findings."},
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"},
                                "session": {"type": "apiKey", "in": "cookie", "name": "session"}},
        },
        "security": [{"bearer": []}, {"session": []}],
    }


def render() -> str:
    return json.dumps(build_document(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":  # pragma: no cover
    COMMITTED.write_text(render())
    sys.stdout.write(f"wrote {COMMITTED}\n")
