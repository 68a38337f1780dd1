"""Run timeline latency: the all-ranks timeline of a six-rank run with ``--kernels`` kernels in total.

Builds ``--ranks`` reports by replicating a real corpus export's GPU activity and CUDA API rows inside DuckDB
(as ``benchmarks/ui_latency.py`` does) to ``kernels / ranks`` kernels each, gives each report its own
session start (ranks a few ms apart, as on a real cluster), stores them as one run, then times through
Flask's test client (server time, no network):

* what the ingest worker prepares per report (overview and lane catalogue),
* the first window of the whole run in a fresh process (what the first paint waits for),
* the same window warm, and zoom steps (W: the span times 0.7 around the middle) down to 0.1 % of the run,
  each timed ``--rounds`` times with the request path before and after its last tuning interleaved,
* a kernel click (launch + collective lookup) and a merged Chrome trace export of a 1 % window.

    .venv/bin/python benchmarks/run_timeline_latency.py                          # 6 ranks, 10M kernels
    .venv/bin/python benchmarks/run_timeline_latency.py --kernels 600000 --rounds 1 --no-results   # quick check
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import re
import shutil
import statistics
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from ui_latency import BASE, replicate  # noqa: E402

from analysis.api import ingest  # noqa: E402
from analysis.views import run_overview  # noqa: E402
from app import create_app  # noqa: E402
from app.db import upgrade  # noqa: E402
from app.models import Job, Report, Run  # noqa: E402
from app.services.accounts.users import create_user  # noqa: E402
from app.services.jobs import pipeline  # noqa: E402
from app.services.pages import web_timeline  # noqa: E402
from app.settings import Settings  # noqa: E402

RESULTS = ROOT / "benchmarks" / "RESULTS-run-timeline.md"
PX = 1400


CPU_MS: list[float] = []   # process CPU time (all threads, DuckDB's included) of each timed request


def _get(client, path: str) -> tuple[float, int]:
    c0, t0 = time.process_time(), time.perf_counter()
    resp = client.get(path)
    body = resp.get_data()
    elapsed = time.perf_counter() - t0
    CPU_MS.append(1000 * (time.process_time() - c0))
    assert resp.status_code == 200, (path, resp.status_code, body[:300])
    return elapsed, len(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench-out" / "run-timeline")
    parser.add_argument("--kernels", type=int, default=10_000_000, help="kernels in total, over all ranks")
    parser.add_argument("--ranks", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3, help="times each request is timed per configuration")
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

    base = work / "base.duckdb"
    ingest(BASE, base)
    t0 = time.perf_counter()
    first = work / "rank0.duckdb"
    counts = replicate(base, first, math.ceil(args.kernels / args.ranks))
    build_s = time.perf_counter() - t0
    job = Job(name="six-ranks")
    run = Run(job=job, tags={}, submitter="bench", source="api", status="ready", analysis_status="ready")
    session.add(run)
    session.flush()
    for rank in range(args.ranks):
        report = Report(run_id=run.id, name=f"rank{rank}.sqlite", kind="nsys", rank=rank, host=f"node{rank // 2:02d}",
                        sha256=f"{rank:064x}", size_bytes=1, upload_path="x")
        session.add(report)
        session.commit()
        assert pipeline.claim_report(session, report.id, "bench/1", 3600)
        path = pipeline.trace_path_for(settings, report.id)
        path.parent.mkdir(parents=True)
        shutil.copyfile(first, path)
        con = duckdb.connect(str(path))
        start = con.execute("SELECT value FROM meta WHERE key = 'session_start_utc_ns'").fetchone()
        base_start = int(start[0]) if start and start[0] else 1_700_000_000_000_000_000
        con.execute("DELETE FROM meta WHERE key IN ('session_start_utc_ns', 'rank')")
        con.execute("INSERT INTO meta VALUES ('session_start_utc_ns', ?), ('rank', ?)",
                    [str(base_start + rank * 3_000_000), str(rank)])   # ranks start 3 ms apart
        con.close()
        pipeline.finish_ingest(session, report.id, "bench/1", path, "nsys", {"counts": counts}, data)
    session.close()

    client = app.test_client()
    token = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/login").get_data(as_text=True)).group(1)
    assert client.post("/login", data={"username": "bench", "password": "bench-password",
                                       "csrf_token": token}).status_code == 302
    rid = run.id

    def fresh() -> None:
        web_timeline._cache.clear()
        for trace in getattr(web_timeline._local, "traces", {}).values():
            trace.close()
        web_timeline._local.__dict__.clear()      # fresh connections: nothing of another pass kept warm

    # What the ingest worker does after publishing each report (overview + lane catalogue), timed.
    prepared = []
    for path in sorted((data / "reports").glob("*/trace.duckdb")):
        t0 = time.perf_counter()
        run_overview.prepare(path)
        prepared.append(time.perf_counter() - t0)
    ov_bytes = sum(f.stat().st_size for f in (data / "reports").glob("*/*.parquet"))

    # Configurations timed interleaved (A, B, B, A, ... per request) so the machine's load drifts alike on both:
    # "before": the request path as it was (three overview levels, HUGEINT pixel columns), "after": as it is.
    configs = {"before": (3, False), "after": (len(run_overview.LEVELS), True)}

    def use(name: str) -> None:
        run_overview.USED_LEVELS, run_overview.BIGINT_BUCKETS = configs[name]

    fresh()
    cold = {}
    for name in configs:            # first window of a fresh process: catalogue from the lanes files
        use(name)
        fresh()
        cold[name] = _get(client, f"/runs/{rid}/timeline.json?buckets={PX}")[0]
    win = client.get(f"/runs/{rid}/timeline.json?buckets={PX}").get_json()
    size = len(client.get(f"/runs/{rid}/timeline.json?buckets={PX}").get_data())
    lo, hi = win["extent"]
    mid = (lo + hi) // 2
    windows, span = [("whole", None, None)], hi - lo
    while span > (hi - lo) / 1000:
        span = int(span * 0.7)
        windows.append((f"{100 * span / (hi - lo):.3f} %", mid - span // 2, mid + span // 2))
    times: dict[str, dict[str, list[float]]] = {n: {w[0]: [] for w in windows} for n in configs}
    cpu: dict[str, dict[str, list[float]]] = {n: {w[0]: [] for w in windows} for n in configs}
    order = list(configs)
    for r in range(args.rounds):
        for label, w0, w1 in windows:
            q = f"/runs/{rid}/timeline.json?buckets={PX}" + ("" if w0 is None else f"&start_ns={w0}&end_ns={w1}")
            for name in (order if r % 2 == 0 else order[::-1]):
                use(name)
                times[name][label].append(1000 * _get(client, q)[0])
                cpu[name][label].append(CPU_MS[-1])
    use("after")
    med = {n: {w: statistics.median(v) for w, v in per.items()} for n, per in times.items()}
    for n in configs:
        print(f"{n}: per-step medians (ms):", " ".join(f"{w}={m:.0f}" for w, m in med[n].items()), file=sys.stderr)
    zoom = {n: [m for w, m in med[n].items() if w != "whole"] for n in configs}
    cmed = {n: {w: statistics.median(v) for w, v in per.items()} for n, per in cpu.items()}
    czoom = {n: [m for w, m in cmed[n].items() if w != "whole"] for n in configs}
    step_ms = sorted(zoom["after"])
    lane = next(lane for g in win["groups"] for lane in g["lanes"] if lane["kind"] == "gpu" and lane["boxes"]["rows"])
    g = next(g for g in win["groups"] if lane in g["lanes"])
    rows = lane["boxes"]["rows"]
    t_ns = rows[len(rows) // 2][lane["boxes"]["fields"].index("start_ns")]
    sel_s, _ = _get(client, f"/runs/{rid}/timeline/select.json?report_id={g['report_id']}&pid={g['pid']}"
                            f"&device={lane['device']}&stream={lane['stream']}&t_ns={t_ns}")
    w = (hi - lo) // 100
    trace_s, trace_bytes = _get(client, f"/runs/{rid}/trace.json?start_ns={mid}&end_ns={mid + w}")
    boxes = win["boxes"]
    lanes = sum(len(g["lanes"]) for g in win["groups"])

    def row(label: str, key) -> str:
        return f"| {label} | {key('before'):.0f} | {key('after'):.0f} |"

    lines = [
        "# Run timeline latency",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, Python {platform.python_version()}, "
        "server time through Flask's test client (no network), DuckDB 2 threads per report, "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs.",
        "",
        f"    .venv/bin/python benchmarks/run_timeline_latency.py --kernels {args.kernels} --ranks {args.ranks}"
        f" --rounds {args.rounds}",
        "",
        f"Run: {args.ranks} ranks x {counts['kernels']:,} kernels = {args.ranks * counts['kernels']:,} kernels, "
        f"{args.ranks * counts['cuda_api']:,} CUDA API calls (cloverleaf-devsync replicated in {build_s:.0f} s); "
        f"{len(win['groups'])} rank groups, {lanes} lanes, {boxes:,} boxes in the whole-run window ({size:,} bytes).",
        f"Ingest-side overview + lane catalogue per report: median {statistics.median(prepared):.1f} s; overview files "
        f"{ov_bytes:,} bytes for {args.ranks} reports.",
        "",
        f"Each request timed {args.rounds} times, the two request paths interleaved (A B, then B A, ...); medians. "
        "before: three overview levels and HUGEINT pixel columns (the code before this change); after: four "
        "levels (windows down to ~1 % of a report from the overview) and BIGINT pixel columns where exact.",
        "",
        "| request | ms, before | ms, after |",
        "|---|---:|---:|",
        row("first window, fresh process (catalogue from the lanes files), 1400 px", lambda n: 1000 * cold[n]),
        row("whole-run window, warm", lambda n: med[n]["whole"]),
        row(f"zoom step (x0.7 down to 0.1 %), median of {len(step_ms)} steps", lambda n: statistics.median(zoom[n])),
        row("zoom step, worst step", lambda n: max(zoom[n])),
        "",
        "CPU time of the same requests (process time, all threads: what a request costs whatever the load):",
        "",
        "| request | CPU ms, before | CPU ms, after |",
        "|---|---:|---:|",
        row("whole-run window, warm", lambda n: cmed[n]["whole"]),
        row("zoom step, median", lambda n: statistics.median(czoom[n])),
        row("zoom step, worst step", lambda n: max(czoom[n])),
        "",
        "| request (after) | ms |",
        "|---|---:|",
        f"| kernel click (launch + collective) | {1000 * sel_s:.0f} |",
        f"| merged Chrome trace, 1 % window ({trace_bytes:,} bytes) | {1000 * trace_s:.0f} |",
        "",
        f"Targets: first paint under 1 s → first window {1000 * cold['after']:.0f} ms "
        f"({'met' if cold['after'] < 1 else 'NOT met'}, before the browser draws); zoom step under 300 ms → worst "
        f"{step_ms[-1]:.0f} ms ({'met' if step_ms[-1] < 300 else 'NOT met'}). The browser redraws the boxes it "
        "has at the new scale at once and replaces them when the refined window arrives.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_results:
        RESULTS.write_text(text)


if __name__ == "__main__":
    main()
