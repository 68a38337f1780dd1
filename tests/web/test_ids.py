"""Every id in a URL (API and pages, SQLite and PostgreSQL) goes through the one id guard: an id that names
no row, including one beyond what the column (or the driver) can hold, is a 404, never a 500."""

from __future__ import annotations

import re

import pytest
from werkzeug.routing import IntegerConverter

from app.ids import MAX_ID, IdConverter
from app.services.accounts import tokens
from tests.dbs import BACKENDS
from tests.web.conftest import page_csrf

_ARG = re.compile(r"<(?:(\w+)(?:\([^)]*\))?:)?(\w+)>")
# Beyond int4 (PostgreSQL's INTEGER), beyond int8 (SQLite's and the drivers' 64 bits), and far beyond.
OUT_OF_RANGE = (MAX_ID + 1, 2**63 - 1, 2**63, 99999999999999999999)
# Unknown but in range: the views reach the database with it, which must answer "no such row".
UNKNOWN = (MAX_ID, 424242)


def _id_rules(app):
    rules = [r for r in app.url_map.iter_rules() if any(n.endswith("_id") for n in r.arguments)]
    assert len(rules) >= 20, "the route table lost its id routes?"
    return rules


def _requests(app, value: int):
    """(method, url) of every id-taking route with every id set to ``value``."""
    for rule in _id_rules(app):
        path = _ARG.sub(lambda m: str(value) if m.group(2).endswith("_id") else
                        {"fmt": "json"}.get(m.group(2), "x.sqlite"), rule.rule)
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            yield method, path


def test_every_integer_path_parameter_is_an_id_through_the_guard(app):
    for rule in app.url_map.iter_rules():
        for name, converter in rule._converters.items():
            if name.endswith("_id"):
                assert isinstance(converter, IdConverter), f"{rule.rule}: {name} skips the id guard"
            assert not isinstance(converter, IntegerConverter) or isinstance(converter, IdConverter), (
                f"{rule.rule}: {name} is an integer outside the id guard")


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("value", OUT_OF_RANGE + UNKNOWN)
def test_unknown_and_out_of_range_ids_are_404_on_every_route(app, client, db, value):
    admin = {"Authorization": f"Bearer {tokens.create_token(db, 'ids', 'admin').token}"}
    csrf = page_csrf(client)
    seen = 0
    for method, path in _requests(app, value):
        if path.startswith("/api/"):
            body = {"json": {"window": "all"}} if method == "POST" else {
                "data": b"x", "content_type": "application/octet-stream"}
            r = client.open(path, method=method, headers=admin, **body)
        else:
            # The query a page's script sends (ignored by the other routes).
            r = client.open(path, method=method, data={"csrf_token": csrf, "window": "all"},
                            query_string={"report_id": value, "t_ns": 0} if method == "GET" else None,
                            headers={"Accept": "application/json"} if path.endswith(".json") else {})
        assert r.status_code == 404, (method, path, r.status_code, r.get_data(as_text=True)[:300])
        seen += 1
    assert seen >= 21
    # Ids in the query: the compare page looks both runs up through the same guard.
    for query in (f"a=1&b={value}", f"a={value}&b=1"):
        assert client.get(f"/compare?{query}").status_code == 404, query
