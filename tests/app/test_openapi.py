"""The OpenAPI document: generated from code, committed without drift, and honoured by the app (schemathesis)."""

from __future__ import annotations

import json
import re

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    allow_header_conformance,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

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


@schemathesis.check
def valid_metadata_accepted(ctx, response, case):
    """positive_data_acceptance, except a 422: an uploaded file that is not an export (no schema can say
    which bytes are a readable Nsight export; the metadata around it must still be accepted)."""
    if response.status_code == 422:
        return None
    return positive_data_acceptance(ctx, response, case)


def test_no_server_errors_and_responses_match_the_schema(app, auth):
    """Schemathesis, in-process against the WSGI app, every operation, bounded examples."""
    schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    # Schemathesis leaves out the endpoint that serves the schema itself.
    assert {o.label for o in operations} == {r.method + " /api/v1" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", r.path)
                                             for r in ROUTES if r.path != "/openapi.json"}
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=12, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case):
            # Every status the server answers is documented; data the document allows is accepted; a method
            # the path lacks is a 405 with an Allow header listing the documented ones.
            case.call_and_validate(headers=auth["admin"], checks=[
                not_a_server_error, response_schema_conformance, status_code_conformance,
                valid_metadata_accepted, unsupported_method, allow_header_conformance])

        check()
