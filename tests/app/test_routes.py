"""The route table is the one place a view's query parameters are declared: each view accepts exactly what
its row passes (path parameters and the declared query parameters), and nothing else parses the query."""

from __future__ import annotations

import inspect
import re

import pytest

from app.api import views
from app.api.routes import ROUTES


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_each_view_takes_its_path_and_declared_query_parameters(route):
    path = re.findall(r"<(?:\w+:)?(\w+)>", route.path)
    signature = inspect.signature(route.view)
    signature.bind(**dict.fromkeys(path + list(route.params)))  # raises TypeError on a mismatch
    named = [p.name for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    assert set(named) <= set(path) | set(route.params), f"{route.endpoint} takes parameters its row lacks"


def test_views_do_not_parse_the_query_themselves():
    assert "parse_query" not in inspect.getsource(views)


def test_a_declared_parameter_reaches_the_view_validated(client, auth):
    # page_size is declared for GET /runs: out of range it is a 400 before the view runs; no credentials
    # is a 401 first (the scope check wraps the parsing).
    assert client.get("/api/v1/runs?page_size=0").status_code == 401
    r = client.get("/api/v1/runs?page_size=0", headers=auth["read"])
    assert (r.status_code, r.json["error"]["details"]) == (400, {"parameter": "page_size"})
    assert client.get("/api/v1/runs?page_size=2", headers=auth["read"]).json["page_size"] == 2
