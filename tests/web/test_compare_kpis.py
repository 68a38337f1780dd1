"""The compare page and job trends show the comparison's numbers: the step time of the run page (each
report's median step in its window, the slowest report's), per-launch kernel rows with distinct labels and
full names on hover, and ``base``/``head`` accepted as the API names them."""

from __future__ import annotations

import html as html_lib
import re
from datetime import UTC, datetime, timedelta

import duckdb
import numpy as np
import sqlalchemy as sa

from app.models import Report
from app.services.jobs import pipeline
from app.services.pages import web_trends
from app.services.pages.compare import compare_runs
from app.services.pages.web_jobs import job_trends
from tests.conftest import corpus_file
from tests.web import seed

TORCH = "torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite"
CUPY = "cupy-power-iteration.sqlite"


def _median_step(settings, db, run_id: int) -> float:
    """The median length of the steps in the report's window, straight from its DuckDB file."""
    (report,) = db.scalars(sa.select(Report).where(Report.run_id == run_id))
    con = duckdb.connect(str(pipeline.data_path(settings, report.trace_path)), read_only=True)
    try:
        lengths = [r[0] for r in con.execute("SELECT end_ns - start_ns FROM iterations WHERE phase = 'steady'").fetchall()]
    finally:
        con.close()
    return float(np.median(lengths))


def test_compare_page_and_trends_show_the_comparisons_numbers(client, db, settings, ingested) -> None:
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    base = seed.store_run(db, settings, ingested, [corpus_file(TORCH)], job="kpis", created_at=t0)
    head = seed.store_run(db, settings, ingested, [corpus_file(CUPY)], job="kpis", created_at=t0 + timedelta(days=1))
    diff = compare_runs(db, settings, base, head).to_api()
    page = client.get(f"/compare?base={base}&head={head}")
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert text == client.get(f"/compare?a={base}&b={head}").get_data(as_text=True)
    # Step time: the run page's definition, the same in the comparison, on the page and in the trends.
    st = diff["kpis"]["step_time_median_ns"]
    assert st["base"] == _median_step(settings, db, base) and st["head"] == _median_step(settings, db, head)
    assert f'data-key="step_time_median_ns" data-base="{st["base"]}" data-head="{st["head"]}"' in text
    assert 'id="step-stats"' in text
    trends = job_trends(db, "kpis")
    assert trends.per_iteration
    assert [p.gpu_time_per_iter_ns for p in trends.points] == [st["base"], st["head"]]
    metrics = web_trends.metrics(db, trends, lambda run_id: f"/runs/{run_id}")
    for key in ("idle_ns", "memory_only_ns"):
        assert [pt["value"] for pt in metrics[f"kpi:{key}"]["points"]] == [diff["kpis"][key]["base"], diff["kpis"][key]["head"]]
    # Kernel rows: one per kernel, labels distinct, the full (escaped) name on hover.
    rows = re.findall(r'<tr data-status="[a-z]+" data-median-base="[^"]*" data-median-head="[^"]*">'
                      r'<td class="name" title="([^"]*)">([^<]*)</td>', text.split('id="kernel-table"')[1])
    assert len(rows) == len(diff["kernel_table"]) > 1
    assert len({label for _, label in rows}) == len(rows)
    assert [html_lib.unescape(title) for title, _ in rows] == [r["name"] for r in diff["kernel_table"]]
    assert all("<" not in title for title, _ in rows)
    # Different kernels on each side: what B launches is new, what A launched is gone.
    assert {r["status"] for r in diff["kernels"]} <= {"new", "gone"} and diff["kernels"]
