"""The runs page's filters at their edges, on SQLite and PostgreSQL: the first and last days a date can name
and out-of-range page numbers list runs (or none), never a 500."""

from __future__ import annotations

import pytest

from app.models import Job, Run

EDGES = [{"to": "9999-12-31"}, {"from": "9999-12-31"}, {"from": "0001-01-01", "to": "9999-12-31"},
         {"from": "0001-01-01"}, {"to": "0001-01-01"}, {"page": str(2**63)}, {"page": "9" * 400},
         {"page": "-1"}, {"page_size": str(2**64)}]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
def test_runs_page_filters_at_their_edges(client, db) -> None:
    db.add(Run(job=Job(name="edge"), tags={}, submitter="x", source="web", status="ready"))
    db.commit()
    for args in EDGES:
        resp = client.get("/", query_string=args)
        assert resp.status_code == 200, (args, resp.status_code)
        shown = 'data-run-id="' in resp.get_data(as_text=True)
        # Every run lies between the first and the last day; none after the last or before the first.
        expect = not (args.get("from") == "9999-12-31" or args.get("to") == "0001-01-01"
                      or args.get("page") in (str(2**63), "9" * 400))
        assert shown == expect, (args, shown)
