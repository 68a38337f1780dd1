"""The OpenAPI document: generated from code, committed without drift, and honoured by the app (schemathesis)."""

from __future__ import annotations

import json

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from app.api.routes import ROUTES
from app.openapi import COMMITTED, build_document, render


def test_committed_document_matches_the_code():
    assert COMMITTED.read_text() == render(), "run `python -m app.openapi` and commit app/openapi.json"


def test_document_covers_every_route_and_is_served(client):
    doc = build_document()
    ops = {(path, method) for path, item in doc["paths"].items() for method in item}
    assert len(ops) == len(ROUTES)
    assert doc["openapi"].startswith("3.1")
    served = client.get("/api/v1/openapi.json")
    assert served.status_code == 200 and served.json == json.loads(render())


def test_no_server_errors_and_responses_match_the_schema(app, auth):
    """Schemathesis, in-process against the WSGI app, every operation, bounded examples."""
    schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    # Schemathesis leaves out the endpoint that serves the schema itself.
    assert {o.label for o in operations} == {f"{r.method} /api/v1{r.path.replace('<int:run_id>', '{run_id}')}"
                                             .replace("<path:name>", "{name}").replace("<name>", "{name}")
                                             for r in ROUTES if r.path != "/openapi.json"}
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=12, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case):
            case.call_and_validate(headers=auth["admin"], checks=[not_a_server_error, response_schema_conformance])

        check()
