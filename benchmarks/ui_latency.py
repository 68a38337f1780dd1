"""UI latency benchmark: the run page of a 10M-kernel report and the runs list with 1,000 runs.

Builds, under ``--workdir``:

* a normalized report with ``--kernels`` kernels, by ingesting a real corpus export and replicating its
  GPU activity and CUDA API rows inside DuckDB (each copy shifted by one session span, correlation ids
  shifted past the original's), then analyzed with ``analysis.api.analyze`` and stored with the
  pipeline functions the workers use;
* ``--runs`` further runs spread over 20 jobs, each with per-report and per-run summaries and findings
  copied from a real analysis of a corpus export (the list reads only these rows).

Then times requests through Flask's test client (server time, no network): the run page, the timeline
window JSON (whole report and a zoomed window), the kernel/NVTX tables JSON, and the runs list (default
page, a job filter, a sort by goodput), and writes ``benchmarks/RESULTS-ui.md``.

    .venv/bin/python benchmarks/ui_latency.py                      # 10M kernels, 1,000 runs
    .venv/bin/python benchmarks/ui_latency.py --kernels 200000 --runs 200 --no-results   # quick check
"""

from __future__ import annotations

import argparse
import math
import platform
import re
import shutil
import statistics
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.api import analyze, ingest  # noqa: E402
from app import create_app  # noqa: E402
from app.db import upgrade  # noqa: E402
from app.models import Job, Report, Run, RunSummary  # noqa: E402
from app.services.accounts.users import create_user  # noqa: E402
from app.services.jobs import pipeline, results  # noqa: E402
from app.settings import Settings  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus" / "nsys"
BASE = CORPUS / "hpcgroup__pipit__cloverleaf-devsync.sqlite"
SMALL = CORPUS / "ZhiyiHu1999__DistributedSysLab_FS24__nccl-ring-2node-r0-ault43.sqlite"
RESULTS = ROOT / "benchmarks" / "RESULTS-ui.md"
REPLICATED = ("kernels", "memcpy", "memset", "sync", "cuda_api")


def replicate(base: Path, out: Path, kernels: int) -> dict[str, int]:
    """Copy ``base`` (a normalized DuckDB) to ``out`` with its activity repeated to ``kernels`` kernels."""
    shutil.copyfile(base, out)
    con = duckdb.connect(str(out), config={"memory_limit": "2GB", "threads": 2})  # a shared machine
    try:
        n = con.execute("SELECT count(*) FROM kernels").fetchone()[0]
        copies = math.ceil(kernels / n)
        lo, hi = con.execute("""SELECT min(s), max(e) FROM (
            SELECT min(start_ns) s, max(end_ns) e FROM kernels UNION ALL
            SELECT min(start_ns), max(end_ns) FROM cuda_api)""").fetchone()
        span = hi - lo + 1000
        stride = 1 + max(con.execute(f"SELECT coalesce(max(correlation_id), 0) FROM {t}").fetchone()[0]  # noqa: S608
                         for t in REPLICATED)
        for table in REPLICATED:
            cols = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()]
            exprs = [f"{c} + i * {span}" if c in ("start_ns", "end_ns") else
                     f"{c} + i * {stride}" if c == "correlation_id" else c for c in cols]
            con.execute(f"CREATE TEMP TABLE base_{table} AS SELECT * FROM {table}")  # noqa: S608
            con.execute(f"INSERT INTO {table} SELECT {', '.join(exprs)} FROM range(1, {copies}) r(i) "  # noqa: S608
                        f"CROSS JOIN base_{table}")
        con.execute("CHECKPOINT")
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in REPLICATED}  # noqa: S608
    finally:
        con.close()


def timed(client, path: str, n: int) -> dict[str, float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        resp = client.get(path)
        resp.get_data()
        times.append(time.perf_counter() - t0)
        assert resp.status_code == 200, (path, resp.status_code, resp.get_data(as_text=True)[:500])
    times.sort()
    return {"n": n, "p50_ms": 1000 * statistics.median(times),
            "p95_ms": 1000 * times[max(0, math.ceil(0.95 * n) - 1)], "max_ms": 1000 * times[-1],
            "bytes": len(resp.get_data())}


def seed_runs(session, small_result: Any, small_trace_rel: str, count: int) -> None:
    """``count`` runs over 20 jobs, each with the summaries and findings of a real analysis."""
    jobs = [Job(name=f"job-{j:02d}") for j in range(20)]
    session.add_all(jobs)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    report_data = small_result.reports[0].to_json()
    bd = report_data["breakdown"]
    for i in range(count):
        run = Run(job=jobs[i % 20], tags={"branch": "main" if i % 3 else "dev", "nodes": str(1 + i % 8)},
                  submitter=f"user{i % 7}", source="api", status="ready", analysis_status="ready",
                  git_sha=f"{i:040x}", created_at=start + timedelta(hours=i))
        session.add(run)
        session.flush()
        report = Report(run_id=run.id, name="rank0.sqlite", kind="nsys", sha256=f"{i:064x}", size_bytes=1,
                        status="ready", upload_path="uploads/x", trace_path=small_trace_rel, info=report_data)
        session.add(report)
        session.flush()
        scale = 1 + (i % 10) / 10
        session.add(RunSummary(run_id=run.id, report_id=report.id, data=report_data,
                               span_ns=int(bd["span_ns"] * scale), compute_ns=bd["compute_ns"],
                               comm_exposed_ns=bd["comm_exposed_ns"], memory_only_ns=bd["memory_only_ns"],
                               idle_ns=bd["idle_ns"], goodput_pct=bd["goodput_pct"],
                               finding_count=len(small_result.findings)))
        session.add(RunSummary(run_id=run.id, report_id=None, data={"reports": [report_data]},
                               finding_count=len(small_result.findings)))
        for pos, f in enumerate(small_result.findings):
            session.add(results._finding_row(run.id, report.id, pos, f))
        if i % 100 == 99:
            session.commit()
    session.commit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench-out" / "ui")
    parser.add_argument("--kernels", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--no-results", action="store_true")
    args = parser.parse_args()

    work = args.workdir
    shutil.rmtree(work, ignore_errors=True)
    data = work / "data"
    data.mkdir(parents=True)
    settings = replace(Settings(), data_dir=data, secret_key="bench")
    upgrade(settings.resolved_database_url)
    app = create_app(settings)
    session = app.extensions["goodput.sessionmaker"]()
    create_user(session, "bench", "bench-password")

    t0 = time.perf_counter()
    base = work / "base.duckdb"
    ingest(BASE, base)
    small = data / "reports" / "small" / "trace.duckdb"
    small.parent.mkdir(parents=True)
    ingest(SMALL, small)
    small_result = analyze([small], labels=["rank0.sqlite"])
    seed_runs(session, small_result, "reports/small/trace.duckdb", args.runs - 1)
    seeded_s = time.perf_counter() - t0

    # The big run, stored the way the workers store it (claim, publish, analyze, persist).
    job = session.query(Job).filter_by(name="job-00").one()
    run = Run(job=job, tags={"branch": "main"}, submitter="bench", source="api")
    session.add(run)
    session.flush()
    report = Report(run_id=run.id, name="big.sqlite", kind="nsys", sha256="b" * 64, size_bytes=1, upload_path="x")
    session.add(report)
    session.commit()
    assert pipeline.claim_report(session, report.id, "bench/1", 3600)
    big = pipeline.trace_path_for(settings, report.id)
    big.parent.mkdir(parents=True)
    t0 = time.perf_counter()
    counts = replicate(base, big, args.kernels)
    build_s = time.perf_counter() - t0
    pipeline.finish_ingest(session, report.id, "bench/1", big, "nsys", {"counts": counts}, data)
    inputs = pipeline.claim_run_analysis(session, run.id, "bench/1", 3600)
    t0 = time.perf_counter()
    result = analyze([big], labels=["big.sqlite"])
    analyze_s = time.perf_counter() - t0
    assert pipeline.finish_run_analysis(session, run.id, "bench/1", inputs, result)
    session.close()

    client = app.test_client()
    token = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/login").get_data(as_text=True)).group(1)
    assert client.post("/login", data={"username": "bench", "password": "bench-password",
                                       "csrf_token": token}).status_code == 302
    con = duckdb.connect(str(big), read_only=True)
    lo, hi = con.execute("SELECT min(start_ns), max(end_ns) FROM kernels").fetchone()
    con.close()
    rid, rep = run.id, report.id
    zoom = f"start_ns={lo + (hi - lo) // 2}&end_ns={lo + (hi - lo) // 2 + (hi - lo) // 1000}"
    n = args.repeat
    rows = [
        ("run page (HTML), 10M-kernel report", f"/runs/{rid}", n),
        ("timeline window, whole report, 1,400 px", f"/runs/{rid}/reports/{rep}/timeline.json?buckets=1400", 5),
        ("timeline window, 0.1 % zoom, 1,400 px", f"/runs/{rid}/reports/{rep}/timeline.json?buckets=1400&{zoom}", n),
        ("kernel + NVTX tables JSON, 10M kernels", f"/runs/{rid}/reports/{rep}/tables.json", 5),
        (f"runs list, default page (50 of {args.runs})", "/", 50),
        ("runs list, job filter", "/?job=job-07", 50),
        ("runs list, sorted by goodput, page 5", "/?sort=goodput&order=asc&page=5", 50),
        ("runs list, tag filter + 100 per page", "/?tag=branch=dev&page_size=100", 50),
    ]
    measured = [(label, path, timed(client, path, k)) for label, path, k in rows]
    lines = [
        "# UI latency",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, Python {platform.python_version()}, "
        "metadata DB SQLite (default settings), server time through Flask's test client (no network).",
        "",
        "    .venv/bin/python benchmarks/ui_latency.py",
        "",
        f"Report: {counts['kernels']:,} kernels, {counts['memcpy']:,} memcpy, {counts['cuda_api']:,} CUDA API calls "
        f"(cloverleaf-devsync replicated in DuckDB in {build_s:.0f} s; analysis {analyze_s:.0f} s, "
        f"{len(result.findings)} findings). Runs: {args.runs:,} over 20 jobs (seeded in {seeded_s:.0f} s).",
        "",
        "| request | n | p50 ms | p95 ms | max ms | response bytes |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, _path, m in measured:
        lines.append(f"| {label} | {m['n']} | {m['p50_ms']:.1f} | {m['p95_ms']:.1f} | {m['max_ms']:.1f} | {m['bytes']:,} |")
    page = measured[0][2]["p95_ms"]
    lists = max(m["p95_ms"] for label, _p, m in measured if label.startswith("runs list"))
    lines += [
        "",
        f"Targets: run page under 1 s → p95 {page:.0f} ms ({'met' if page < 1000 else 'NOT met'}); "
        f"runs list p95 under 200 ms → worst p95 {lists:.0f} ms ({'met' if lists < 200 else 'NOT met'}).",
        "",
        "The run page reads only the metadata DB (summaries, findings); the browser then fetches the timeline",
        "window (at most one box per lane, category and pixel column) and the kernel/NVTX tables",
        "(the 500 names with the most time) from the report's DuckDB file.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_results:
        RESULTS.write_text(text)


if __name__ == "__main__":
    main()
