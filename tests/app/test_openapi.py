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


# The places where the document and the server disagreed, checked both ways.

def _documented(path: str, method: str) -> dict:
    return build_document()["paths"][path][method]


def test_every_path_answers_unknown_methods_405_with_the_documented_allow(client, auth):
    doc = build_document()
    for path, item in doc["paths"].items():
        concrete = re.sub(r"\{\w+\}", "1", path)
        documented = {m.upper() for m in item}
        for method in ("TRACE", "PATCH", "FOO"):
            if method.lower() in item:
                continue
            r = client.open(concrete, method=method, headers=auth["admin"])
            assert r.status_code == 405 and r.json["error"]["code"] == "METHOD_NOT_ALLOWED", (path, method)
            allowed = {m.strip() for m in r.headers["Allow"].split(",")}
            assert allowed - {"HEAD", "OPTIONS"} == documented, (path, allowed)


def test_an_over_long_uri_is_the_documented_414(client, auth):
    for path, item in build_document()["paths"].items():
        for method, op in item.items():
            assert "414" in op["responses"], (path, method)
    r = client.get("/api/v1/runs", query_string={"job": "j" * 4100}, headers=auth["read"])
    assert (r.status_code, r.json["error"]["code"]) == (414, "URI_TOO_LONG")
    r = client.get("/api/v1/jobs/" + "j" * 4100 + "/history", headers=auth["read"])
    assert r.status_code == 414
    assert client.get("/api/v1/runs", query_string={"job": "j" * 200}, headers=auth["read"]).status_code == 200


def test_tag_and_git_sha_patterns_are_the_servers(client, auth):
    meta = build_document()["components"]["schemas"]["RunMetadata"]["properties"]
    tag, sha = re.compile(meta["tags"]["items"]["pattern"]), re.compile(meta["git_sha"]["pattern"])
    for value in ("k=v", "a.b:c/d-e_f=", "k=v=w", "k= spaced value ", "k=" + "v" * 500, "k" * 100 + "=1",
                  " k=v", "k v=1", "=v", "k", "k=v\x00", "k=\n", "k=" + "v" * 501, "k" * 101 + "=1", "ключ=1"):
        r = client.post("/api/v1/runs", headers=auth["write"], json={"tags": [value]})
        # fullmatch: ECMA-262's '$' (the document's) does not match before a final newline as Python's does.
        assert (r.status_code == 202) == bool(tag.fullmatch(value)), (value, r.status_code)
    for value in ("abcd", "ABCDEF0123456789" * 4, "abc", "g123", "a" * 65, "abcd\n", "0x1234"):
        r = client.post("/api/v1/runs", headers=auth["write"], json={"git_sha": value})
        assert (r.status_code == 202) == bool(sha.fullmatch(value)), (value, r.status_code)


def test_an_empty_put_is_the_documented_422_empty_file(client, auth):
    op = _documented("/api/v1/runs/{run_id}/reports/{name}", "put")
    assert "EMPTY_FILE" in op["requestBody"]["description"] and "422" in op["responses"]
    run = client.post("/api/v1/runs", headers=auth["write"], json={}).json["id"]
    for headers in ({}, {"Content-Length": "0"}, {"Transfer-Encoding": "chunked"}):
        r = client.put(f"/api/v1/runs/{run}/reports/r.sqlite", headers={**auth["write"], **headers}, data=b"")
        assert (r.status_code, r.json["error"]["code"]) == (422, "EMPTY_FILE"), headers
    assert client.get(f"/api/v1/runs/{run}", headers=auth["read"]).json["reports"] == []


def test_threshold_ranges_are_documented_as_the_server_enforces_them(client, auth):
    """Each threshold's documented type and range is the rule's declaration; its edges are accepted, a value
    just past them is a 400 naming the threshold and its range."""
    from analysis.api import threshold_ranges

    props = build_document()["components"]["schemas"]["RunMetadata"]["properties"]["thresholds"]["anyOf"][1]
    declared = threshold_ranges()
    assert set(props["properties"]) == set(declared)
    for key, d in declared.items():
        schema = props["properties"][key]
        ranged = schema["anyOf"][0] if "anyOf" in schema else schema
        assert (ranged["type"], ranged["minimum"], ranged["maximum"]) == (d["type"], d["minimum"], d["maximum"])
        for value, status in ((d["maximum"], 202), (d["minimum"], 202), (d["maximum"] * 2 + 1, 400)):
            r = client.post("/api/v1/runs", headers=auth["write"], json={"job": "t", "thresholds": {key: value}})
            assert r.status_code == status, (key, value, r.json)
            if status == 400:
                assert r.json["error"]["details"]["fields"]["thresholds"].startswith(f"{key} must be ")


def test_run_metadata_requires_no_field(client, auth):
    """Every metadata field is optional in the document as on the server (``thresholds`` was marked required)."""
    meta = build_document()["components"]["schemas"]["RunMetadata"]
    assert meta["required"] == []
    assert client.post("/api/v1/runs", headers=auth["write"], json={}).status_code == 202


def test_the_analysis_types_are_the_result_schemas_defs():
    """The analysis' types in the document are generated from the committed result schema's ``$defs``, not
    written by hand: a field added to ``ReportSummary`` (or ``Verdict`` ...) is in the API's summary."""
    committed = json.loads((COMMITTED.parent.parent / "analysis" / "result.schema.json").read_text())
    components = build_document()["components"]["schemas"]
    for name, schema in committed["$defs"].items():
        text = json.dumps(schema, sort_keys=True).replace("#/$defs/", "#/components/schemas/")
        assert json.dumps(components[name], sort_keys=True) == text, name
    summary = components["Summary"]["properties"]
    assert summary["reports"]["items"]["properties"]["data"] == {"$ref": "#/components/schemas/StoredReportSummary"}
    stored = components["StoredReportSummary"]["properties"]
    assert set(stored) == set(committed["$defs"]["ReportSummary"]["properties"])
    assert summary["verdict"]["anyOf"][0] == {"$ref": "#/components/schemas/Verdict"}
    kernel = components["StoredNcuKernel"]["properties"]
    assert set(kernel) == set(committed["$defs"]["NcuKernel"]["properties"]) | {"launches", "profiled_ns"}
