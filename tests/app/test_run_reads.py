"""One read path for runs: the same filter through the API and through the UI's runs list gives the same runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

import pytest
import sqlalchemy as sa
from werkzeug.datastructures import MultiDict

from app.models import Job, Run
from app.services.pages import web_runs

BASE = datetime(2026, 1, 1, tzinfo=UTC)
SEED = (  # name, job, tags, token scope (the submitter is the token's name)
    ("a", "llama", ["team=x", "gpus=8"], "write"),
    ("b", "llama", ["team=y", "note=two words"], "write"),
    ("c", "bert", ["team=x"], "admin"),
    ("d", "bert", [], "admin"),
    ("gone", "llama", ["team=x"], "write"),  # deleted: neither list may show it
)


def _runs(session) -> list[tuple[Run, str]]:
    return [(r, job) for r, job in session.execute(sa.select(Run, Job.name).join(Job, Job.id == Run.job_id))]


# (the UI's query string, the API's query string, which stored runs the filter means)
CASES = [
    ({"tag": "team=x"}, {"tag": "team=x"}, lambda r, job: r.tags.get("team") == "x"),
    # Uploads store tag values stripped; a filter typed with blanks around the value means the same tag.
    ({"tag": "team= x "}, {"tag": "team= x "}, lambda r, job: r.tags.get("team") == "x"),
    ({"tag": "note=two words"}, {"tag": "note=two words"}, lambda r, job: r.tags.get("note") == "two words"),
    ({"tag": "team=z"}, {"tag": "team=z"}, lambda r, job: False),
    ({"job": "llama"}, {"job": "llama"}, lambda r, job: job == "llama"),
    ({"submitter": "t-admin"}, {"submitter": "t-admin"}, lambda r, job: r.submitter == "t-admin"),
    ({"status": "queued"}, {"status": "queued"}, lambda r, job: r.status == "queued"),
    ({"from": "2026-01-02", "to": "2026-01-03"},
     {"created_after": "2026-01-02T00:00:00Z", "created_before": "2026-01-04T00:00:00Z"},
     lambda r, job: BASE + timedelta(days=1) <= r.created_at < BASE + timedelta(days=3)),
    ({"job": "bert", "tag": "team=x"}, {"job": "bert", "tag": "team=x"},
     lambda r, job: job == "bert" and r.tags.get("team") == "x"),
]


@pytest.mark.parametrize("ui_args, api_args, means", CASES,
                         ids=[urlencode(c[1]) for c in CASES])
def test_the_api_and_the_ui_list_the_same_runs_for_the_same_filter(client, auth, session, ui_args, api_args,
                                                                   means):
    ids = {}
    for name, job, tags, scope in SEED:
        r = client.post("/api/v1/runs", headers=auth[scope], json={"job": job, "tags": tags})
        assert r.status_code == 202, r.json
        ids[name] = r.json["id"]
    for i, name in enumerate(ids):
        session.execute(sa.update(Run).where(Run.id == ids[name]).values(created_at=BASE + timedelta(days=i)))
    session.commit()
    assert client.delete(f"/api/v1/runs/{ids['gone']}", headers=auth["write"]).status_code == 202
    session.expire_all()
    expected = {r.id for r, job in _runs(session) if r.deleted_at is None and means(r, job)}

    api = client.get(f"/api/v1/runs?{urlencode(api_args)}&page_size=200", headers=auth["read"])
    assert api.status_code == 200, api.json
    ui = web_runs.list_runs(session, web_runs.RunFilters.parse(MultiDict({**ui_args, "page_size": "100"})))

    assert {x["id"] for x in api.json["items"]} == expected
    assert {x.id for x in ui.items} == expected
    assert api.json["total"] == ui.total == len(expected)


def test_the_api_and_the_ui_read_the_same_headline_numbers_from_one_row(client, auth, session):
    """Both lists read a run's headline from its per-run summary (the sums over its reports), and goodput is
    the one formula: compute over span, in percent to three decimals."""
    from app.models import RunSummary
    from app.services.reads.run_repo import goodput_pct

    spans = {"a": (3_000_000_007, 2_000_000_003, 55_000), "b": (1_000, 999, 0), "c": None}
    ids = {}
    for name, numbers in spans.items():
        ids[name] = client.post("/api/v1/runs", headers=auth["write"], json={"job": "head"}).json["id"]
        if numbers is not None:
            span, compute, comm = numbers
            session.add(RunSummary(run_id=ids[name], report_id=None, span_ns=span, compute_ns=compute,
                                   comm_exposed_ns=comm, goodput_pct=goodput_pct(compute, span), data={}))
    session.commit()
    assert goodput_pct(2_000_000_003, 3_000_000_007) == round(100.0 * 2_000_000_003 / 3_000_000_007, 3) == 66.667
    assert goodput_pct(5, 0) is None and goodput_pct(None, 10) is None

    api = {x["id"]: x for x in client.get("/api/v1/runs?job=head", headers=auth["read"]).json["items"]}
    ui = web_runs.list_runs(session, web_runs.RunFilters.parse(MultiDict({"job": "head", "sort": "goodput"})))
    assert [r.id for r in ui.items] == [ids["b"], ids["a"], ids["c"]]  # highest first, no number last
    for row in ui.items:
        assert row.goodput_pct == api[row.id]["goodput_pct"]
    by_id = {r.id: r for r in ui.items}
    assert (by_id[ids["a"]].gpu_time_ns, by_id[ids["a"]].exposed_comm_ns) == (3_000_000_007, 55_000)
    assert by_id[ids["c"]].goodput_pct is None and api[ids["c"]]["goodput_pct"] is None


def test_the_live_run_condition_and_the_goodput_formula_are_written_once():
    """Which runs readers see and what goodput is are each defined in one place of the service."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "app"
    sources = {p.relative_to(root.parent).as_posix(): p.read_text() for p in root.rglob("*.py")}
    live = [p for p, text in sources.items() if re.search(r"deleted_at\s*\.\s*is_\(\s*None\s*\)", text)]
    assert live == ["app/services/reads/run_query.py"]
    formula = [p for p, text in sources.items() if re.search(r"100(\.0)?\s*\*\s*[\w.\[\]\"']*compute", text)]
    assert formula == ["app/services/reads/run_repo.py"]
