"""Property-based: every threshold, the window grammar, ids, time and date parameters driven with extreme values
(0, negatives, +-1e308, 5e-324, NaN, infinities, 2^63, 10,000 digits, surrogates, control characters, wrong
types) through the API (JSON and multipart form), the web's timeline routes and the CLI, on SQLite and
PostgreSQL. Each answer is a clear error (400 naming the field, exit status 2 with one line) or a valid
result: never a 5xx, a traceback, a failed analysis or a rule in error."""

from __future__ import annotations

import json
import math
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.api import threshold_keys
from tests.analysis.planting import ingested
from tests.conftest import corpus_file

pytestmark = pytest.mark.timeout(600)


class Raw(str):
    """Text put in a JSON body as it is: numbers Python's json would not write (10,000 digits, 1e400)."""


EXTREMES: list[object] = [
    0, -1, 1, 1.5, 1e308, -1e308, 5e-324, -5e-324, math.nan, math.inf, -math.inf, 2**63, -(2**63), 2**63 - 1,
    2**31, Raw("9" * 10_000), Raw("1e400"), Raw("-1e400"), "9" * 10_000, "1e400", "nan", "inf", "\ud800", "\udfff",
    "\x00", "a\x01b", "\x85", "", " ", True, False, None, [], {}, "abc", "0x10", "1e308", "5e-324",
]
extreme = st.one_of(st.sampled_from(EXTREMES), st.integers(min_value=-(2**70), max_value=2**70), st.floats(),
                    st.text(max_size=20))
KEYS = [*threshold_keys(), "GPU999.x", "GPU001.nope", "nodot", ""]
number_text = st.one_of(st.sampled_from(["0", "1", "9" * 400, "9" * 25, "1e400", "9223372036854775808", "-5",
                                         "1.5", "nan", "inf", "\ud800", "\x00", ""]),
                        st.integers(min_value=0, max_value=2**70).map(str))
unit = st.sampled_from(["", "ns", "us", "ms", "s", "h", "\x00"])
window = st.one_of(
    st.sampled_from(["steady", "all", "startup", "nvtx:x", "nvtx:\ud800", "nvtx:a\x00b", "nvtx:\x7f",
                     "time:0-" + "9" * 400, "time:0-1e400", "iterations:0-" + "9" * 30, "nvtx:" + "n" * 300]),
    st.builds(lambda a, ua, b, ub: f"time:{a}{ua}-{b}{ub}", number_text, unit, number_text, unit),
    st.builds(lambda a, b: f"iterations:{a}-{b}", number_text, number_text),
    st.text(max_size=40))
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


def _json(value: object) -> str:
    if isinstance(value, Raw):
        return str(value)
    return json.dumps(value)  # NaN and infinities as Python writes them: a client may send those too


def _post_json(client, path: str, headers: dict, body: str):
    return client.post(path, headers={**headers, "Content-Type": "application/json"}, data=body.encode(
        "utf-8", "surrogatepass"))


def _clear(resp, *allowed: int) -> None:
    """A status from ``allowed``; a 400 says which field in the one error shape."""
    assert resp.status_code in allowed, (resp.status_code, resp.get_data(as_text=True)[:300])
    if resp.status_code == 400:
        error = resp.json["error"]
        assert error["code"] in ("VALIDATION_ERROR", "BAD_REQUEST") and error["message"]


def test_thresholds_and_windows_through_the_api(app, people):
    client = app.test_client()
    h = people["alice"]["h"]
    run_id = client.post("/api/v1/runs", headers=h, json={"job": "j", "window": "all"}).json["id"]

    @given(key=st.sampled_from(KEYS), value=extreme, spec=window)
    @SETTINGS
    def check(key, value, spec):
        body = '{"job": "j", "thresholds": {' + _json(key) + ": " + _json(value) + "}}"
        _clear(_post_json(client, "/api/v1/runs", h, body), 202, 400)
        text = value if isinstance(value, str) else _json(value)
        _clear(_post_json(client, "/api/v1/runs", h, json.dumps({"job": "j", "thresholds": [f"{key}={text}"]})),
               202, 400)
        _clear(_post_json(client, "/api/v1/runs", h, json.dumps({"job": "j", "window": spec})), 202, 400)
        _clear(_post_json(client, f"/api/v1/runs/{run_id}/analysis", h, json.dumps({"window": spec})), 202, 400)
        _clear(_post_json(client, "/api/v1/runs", h, '{"job": "j", "window": ' + _json(value) + "}"), 202, 400)

    check()


def test_form_fields_through_the_multipart_api(app, people):
    client = app.test_client()
    h = people["alice"]["h"]

    @given(key=st.sampled_from(KEYS), value=extreme, spec=window, text=extreme)
    @SETTINGS
    def check(key, value, spec, text):
        fields = [("job", "j"), ("threshold", f"{key}={value}"), ("window", spec), ("tag", f"k={text}"),
                  ("cluster", str(text)), ("extra_field", "x")]
        body = b"".join(b'--b\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n'
                        % (name.encode(), str(v).encode("utf-8", "surrogatepass")) for name, v in fields) + b"--b--\r\n"
        _clear(client.post("/api/v1/runs", headers={**h, "Content-Type": "multipart/form-data; boundary=b"},
                           data=body), 202, 400)

    check()


def test_ids_times_and_dates(app, people):
    client = app.test_client()
    h = people["alice"]["h"]
    run_id = client.post("/api/v1/runs", headers=h, json={"job": "j"}).json["id"]

    @given(value=extreme)
    @SETTINGS
    def check(value):
        text = quote(str(value).encode("utf-8", "surrogatepass"), safe="")
        # Ids: never a 5xx (an id guard for every route answers the out-of-range ones 404).
        for path in (f"/api/v1/runs/{text}", f"/api/v1/runs/{text}/findings", f"/api/v1/runs/{text}/summary",
                     f"/api/v1/compare?base={text}&head={run_id}"):
            resp = client.get(path, headers=h)
            assert resp.status_code < 500, (path[:80], resp.status_code)
        for name in ("created_after", "created_before"):
            _clear(client.get(f"/api/v1/runs?{name}={text}", headers=h), 200, 400, 414)
        for name in ("page", "page_size"):
            _clear(client.get(f"/api/v1/runs?{name}={text}", headers=h), 200, 400, 414)

    check()


@given(stamp=st.datetimes(), offset=st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1))
@SETTINGS
def _dates(client, h, stamp, offset):
    sign = "+" if offset >= 0 else "-"
    text = f"{stamp.isoformat()}{sign}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}"
    for name in ("created_after", "created_before"):
        _clear(client.get("/api/v1/runs", headers=h, query_string={name: text}), 200, 400)


def test_every_date_with_every_offset(app, people):
    _dates(app.test_client(), people["alice"]["h"])


@pytest.fixture(scope="module")
def duckdb_file():
    return ingested(corpus_file("vecadd-2026.sqlite"))


def test_the_cli_answers_an_analysis_or_one_line(duckdb_file, capsys):
    from goodput_cli.main import main

    @given(key=st.sampled_from(KEYS), value=extreme, spec=window)
    @settings(max_examples=25, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def check(key, value, spec):
        text = value if isinstance(value, str) else _json(value)
        rc = main(["analyze", str(duckdb_file), "--threshold", f"{key}={text}", "--window", spec,
                   "--format", "json", "--quiet"])
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        if rc == 0:
            result = json.loads(out)  # valid JSON: no NaN or Infinity
            assert all(r["status"] != "error" for r in result["rules"]), result["rules"]
        else:
            assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, (rc, err)

    check()
