"""Request bodies and text at their edges, on SQLite and PostgreSQL: JSON parsing linear in the body's size
(64 KB of escaped quotes took a regex pre-scan over 20 s), and text that cannot be encoded (unpaired
surrogates from JSON escapes or bytes that are not UTF-8) refused with 400 wherever text is accepted, so
nothing stored ever breaks a page."""

from __future__ import annotations

import json
import time

import pytest

from app.api.request import MAX_JSON_BYTES, MAX_JSON_DEPTH, json_depth
from tests.reliability.web.helpers import row_counts, sign_in

# Four times the bytes: a linear scan takes about four times as long, the backtracking one took sixteen.
SMALL, LARGE = 16 * 1024, 64 * 1024
# Bodies that made a backtracking string pattern scan to the end once per quote.
HOSTILE = {
    "escaped quotes": lambda n: b'\\"' * (n // 2),
    "one open string of escaped quotes": lambda n: b'"' + b'\\"' * (n // 2 - 1),
    "quotes and backslashes": lambda n: b'"\\' * (n // 2),
    "open brackets": lambda n: b"[" * n,
}


def _best_of(fn, tries: int = 5, calls: int = 5) -> float:
    """The fastest of ``tries`` timings of ``calls`` calls: the one least disturbed by other work on the machine."""
    best = float("inf")
    for _ in range(tries):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, time.perf_counter() - start)
    return best


@pytest.mark.parametrize("body", list(HOSTILE.values()), ids=list(HOSTILE))
def test_the_depth_scan_is_linear_in_the_body_size(body):
    small, large = (_best_of(lambda n=n: json_depth(body(n), MAX_JSON_DEPTH)) for n in (SMALL, LARGE))
    # A ratio of times on one machine, not a time: linear is about 4, quadratic 16; 8 leaves room for noise.
    assert large < 8 * small, (small, large)


def test_the_depth_scan_still_measures_nesting_and_skips_strings():
    assert json_depth(b'{"a": [1, {"b": "[[[{{{"}], "c": "\\"]]"}') == 3
    assert json_depth(b'["\\\\", [[]]]') == 3               # an escaped backslash ends before the quote
    assert json_depth(b"[" * 100, limit=MAX_JSON_DEPTH) == MAX_JSON_DEPTH + 1


def test_a_body_of_escaped_quotes_is_a_quick_400(app, people):
    client = app.test_client()
    raw = b'{"job": "' + b'\\"' * ((MAX_JSON_BYTES - 20) // 2) + b'"'  # unterminated: never valid JSON
    start = time.perf_counter()
    resp = client.post("/api/v1/runs", headers={**people["alice"]["h"], "Content-Type": "application/json"},
                       data=raw)
    assert time.perf_counter() - start < 5.0  # the backtracking pre-scan took over 20 s on this body
    assert resp.status_code == 400 and resp.json["error"]["code"] in ("BAD_REQUEST", "VALIDATION_ERROR")


# --- unpaired surrogates ------------------------------------------------------------------------------

SURROGATE_FIELDS = {
    "tags": {"tags": ["k=\udfff"]},
    "tags (object)": {"tags": {"k": "\ud800"}},
    "cluster": {"cluster": "\ud800"},
    "window": {"window": "nvtx:\ud800"},
    "job": {"job": "j\udfff"},
    "git_sha": {"git_sha": "\ud800"},
    "source": {"source": "\udfff"},
    "thresholds": {"thresholds": ["GPU001.min_gap_us\ud800=1"]},
    "a key": {"job": "j", "\udfff": 1},
}


@pytest.mark.parametrize("body", list(SURROGATE_FIELDS.values()), ids=list(SURROGATE_FIELDS))
def test_json_text_with_an_unpaired_surrogate_is_400_and_nothing_is_stored(app, db, people, body):
    client = app.test_client()
    before = row_counts(db)
    # json.dumps writes the surrogate as a \\uXXXX escape, as an attacker's client would.
    resp = client.post("/api/v1/runs", headers={**people["alice"]["h"], "Content-Type": "application/json"},
                       data=json.dumps(body))
    assert resp.status_code == 400, resp.get_data(as_text=True)
    assert resp.json["error"]["code"] == "VALIDATION_ERROR" and "surrogate" in resp.json["error"]["message"]
    assert row_counts(db) == before


def test_reanalysis_window_with_a_surrogate_is_400(app, people):
    client = app.test_client()
    h = people["alice"]["h"]
    run_id = client.post("/api/v1/runs", headers=h, json={"job": "j"}).json["id"]
    resp = client.post(f"/api/v1/runs/{run_id}/analysis", headers={**h, "Content-Type": "application/json"},
                       data=json.dumps({"window": "nvtx:\ud800"}))
    assert resp.status_code == 400 and "surrogate" in resp.json["error"]["message"]


BAD_UTF8 = "\udced\udca0\udc80".encode("utf-8", "surrogateescape")  # a surrogate's UTF-8 form, not valid UTF-8


def test_form_and_query_text_that_is_not_utf8_never_breaks_a_page(app, db, people):
    client = app.test_client()
    h = people["alice"]["h"]
    # Multipart fields: Werkzeug decodes them with replacement characters; stored, they stay encodable.
    body = b"".join(
        b'--b\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n' % (name, value)
        for name, value in ((b"job", b"j"), (b"cluster", b"c" + BAD_UTF8), (b"tag", b"k=" + BAD_UTF8))) + b"--b--\r\n"
    resp = client.post("/api/v1/runs", headers={**h, "Content-Type": "multipart/form-data; boundary=b"}, data=body)
    assert resp.status_code in (202, 400), resp.get_data(as_text=True)
    # Query strings: percent-encoded surrogates.
    for query in ("tag=k%3D%ED%A0%80", "job=%ED%BF%BF", "submitter=%ED%A0%80"):
        assert client.get(f"/api/v1/runs?{query}", headers=h).status_code in (200, 400), query
    # A valid run with text outside the BMP (a proper surrogate pair in JSON), then every page that shows it.
    run_id = client.post("/api/v1/runs", headers=h, json={"job": "j", "tags": ["k=\U0001f600"],
                                                          "cluster": "c\U0001f600"}).json["id"]
    browser = app.test_client()
    assert sign_in(browser, "alice").status_code == 302
    for path in ("/", f"/runs/{run_id}", "/api/v1/runs"):
        page = browser.get(path)
        assert page.status_code == 200, (path, page.status_code)
        page.get_data(as_text=True).encode("utf-8")
    assert "\U0001f600" in browser.get(f"/runs/{run_id}").get_data(as_text=True)
