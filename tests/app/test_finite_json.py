"""No NaN or Infinity in the service's JSON: non-finite floats planted in a run's findings are stored as null in
the JSON columns (PostgreSQL's JSONB refuses NaN; on SQLite it would be invalid JSON) and answered as null by
the API, whose bodies a strict JSON parser reads."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest
import sqlalchemy as sa

from app import finite_json
from app.models import Finding


def strict(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity, as JSON itself does."""
    def refuse(name: str):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_planted_non_finite_numbers_are_stored_and_answered_as_null(client, auth, session):
    run_id = client.post("/api/v1/runs", headers=auth["write"], json={"job": "nan"}).json["id"]
    session.add(Finding(run_id=run_id, rule_id="MEM005", severity="info", title="t", message="m", impact_ns=1,
                        impact_pct=math.inf, extra={"ratio": math.nan, "nested": [math.inf, 1.5, {"d": -math.inf}]},
                        evidence=[{"bytes_per_s": math.inf, "n": 3}]))
    session.commit()  # PostgreSQL refused the planted NaN before: "invalid input syntax for type json"
    stored = session.execute(sa.text("SELECT CAST(extra AS TEXT), CAST(evidence AS TEXT) FROM findings")).one()
    for text in stored:
        assert strict(text) is not None and "NaN" not in text and "Infinity" not in text, text
    r = client.get(f"/api/v1/runs/{run_id}/findings", headers=auth["read"])
    assert r.status_code == 200
    body = r.get_data(as_text=True)
    assert "NaN" not in body and "Infinity" not in body, body
    item = strict(body)["items"][0]
    assert item["impact_pct"] is None
    assert item["extra"]["ratio"] is None and item["extra"]["nested"] == [None, 1.5, {"d": None}]
    assert item["evidence"] == [{"bytes_per_s": None, "n": 3}]


def test_jsonify_writes_non_finite_floats_as_null(app):
    @dataclass
    class Point:
        x: float

    with app.test_request_context():
        from flask import jsonify

        out = jsonify({"a": math.nan, "b": [math.inf, -math.inf, 0.5], "c": Point(math.nan), "d": Point(2.0)})
    assert strict(out.get_data(as_text=True)) == {"a": None, "b": [None, None, 0.5], "c": {"x": None}, "d": {"x": 2.0}}
    assert finite_json.dumps({"k": [1, 2.5, "NaN"]}) == json.dumps({"k": [1, 2.5, "NaN"]})  # finite: as is
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        finite_json.dumps(loop)
