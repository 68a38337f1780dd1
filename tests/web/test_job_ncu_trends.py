"""The job page's ncu kernel trends: per profiled kernel, its duration, SM and memory throughput
and achieved occupancy over the job's runs, each point the mean over that run's profiled launches, checked
against direct queries on the ingested ncu reports; runs without ncu have no point."""

from __future__ import annotations

import json
from html import unescape

import duckdb
import sqlalchemy as sa

from app.models import Report
from app.services.jobs import pipeline
from tests.conftest import corpus_file
from tests.web import seed

NUMBA = "numba-copy-blocked-full.csv"          # ncu display names ("Compute (SM) Throughput", ...)
SGEMM = "pytorch-sgemm-small.csv"               # raw metric names (sm__throughput..., no occupancy)


def _expected(settings, db, run_id: int) -> dict[str, dict[str, float | None]]:
    """kernel -> KPI -> mean over launches, straight from the report's tables."""
    [report] = db.scalars(sa.select(Report).where(Report.run_id == run_id, Report.kind == "ncu"))
    con = duckdb.connect(str(pipeline.data_path(settings, report.trace_path)), read_only=True)
    try:
        out = {}
        for (name,) in con.execute("SELECT DISTINCT name FROM ncu_kernels").fetchall():
            def mean(where: str, name=name) -> float | None:
                return con.execute(f"""SELECT avg(m.value) FROM ncu_metrics m JOIN ncu_kernels k USING (kernel_id)
                                        WHERE k.name = ? AND ({where})""", [name]).fetchone()[0]  # noqa: S608
            out[name] = {
                "duration": con.execute("SELECT avg(duration_ns) FROM ncu_kernels WHERE name = ?", [name]).fetchone()[0],
                "sm_pct": mean("m.metric = 'sm__throughput.avg.pct_of_peak_sustained_elapsed' OR (m.section = "
                               "'GPU Speed Of Light Throughput' AND m.metric = 'Compute (SM) Throughput')"),
                "mem_pct": mean("m.metric = 'gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed' OR "
                                "(m.section = 'GPU Speed Of Light Throughput' AND m.metric = 'Memory Throughput')"),
                "occupancy_pct": mean("m.metric = 'sm__warps_active.avg.pct_of_peak_sustained_active' OR "
                                      "(m.section = 'Occupancy' AND m.metric = 'Achieved Occupancy')"),
            }
        return out
    finally:
        con.close()


def test_job_page_draws_ncu_kpis_per_kernel_over_the_runs(client, db, settings, ingested) -> None:
    runs = [seed.store_run(db, settings, ingested, [corpus_file(NUMBA)], job="ncu-trend", git_sha="aaaa111"),
            seed.store_run(db, settings, ingested, [corpus_file(NUMBA)], job="ncu-trend", git_sha="bbbb222"),
            seed.store_run(db, settings, ingested, [corpus_file(SGEMM)], job="ncu-trend", git_sha="cccc333"),
            seed.store_run(db, settings, ingested, [corpus_file("vecadd-2026.sqlite")], job="ncu-trend")]
    expected = {run_id: _expected(settings, db, run_id) for run_id in runs[:3]}
    html = client.get("/jobs/ncu-trend").get_data(as_text=True)
    start = html.index('data-ncu="') + len('data-ncu="')
    ncu = json.loads(unescape(html[start:html.index('"', start)]))
    names = [k["name"] for k in ncu["kernels"]]
    assert sorted(names) == sorted({n for e in expected.values() for n in e})
    numba = next(iter(expected[runs[0]]))
    assert expected[runs[0]][numba]["sm_pct"] == 1.3 and expected[runs[0]][numba]["occupancy_pct"] == 96.26
    for k in ncu["kernels"]:
        for kpi in ("duration", "sm_pct", "mem_pct", "occupancy_pct"):
            want = [expected.get(r, {}).get(k["name"], {}).get(kpi) for r in runs]
            if all(w is None for w in want):
                assert kpi not in k["series"]     # an empty chart is not drawn
                continue
            got = [p["value"] for p in k["series"][kpi]["points"]]
            assert len(got) == len(want) and all((g is None and w is None) or abs(g - w) < 1e-9 * max(1, abs(w))
                                                 for g, w in zip(got, want, strict=True)), (k["name"], kpi, got, want)
            assert [p["sha"] for p in k["series"][kpi]["points"]][:3] == ["aaaa111", "bbbb222", "cccc333"]
    # ordered by profiled time over the job's runs, longest first
    totals = {n: sum((expected[r].get(n) or {}).get("duration") or 0 for r in runs[:3]) for n in names}
    assert names == sorted(names, key=lambda n: -totals[n])
    assert 'id="ncu-kernel"' in html and html.count('<option value="', html.index('id="ncu-kernel"')) >= len(names)
    # a job without ncu reports has no ncu section
    seed.store_run(db, settings, ingested, [corpus_file("vecadd-2026.sqlite")], job="nsys-only")
    assert 'id="ncu-trends"' not in client.get("/jobs/nsys-only").get_data(as_text=True)
