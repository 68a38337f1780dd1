"""The API and the pages read a run, a job's history and a comparison from the same typed objects (SQLite
and PostgreSQL): ``GET /api/v1/runs/{id}`` is the run page's ``RunDetail`` serialized, the job history and
the job page take goodput and step time from one query, and the API's comparison is the compare page's."""

from __future__ import annotations

import html as html_lib
import re
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from app.models import Report, Run, RunSummary, utcnow
from app.services.accounts import tokens
from app.services.pages.compare import compare_runs
from app.services.pages.web_jobs import job_trends
from app.services.reads import run_repo
from app.web.filters import fmt_ns, fmt_pct
from tests.conftest import corpus_file
from tests.dbs import BACKENDS
from tests.web import seed

NCCL_R0, NCCL_R1 = "nccl-ring-2node-r0-ault43.sqlite", "nccl-ring-2node-r1-ault44.sqlite"
TORCH = "torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite"
CUPY = "cupy-power-iteration.sqlite"
T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _reader(db) -> dict[str, str]:
    return {"Authorization": f"Bearer {tokens.create_token(db, 'views', 'read').token}"}


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_the_api_and_the_run_page_render_one_run_detail(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="views",
                            git_sha="abc1234")
    run = db.get(Run, run_id)
    run.rule_statuses = [*run.rule_statuses, {"id": "GPU001", "status": "error", "findings": 0, "reason": "boom"}]
    db.commit()
    body = client.get(f"/api/v1/runs/{run_id}", headers=_reader(db)).get_json()
    detail = run_repo.run_detail(db, run_id)
    assert body == detail.to_api()
    # The headline is the per-run summary row, straight from SQL.
    span, goodput, comm, idle = db.execute(
        sa.select(RunSummary.span_ns, RunSummary.goodput_pct, RunSummary.comm_exposed_ns, RunSummary.idle_ns)
        .where(RunSummary.run_id == run_id, RunSummary.report_id.is_(None))).one()
    assert body["goodput_pct"] == goodput and detail.headline.span_ns == span
    assert body["rule_errors"] == [{"id": "GPU001", "reason": "boom"}]
    assert [r["id"] for r in body["reports"]] == sorted(db.scalars(sa.select(Report.id).where(Report.run_id == run_id)))
    page = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert f'<div class="v" id="kpi-gpu-time">{fmt_ns(span)}</div>' in page
    assert f'<div class="v" id="kpi-goodput">{fmt_pct(goodput)}</div>' in page
    assert f'<div class="v">{fmt_ns(comm)}</div>' in page and f'<div class="v">{fmt_ns(idle)}</div>' in page
    assert "rule <code>GPU001</code> failed: boom" in page
    # The reports table: one row per report with the export's host and GPUs, in rank order.
    rows = re.findall(r'<tr data-report-id="(\d+)">\s*<td class="name">[^<]*</td><td>nsys</td><td>(\d+)</td>\s*'
                      r'<td>([^<]*)</td>.*?<td>([^<]*)</td>\s*<td class="num">', page, re.S)
    reports = sorted(db.scalars(sa.select(Report).where(Report.run_id == run_id)), key=lambda r: (r.rank, r.id))
    assert [(int(i), int(rank), host) for i, rank, host, _ in rows] == [(r.id, r.rank, r.host) for r in reports]
    assert all(gpus for *_, gpus in rows)   # the export's GPUs, by name
    # Deleted: gone for both.
    run.deleted_at = utcnow()
    db.commit()
    assert client.get(f"/api/v1/runs/{run_id}", headers=_reader(db)).status_code == 404
    assert client.get(f"/runs/{run_id}").status_code == 404


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_job_history_and_the_job_page_read_one_query(client, db, settings, ingested) -> None:
    ids = [seed.store_run(db, settings, ingested, [corpus_file(src)], job="hist", created_at=T0 + timedelta(days=i),
                          tags={"branch": "main" if i != 1 else "dev"})
           for i, src in enumerate((TORCH, CUPY, TORCH))]
    gone = seed.store_run(db, settings, ingested, [corpus_file(CUPY)], job="hist", created_at=T0 + timedelta(days=5))
    db.get(Run, gone).deleted_at = utcnow()
    db.commit()
    api = client.get("/api/v1/jobs/hist/history", headers=_reader(db)).get_json()["items"]
    trends = job_trends(db, "hist")
    assert [p["run_id"] for p in api] == [p.run_id for p in trends.points] == ids   # oldest first, deleted gone
    stored = dict(db.execute(sa.select(RunSummary.run_id, RunSummary.goodput_pct)
                             .where(RunSummary.run_id.in_(ids), RunSummary.report_id.is_(None))).all())
    assert [p["goodput_pct"] for p in api] == [p.goodput_pct for p in trends.points] == [stored[i] for i in ids]
    # The step time of the trends is the comparison's (the run page's) step time.
    diff = compare_runs(db, settings, ids[0], ids[1]).to_api()
    assert trends.per_iteration
    assert [p.gpu_time_per_iter_ns for p in trends.points[:2]] == [diff["step_time_ns"]["base"],
                                                                   diff["step_time_ns"]["head"]]
    assert [p.run_id for p in job_trends(db, "hist", "branch=main").points] == [ids[0], ids[2]]
    assert client.get("/api/v1/jobs/hist/history?limit=2", headers=_reader(db)).get_json()["items"] == api[1:]


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_the_api_and_the_compare_page_show_one_comparison(client, db, settings, ingested) -> None:
    base = seed.store_run(db, settings, ingested, [corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="cmp",
                          created_at=T0)
    head = seed.store_run(db, settings, ingested, [corpus_file(NCCL_R0)], job="cmp", created_at=T0 + timedelta(days=1))
    c = compare_runs(db, settings, base, head)
    api = client.get(f"/api/v1/compare?base={base}&head={head}", headers=_reader(db)).get_json()
    assert api == c.to_api()
    page = client.get(f"/compare?a={base}&b={head}").get_data(as_text=True)
    # The totals table: the comparison's breakdown (the per-run summaries), goodput as a difference in points.
    for key in ("span_ns", "goodput_pct", "comm_exposed_ns", "idle_ns"):
        k = api["breakdown"][key]
        row = re.search(rf'id="kpi-deltas".*?<tr data-key="{key}" data-base="([^"]*)" data-head="([^"]*)"', page, re.S)
        assert row and (float(row[1]), float(row[2])) == (k["base"], k["head"]), key
    assert [html_lib.unescape(w) for w in re.findall(r'<div class="flash error compare-warning">([^<]*)</div>', page)] \
        == c.warnings == ["The runs have different numbers of nsys reports (2 and 1): totals add up different ranks."]
    assert [r.rank for r in c.ranks] == ["rank 0", "rank 1"] and all(k.head is None for k in c.ranks[1].kpis)
