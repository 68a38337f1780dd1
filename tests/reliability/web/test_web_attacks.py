"""Hostile requests to the web and the API, each on SQLite and PostgreSQL:
the typed answer, and nothing created, stored or left behind."""

from __future__ import annotations

from urllib.parse import quote

import pytest
import sqlalchemy as sa

from app.models import Report, Run
from app.services.jobs import pipeline
from tests.conftest import corpus_file
from tests.reliability.web.helpers import csrf_of, row_counts, sign_in, stored_files

NSYS = corpus_file("vecadd-2026.sqlite")

# --- 1. open redirect after sign-in -------------------------------------------------------------------

ODD_TARGETS = ["/%09/evil.example", "/%0d/x", "/%0a/x", "//x", "/%5Cx", "/\\x", "http://evil.example/",
               "https:evil.example", "/%2F/evil.example", "/%252F%252Fevil.example", "/%2509/evil.example",
               "javascript:alert(1)", "/../x", "%2F%2Fevil.example", "/ /evil.example"]


@pytest.mark.parametrize("target", ODD_TARGETS)
def test_sign_in_never_redirects_off_site_or_fails(app, people, target):
    client = app.test_client()
    resp = sign_in(client, "alice", next_=target)
    assert resp.status_code == 302 and resp.headers["Location"] == "/", (target, resp.headers.get("Location"))
    # Already signed in, the login page redirects the same way.
    again = client.get(f"/login?next={target}")
    assert again.status_code == 302 and again.headers["Location"] == "/"


def test_sign_in_keeps_a_plain_local_target(app, people):
    resp = sign_in(app.test_client(), "alice", next_="/runs/7%3Ftab%3Dfindings")
    assert resp.status_code == 302 and resp.headers["Location"] == "/runs/7?tab=findings"


# --- 5. control characters in names and text ----------------------------------------------------------

def _multipart(client, headers, filename="x.sqlite", **fields):
    data = {key: value for key, value in fields.items()}
    data["files"] = [(NSYS.open("rb"), filename)]
    return client.post("/api/v1/runs", headers=headers, data=data, content_type="multipart/form-data")


@pytest.mark.parametrize("bad", ["\x00", "\x01", "\n", "\t", "\x85"])
def test_control_characters_are_400_before_anything_is_stored(app, db, settings, people, bad):
    client, h = app.test_client(), people["alice"]["h"]
    run_id = client.post("/api/v1/runs", headers=h, json={"job": "base"}).json["id"]
    before, files_before = row_counts(db), stored_files(settings)
    attempts = {
        "multipart filename": lambda: _multipart(client, h, filename=f"rank0{bad}.sqlite"),
        "multipart cluster": lambda: _multipart(client, h, cluster=f"eos{bad}"),
        "multipart tag value": lambda: _multipart(client, h, tag=f"k=v{bad}"),
        "multipart job": lambda: _multipart(client, h, job=f"j{bad}"),
        "PUT report name": lambda: client.put(f"/api/v1/runs/{run_id}/reports/r{quote(bad)}.sqlite", headers=h,
                                              data=NSYS.read_bytes()),
        "JSON cluster": lambda: client.post("/api/v1/runs", headers=h, json={"cluster": f"c{bad}"}),
        "JSON tag": lambda: client.post("/api/v1/runs", headers=h, json={"tags": [f"k{bad}=v"]}),
        "JSON tag value": lambda: client.post("/api/v1/runs", headers=h, json={"tags": {"k": f"v{bad}"}}),
        "JSON job": lambda: client.post("/api/v1/runs", headers=h, json={"job": f"j{bad}"}),
        "job history": lambda: client.get(f"/api/v1/jobs/base{quote(bad)}/history", headers=h),
        "query tag": lambda: client.get("/api/v1/runs", headers=h, query_string={"tag": f"k=v{bad}"}),
        "query submitter": lambda: client.get("/api/v1/runs", headers=h, query_string={"submitter": f"a{bad}"}),
    }
    for what, attempt in attempts.items():
        resp = attempt()
        assert resp.status_code == 400, (what, resp.status_code, resp.get_data(as_text=True)[:300])
        assert resp.json["error"]["code"] == "VALIDATION_ERROR", what
        assert row_counts(db) == before, what
        assert stored_files(settings) == files_before == [], what  # nothing in uploads/ or staging/


@pytest.mark.parametrize("bad", ["\x00", "\n"])
def test_control_characters_in_web_pages_and_forms_are_400(app, db, people, bad):
    client = app.test_client()
    assert sign_in(client, "alice").status_code == 302
    q = quote(bad)
    for path in (f"/jobs/base{q}x", f"/?job={q}", f"/?submitter=a{q}", f"/jobs.json?q={q}"):
        assert client.get(path).status_code == 400, path
    # A user name with a NUL is an unknown user (401), never a database error.
    assert sign_in(app.test_client(), f"alice{bad}").status_code == 401
    html = client.get("/tokens").get_data(as_text=True)
    resp = client.post("/tokens", data={"action": "create", "name": f"ci{bad}", "scope": "read",
                                        "csrf_token": csrf_of(html)})
    assert resp.status_code == 400 and "control characters" in resp.get_data(as_text=True)


# --- 6. JSON depth and size -----------------------------------------------------------------------------

@pytest.mark.parametrize("body", [
    "[" * 5000 + "]" * 5000,
    '{"job": "j", "x": ' + "[" * 40 + "]" * 40 + "}",
    '{"job": "j", "x": "' + "a" * 70_000 + '"}',
    '{"job": "j", "x": ' + '{"a":' * 5000 + "1" + "}" * 5000 + "}",
])
def test_deep_or_large_json_is_400_and_creates_nothing(app, db, settings, people, body):
    before = row_counts(db)
    resp = app.test_client().post("/api/v1/runs", headers=people["alice"]["h"], data=body,
                                  content_type="application/json")
    assert resp.status_code == 400 and resp.json["error"]["code"] == "BAD_REQUEST", resp.get_data(as_text=True)[:200]
    assert row_counts(db) == before and stored_files(settings) == []


def test_json_within_the_bounds_is_accepted(app, people):
    body = '{"job": "j", "x": ' + "[" * 30 + "]" * 30 + ', "s": "[[[[{{{{"}'
    resp = app.test_client().post("/api/v1/runs", headers=people["alice"]["h"], data=body,
                                  content_type="application/json")
    assert resp.status_code == 202 and resp.json["job"] == "j"


# --- 7. malformed multipart --------------------------------------------------------------------------

def _part(boundary: str, name: str, value: bytes, filename: str | None = None) -> bytes:
    disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    return f"--{boundary}\r\nContent-Disposition: {disp}\r\n\r\n".encode() + value + b"\r\n"


MALFORMED = {
    "no boundary parameter": ("multipart/form-data", b"--x\r\n\r\n--x--\r\n"),
    "garbage": ("multipart/form-data; boundary=xyz", b"this is not multipart at all"),
    "truncated after a field": ("multipart/form-data; boundary=xyz", b'--xyz\r\nContent-Disposition: form-data; '
                                b'name="job"\r\n\r\nabc'),
    "truncated inside a file": ("multipart/form-data; boundary=xyz",
                                _part("xyz", "job", b"j") + b'--xyz\r\nContent-Disposition: form-data; name="files"; '
                                b'filename="a.sqlite"\r\n\r\n' + NSYS.read_bytes()[:200_000]),
    "part without headers end": ("multipart/form-data; boundary=xyz", b"--xyz\r\nContent-Disposition: form-data"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_multipart_is_400_and_creates_nothing(app, db, settings, people, case):
    content_type, body = MALFORMED[case]
    before = row_counts(db)
    resp = app.test_client().post("/api/v1/runs", headers={**people["alice"]["h"], "Content-Type": content_type},
                                  data=body)
    assert resp.status_code == 400 and resp.json["error"]["code"] == "BAD_REQUEST", resp.get_data(as_text=True)
    assert row_counts(db) == before and stored_files(settings) == []


def test_well_formed_multipart_still_uploads(app, db, settings, people):
    body = _part("xyz", "job", b"ok") + _part("xyz", "files", NSYS.read_bytes(), "r0.sqlite") + b"--xyz--\r\n"
    resp = app.test_client().post("/api/v1/runs", data=body, headers={
        **people["alice"]["h"], "Content-Type": "multipart/form-data; boundary=xyz"})
    assert resp.status_code == 202 and [r["name"] for r in resp.json["reports"]] == ["r0.sqlite"]
    assert len([p for p in stored_files(settings) if "uploads" in p.parts]) == 1


# --- 9. ids are never reused after a purge -----------------------------------------------------------

def test_run_and_report_ids_are_not_reused_after_a_purge(app, db, settings, people):
    client, h = app.test_client(), people["root"]["h"]
    first = client.post("/api/v1/runs", headers=h, data={"files": [(NSYS.open("rb"), "a.sqlite")]}).json
    run_id, report_id = first["id"], first["reports"][0]["id"]
    assert client.delete(f"/api/v1/runs/{run_id}", headers=h).status_code == 202
    assert pipeline.delete_run_rows(db, run_id) is not None  # what purge.run does
    assert db.scalar(sa.select(sa.func.count()).select_from(Run)) == 0
    assert db.scalar(sa.select(sa.func.count()).select_from(Report)) == 0
    second = client.post("/api/v1/runs", headers=h, data={"files": [(NSYS.open("rb"), "b.sqlite")]}).json
    assert second["id"] > run_id and second["reports"][0]["id"] > report_id
    # The saved URL of the purged run answers 404, never another run.
    assert client.get(f"/api/v1/runs/{run_id}", headers=h).status_code == 404
