"""The OpenAPI 3.1 document of /api/v1, built from a route table and the schemas in code (served by
``app.api.docs``, written to ``app/openapi.json`` by ``python -m app.openapi``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from app.api.params import PARAMS
from app.api.schemas import SCHEMAS, THRESHOLDS_LIST, ref
from app.errors import BUSY_RETRY_AFTER_S
from app.ids import MAX_ID
from app.text import NO_CONTROL

# Rows of app.api.routes.ROUTES, not imported: the route table imports the view that serves this document.
Route = Any

_CONVERTER = re.compile(r"<(?:(\w+):)?(\w+)>")
_NAME_CHAR = NO_CONTROL[:-1]  # the class without its closing bracket, to add '/'
_PATH_TYPES = {"id": {"type": "integer", "minimum": 1, "maximum": MAX_ID},
               "path": {"type": "string", "pattern": f"^{NO_CONTROL}+$", "minLength": 1},
               None: {"type": "string", "pattern": f"^{_NAME_CHAR}/]+$", "minLength": 1, "maxLength": 500}}
_ERROR_TEXT = {400: "Invalid input (also: a control character in the path or query, a malformed body)",
               401: "Missing, invalid or revoked credentials",
               403: "The caller lacks the scope, does not own the resource, or the CSRF check failed",
               404: "Not found", 413: "Larger than the configured limit",
               414: "The request URI is longer than 4000 bytes", 415: "Unsupported content type",
               422: "The file is not a readable export (an empty body: EMPTY_FILE)",
               503: "The metadata DB is busy or a dependency is unreachable; retry after Retry-After seconds"}
# Every operation may answer these: the request guards (app.guards) and a busy database (app.errors).
_ALWAYS = {400, 414, 503}


def _path(route: Route) -> tuple[str, list[dict[str, Any]]]:
    params = [{"name": name, "in": "path", "required": True,
               "schema": _PATH_TYPES[conv or None]}
              for conv, name in _CONVERTER.findall(route.path)]
    return "/api/v1" + _CONVERTER.sub(r"{\2}", route.path), params


def _body(kind: str | None) -> dict[str, Any] | None:
    if kind == "multipart":
        files = {"type": "array", "items": {"type": "string", "contentMediaType": "application/octet-stream"}}
        form = {"type": "object", "properties": {**SCHEMAS["RunMetadata"]["properties"],
                                                  "tag": SCHEMAS["RunMetadata"]["properties"]["tags"],
                                                  "threshold": THRESHOLDS_LIST,
                                                  "files": files}}
        return {"required": False, "content": {"multipart/form-data": {"schema": form},
                                                "application/json": {"schema": ref("RunMetadata")}}}
    if kind == "json":
        return {"required": True, "content": {"application/json": {"schema": ref("Reanalysis")}}}
    if kind == "binary":
        return {"required": True, "description": "The export's bytes, optionally gzip or zstd compressed. An "
                "empty body is answered 422 with code EMPTY_FILE.", "content": {"application/octet-stream": {
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
    codes = set(route.errors) | _ALWAYS
    if route.scope is None:
        op["security"] = []
    else:
        codes |= {401, 403}
    for code in sorted(codes):
        op["responses"][str(code)] = {"description": _ERROR_TEXT.get(code, "Error"),
                                      "content": {"application/json": {"schema": ref("Error")}}}
        if code == 503:
            op["responses"]["503"]["headers"] = {"Retry-After": {
                "description": f"Seconds to wait before retrying ({BUSY_RETRY_AFTER_S} when the DB is busy)",
                "schema": {"type": "integer", "minimum": 0}}}
    if route.body == "binary":
        op["responses"]["200"] = {"description": "The same bytes were already in the run",
                                  "content": {"application/json": {"schema": ref(route.response)}}}
    if route.body == "multipart":
        op["parameters"].append({
            "name": "Idempotency-Key", "in": "header", "required": False,
            "description": "Any unique string (a UUID): a retry with the same key, by the same caller, answers "
                           "200 with the run the first request created instead of creating another",
            "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"}})
        op["responses"]["200"] = {"description": "An upload with the same Idempotency-Key already created this "
                                  "run (header Idempotent-Replayed: true)",
                                  "content": {"application/json": {"schema": ref(route.response)}}}
        op["responses"]["409"] = {"description": "The run this Idempotency-Key created was deleted (RUN_DELETED)",
                                  "content": {"application/json": {"schema": ref("Error")}}}
    body = _body(route.body)
    if body is not None:
        op["requestBody"] = body
    return op


def build_document(routes: Iterable[Route]) -> dict[str, Any]:
    """The whole OpenAPI 3.1 document of ``routes`` (deterministic: same code, same bytes)."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
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
